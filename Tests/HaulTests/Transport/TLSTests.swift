import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulNIO
import HaulTestServer
import HaulTestSupport
import HTTPTypes
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// HTTPS on every transport that speaks it: each bad certificate fails at once with a message that names the host
/// and the reason, the settings trust what they name, client certificates, and a refused connection fails fast.
@Suite("TLS", .timeLimit(.minutes(2)))
struct TLSTests {
    static let kinds: [TransportKind] = [.asyncHTTPClientOverTLS, .nioOverTLS]

    static let badCertificates: [(TestServer.CertificateKind, String)] = [
        (.expired, "certificate for 127.0.0.1 has expired"),
        (.notYetValid, "certificate for 127.0.0.1 is not valid yet"),
        (.wrongHost, "host name mismatch: certificate is for example.test"),
        (.selfSigned, "certificate not trusted for 127.0.0.1: self-signed certificate"),
        (.unknownCA, "certificate not trusted for 127.0.0.1: issued by an unknown CA (Unknown Test CA)"),
    ]

    @Test(
        "a bad certificate fails for good at the first attempt, says why, and leaves nothing",
        arguments: kinds, badCertificates)
    func badCertificate(kind: TransportKind, bad: (TestServer.CertificateKind, String)) async throws {
        try await TestServer.withRunning(TestTLS.server(certificate: bad.0)) { server in
            let dir = try TemporaryDirectory()
            let clock = RecordingClock()
            let downloader = Downloader(
                transport: kind.makeTransport(), configuration: kind.configuration(clock: clock))
            let url = server.url(path: "/bytes/secret.bin", query: ["size": "1000"])
            let error = try await #require(throws: DownloadError.self) {
                try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            }
            #expect(error.code == .transport)
            #expect(error.message == bad.1)
            #expect(clock.recorded.isEmpty, "retried: \(clock.recorded)")
            #expect(server.stats.requestCount == 0)
            #expect(dir.contents().isEmpty)
        }
    }

    @Test("without the CA in the settings the test CA is unknown; verifiesPeer false accepts even a self-signed one")
    func trustComesFromTheSettings() async throws {
        try await TestServer.withRunning(TestTLS.server()) { server in
            let dir = try TemporaryDirectory()
            let url = server.url(path: "/bytes/a.bin", query: ["size": "2000"])
            let systemOnly = Downloader(transport: AsyncHTTPClientTransport.shared, configuration: testConfiguration())
            let error = try await #require(throws: DownloadError.self) {
                try await systemOnly.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            }
            #expect(error.message == "certificate not trusted for 127.0.0.1: issued by an unknown CA (Haul Test CA)")
        }
        try await TestServer.withRunning(TestTLS.server(certificate: .selfSigned)) { server in
            let dir = try TemporaryDirectory()
            var configuration = testConfiguration()
            configuration.tls.verifiesPeer = false
            let downloader = Downloader(transport: AsyncHTTPClientTransport.shared, configuration: configuration)
            let result = try await downloader.download(
                DownloadRequest(
                    url: server.url(path: "/bytes/b.bin", query: ["size": "2000"]), destination: .directory(dir.url)))
            #expect(contentsOf(result.fileURL) == TestServer.expectedBytes(name: "b.bin", size: 2000))
        }
    }

    @Test(
        "a CA directory named by subject hash (as c_rehash makes it) is trusted, alone or beside a CA file",
        arguments: kinds)
    func caDirectory(kind: TransportKind) async throws {
        try await TestServer.withRunning(TestTLS.server()) { server in
            let dir = try TemporaryDirectory()
            let hashing = try ChildProcess("openssl", ["x509", "-noout", "-subject_hash", "-in", TestTLS.caFile])
            let hash = await hashing.finish().stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            try #require(hash.count == 8, "openssl printed no subject hash: '\(hash)'")
            let certificates = dir.file("certs")
            try FileManager.default.createDirectory(at: certificates, withIntermediateDirectories: true)
            try FileManager.default.copyItem(
                atPath: TestTLS.caFile, toPath: certificates.appendingPathComponent("\(hash).0").path)
            var configuration = testConfiguration()
            configuration.tls = TLSSettings(caDirectory: certificates.path)
            let downloader = Downloader(transport: kind.makeTransport(), configuration: configuration)
            let result = try await downloader.download(
                DownloadRequest(
                    url: server.url(path: "/bytes/d.bin", query: ["size": "4000"]), destination: .file(dir.file("d"))))
            #expect(contentsOf(result.fileURL) == TestServer.expectedBytes(name: "d.bin", size: 4000))

            // A file and a directory together (as SSL_CERT_FILE and SSL_CERT_DIR often are): both are trusted.
            let other = dir.file("other-ca.pem")
            try TestCertificateAuthority(commonName: "Another CA").writeCertificate(to: other)
            let empty = dir.file("empty")
            try FileManager.default.createDirectory(at: empty, withIntermediateDirectories: true)
            for (file, directory) in [(other.path, certificates.path), (TestTLS.caFile, empty.path)] {
                configuration.tls = TLSSettings(caFile: file, caDirectory: directory)
                let both = Downloader(transport: kind.makeTransport(), configuration: configuration)
                let name = "both-\(directory == empty.path)"
                let again = try await both.download(
                    DownloadRequest(
                        url: server.url(path: "/bytes/\(name)", query: ["size": "4000"]),
                        destination: .file(dir.file(name))))
                #expect(contentsOf(again.fileURL) == TestServer.expectedBytes(name: name, size: 4000))
            }
        }
    }

    @Test("a server that asks for a client certificate refuses none, and accepts one from its CA", arguments: kinds)
    func clientCertificate(kind: TransportKind) async throws {
        try await TestServer.withRunning(TestTLS.server(requiresClientCertificate: true)) { server in
            let dir = try TemporaryDirectory()
            let url = server.url(path: "/bytes/c.bin", query: ["size": "3000"])
            let clock = RecordingClock()
            let without = Downloader(transport: kind.makeTransport(), configuration: kind.configuration(clock: clock))
            let error = try await #require(throws: DownloadError.self) {
                try await without.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            }
            #expect(
                error.message
                    == "127.0.0.1:\(server.port) refused the TLS handshake: it asks for a client certificate it trusts")
            #expect(clock.recorded.isEmpty && dir.contents().isEmpty)

            let issued = try TestTLS.authority.clientCertificate()
            let certificate = dir.file("client.pem")
            let key = dir.file("client.key")
            try Data(issued.certificatePEM.utf8).write(to: certificate)
            try Data(issued.keyPEM.utf8).write(to: key)
            let both = dir.file("both.pem")
            try Data((issued.certificatePEM + "\n" + issued.keyPEM).utf8).write(to: both)
            for (certificateFile, keyFile) in [(certificate.path, Optional(key.path)), (both.path, nil)] {
                var configuration = kind.configuration()
                configuration.tls.clientCertificateFile = certificateFile
                configuration.tls.clientKeyFile = keyFile
                let downloader = Downloader(transport: kind.makeTransport(), configuration: configuration)
                let result = try await downloader.download(
                    DownloadRequest(url: url, destination: .file(dir.file("out-\(keyFile == nil)"))))
                #expect(contentsOf(result.fileURL) == TestServer.expectedBytes(name: "c.bin", size: 3000))
            }
        }
    }

    /// The default policy's waits are random (full jitter, 1.75 s on average, at most 3.5 s), so they are recorded
    /// rather than slept: what is timed is the transport's part, four connection attempts, which must not hide a
    /// connect retry loop of its own (AsyncHTTPClient's would wait out its 10 s connect timeout on each attempt).
    @Test("a refused connection fails fast with the default retries: 4 attempts, no transport retries of its own")
    func refusedFailsFast() async throws {
        let port = try freeLoopbackPort()
        for kind in TransportKind.allCases {
            let dir = try TemporaryDirectory()
            let clock = RecordingClock()
            var configuration = kind.configuration(clock: clock)
            configuration.retryPolicy = .default
            let downloader = Downloader(transport: kind.makeTransport(), configuration: configuration)
            let scheme = kind.usesTLS ? "https" : "http"
            let url = try #require(URL(string: "\(scheme)://127.0.0.1:\(port)/file.bin"))
            let started = ContinuousClock.now
            let error = try await #require(throws: DownloadError.self) {
                try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            }
            let attempts = ContinuousClock.now - started
            #expect(clock.recorded.count == 3, "\(kind): \(clock.recorded)")
            #expect(clock.recorded.allSatisfy { $0 <= .seconds(2) }, "\(kind): \(clock.recorded)")
            #expect(attempts < .seconds(5), "\(kind): \(attempts)")
            if kind != .urlSession { #expect(error.message == "connection refused (127.0.0.1:\(port))", "\(kind)") }
            #expect(dir.contents().isEmpty)
        }
    }

    /// `.invalid` is reserved (RFC 6761): no resolver can give it an address, with or without a network.
    @Test("a host that does not exist fails at once, not retried, on every transport and scheme")
    func noSuchHost() async throws {
        for kind in TransportKind.allCases {
            let dir = try TemporaryDirectory()
            let clock = RecordingClock()
            let downloader = Downloader(
                transport: kind.makeTransport(), configuration: kind.configuration(clock: clock))
            let scheme = kind.usesTLS ? "https" : "http"
            let url = try #require(URL(string: "\(scheme)://nosuch.invalid/file.bin"))
            let error = try await #require(throws: DownloadError.self) {
                try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            }
            if kind != .urlSession {
                #expect(error.message == "no such host: nosuch.invalid", "\(kind)")
                #expect(clock.recorded.isEmpty, "\(kind) retried: \(clock.recorded)")
            }
            #expect(dir.contents().isEmpty)
        }
    }

    @Test(
        "a connection that is never accepted times out with the connect timeout, on each NIO-based transport",
        .enabled(if: TestPlatform.isLinux, "relies on Linux dropping the SYNs of a full accept queue (backlog 0)"))
    func connectTimeout() async throws {
        try await withUnacceptingListener { port in
            let client = AsyncHTTPClientTransport(connectTimeout: .seconds(1))
            let cases: [(String, any HTTPTransport)] = [
                ("http", NIOTransport()), ("http", client), ("https", NIOTransport(fallback: client)),
            ]
            for (scheme, transport) in cases {
                var configuration = testConfiguration(retries: 0)
                configuration.connectTimeout = .seconds(1)
                configuration.tls = TestTLS.settings
                let downloader = Downloader(transport: transport, configuration: configuration)
                let url = try #require(URL(string: "\(scheme)://127.0.0.1:\(port)/slow.bin"))
                let dir = try TemporaryDirectory()
                let error = try await #require(throws: DownloadError.self) {
                    try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
                }
                #expect(
                    error.message == "timed out connecting to 127.0.0.1:\(port) after 1 s", "\(scheme) \(transport)")
            }
            try await client.shutdown()
        }
    }

    @Test("a redirect from http to https is a change of origin: credentials stay behind")
    func schemeChangeIsOriginChange() async throws {
        try await TestServer.withRunning(TestTLS.server()) { secure in
            try await TestServer.withRunning { plain in
                let dir = try TemporaryDirectory()
                let target = secure.url(path: "/bytes/t.bin", query: ["size": "100"])
                let url = plain.url(path: "/bytes/s.bin", query: ["size": "100", "redirectTo": target.absoluteString])
                var fields = HTTPFields()
                fields[.authorization] = "Bearer secret"
                let downloader = Downloader(
                    transport: TransportKind.nioOverTLS.makeTransport(),
                    configuration: TransportKind.nioOverTLS.configuration())
                let result = try await downloader.download(
                    DownloadRequest(url: url, destination: .file(dir.file("t")), headerFields: fields))
                #expect(contentsOf(result.fileURL) == TestServer.expectedBytes(name: "t.bin", size: 100))
                #expect(plain.stats.requests.first?.authorization == "Bearer secret")
                #expect(secure.stats.requests.count == 1 && secure.stats.requests.first?.authorization == nil)
            }
        }
    }

    @Test("settings that name a missing or unreadable file fail before any request, naming the file")
    func settingsAreChecked() throws {
        let dir = try TemporaryDirectory()
        let missing = dir.file("missing.pem").path
        #expect(throws: DownloadError.self) { try TLSSettings(caFile: missing).validate() }
        #expect(throws: DownloadError.self) { try TLSSettings(caDirectory: missing).validate() }
        #expect(throws: DownloadError.self) { try TLSSettings(clientKeyFile: TestTLS.caFile).validate() }
        do {
            try TLSSettings(caFile: missing).validate()
        } catch {
            #expect(error.message == "CA certificate file '\(missing)' does not exist" && error.path == missing)
        }
        try TLSSettings(caFile: TestTLS.caFile, caDirectory: dir.url.path).validate()
        let environment = TLSSettings.fromEnvironment(["SSL_CERT_FILE": "/a.pem", "SSL_CERT_DIR": ""])
        #expect(environment == TLSSettings(caFile: "/a.pem"))
    }

    @Test("a CA file that holds no certificate fails every https request for good, naming the file", arguments: kinds)
    func unusableCAFile(kind: TransportKind) async throws {
        try await TestServer.withRunning(TestTLS.server()) { server in
            let dir = try TemporaryDirectory()
            let garbage = dir.file("garbage.pem")
            try Data("not a certificate\n".utf8).write(to: garbage)
            var configuration = kind.configuration()
            configuration.tls.caFile = garbage.path
            let downloader = Downloader(transport: kind.makeTransport(), configuration: configuration)
            let error = try await #require(throws: DownloadError.self) {
                try await downloader.download(
                    DownloadRequest(
                        url: server.url(path: "/bytes/g", query: ["size": "10"]), destination: .file(dir.file("g"))))
            }
            #expect(error.message.contains("CA certificate file '\(garbage.path)'"))
            #expect(server.stats.connectionsAccepted == 0)
        }
    }
}

/// Runs `body` with the port of a loopback listener whose accept queue is full, so that a new connection is never
/// accepted: the kernel drops its SYN and the client waits out its connect timeout.
private func withUnacceptingListener(_ body: (Int) async throws -> Void) async throws {
    let listener = socket(AF_INET, streamSocket, 0)
    defer { close(listener) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let ready = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(listener, $0, length) == 0 && listen(listener, 0) == 0 && getsockname(listener, $0, &length) == 0
        }
    }
    try #require(ready)
    // A backlog of 0 holds one connection; two fill it for sure.
    var fillers: [Int32] = []
    defer { fillers.forEach { close($0) } }
    for _ in 0..<2 {
        let filler = socket(AF_INET, streamSocket, 0)
        _ = fcntl(filler, F_SETFL, O_NONBLOCK)  // Darwin has no SOCK_NONBLOCK flag for socket(2)
        fillers.append(filler)
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(filler, $0, length) }
        }
    }
    try await Task.sleep(for: .milliseconds(100))
    try await body(Int(UInt16(bigEndian: address.sin_port)))
}
