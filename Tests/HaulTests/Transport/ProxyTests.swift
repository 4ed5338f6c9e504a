import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulNIO
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// Downloads through real proxies on loopback (Debian's tinyproxy and squid, microsocks; `scripts/test` installs
/// them): every scheme through every kind of proxy on the transports that speak it, proxy authentication, `no_proxy`,
/// a proxy that cannot be reached or cuts the tunnel, and per-host limits that count origins, not the proxy.
@Suite(
    .serialized, .timeLimit(.minutes(3)),
    .enabled(if: TestPlatform.isLinux, "runs Debian's tinyproxy, squid and microsocks, which scripts/test installs"))
struct ProxyTests {
    /// The transports a proxy setting reaches.
    enum Kind: String, CaseIterable, CustomTestStringConvertible {
        case nio, asyncHTTPClient
        var testDescription: String { rawValue }

        func transport() -> any HTTPTransport {
            switch self {
            case .nio: NIOTransport()
            case .asyncHTTPClient: AsyncHTTPClientTransport()
            }
        }

        /// Whether the transport speaks to `proxy` (AsyncHTTPClient: plain HTTP proxies, SOCKS5 without a password
        /// with names resolved by the proxy).
        func speaks(_ proxy: Proxy) -> Bool {
            switch self {
            case .nio: true
            case .asyncHTTPClient: proxy.kind == .http || (proxy.kind == .socks5h && proxy.credentials == nil)
            }
        }
    }

    /// A downloader trusting the test CA (for the servers and for an `https://` proxy), through `proxy`.
    static func downloader(
        _ kind: Kind, proxy: ProxyConfiguration, clock: any BackoffClock = RecordingClock(), retries: Int = 3
    ) -> Downloader {
        var configuration = testConfiguration(clock: clock, retries: retries)
        configuration.tls = TestTLS.settings
        configuration.proxy = proxy
        return Downloader(transport: kind.transport(), configuration: configuration)
    }

    /// Runs `body` with a plain and a TLS test server.
    static func withServers(_ body: (_ plain: TestServer, _ secure: TestServer) async throws -> Void) async throws {
        try await TestServer.withRunning { plain in
            try await TestServer.withRunning(TestTLS.server()) { secure in try await body(plain, secure) }
        }
    }

    /// Downloads a 300 KB file and a cut one (closed after 100 KB once, resumed with Range) from each server
    /// through `proxy`, checking the bytes; or, where the transport does not speak that proxy, the error saying so.
    static func fetchEverything(
        through proxy: Proxy, plain: TestServer, secure: TestServer
    ) async throws {
        for kind in Kind.allCases {
            let downloader = downloader(kind, proxy: .all(proxy))
            for server in [plain, secure] {
                let dir = try TemporaryDirectory()
                for (name, query) in [("whole.bin", [:]), ("cut.bin", ["cutAfter": "100000", "cutTimes": "1"])] {
                    let url = server.url(path: "/bytes/\(name)", query: query.merging(["size": "300000"]) { a, _ in a })
                    let request = DownloadRequest(url: url, destination: .file(dir.file(name)))
                    guard kind.speaks(proxy) else {
                        let error = try await #require(throws: DownloadError.self) {
                            try await downloader.download(request)
                        }
                        #expect(error.message.contains("cannot use the proxy"), "\(kind) \(error)")
                        continue
                    }
                    let result = try await downloader.download(request)
                    #expect(
                        contentsOf(result.fileURL) == TestServer.expectedBytes(name: name, size: 300_000),
                        "\(kind) \(url)")
                }
                if kind.speaks(proxy) {
                    // Resumed from the bytes that got through: a relay cut short may lose some it had in flight.
                    let ranges = server.stats.requests.filter { $0.path == "/bytes/cut.bin" }.compactMap(\.range)
                    let from = ranges.last.flatMap { Int($0.dropFirst("bytes=".count).dropLast()) } ?? 0
                    #expect(ranges.count == 1 && from > 0 && from <= 100_000, "\(kind) \(ranges)")
                }
                server.resetStats()
            }
        }
    }

    @Test("http and https through an HTTP proxy: absolute form and CONNECT, seen in the proxy's own log")
    func httpProxy() async throws {
        try await Self.withServers { plain, secure in
            try await Tinyproxy.withRunning { tinyproxy in
                try await Self.fetchEverything(
                    through: try Proxy(url: tinyproxy.url.absoluteString), plain: plain, secure: secure)
                let seen = tinyproxy.requests
                #expect(seen.contains { $0.hasPrefix("GET http://127.0.0.1:\(plain.port)/bytes/whole.bin") }, "\(seen)")

                // Kept alive: one tunnel carries one download after another.
                let connects = seen.filter { $0.hasPrefix("CONNECT") }.count
                secure.resetStats()
                let dir = try TemporaryDirectory()
                let downloader = Self.downloader(.nio, proxy: .all(try Proxy(url: tinyproxy.url.absoluteString)))
                for index in 0..<3 {
                    let url = secure.url(path: "/bytes/k\(index)", query: ["size": "1000"])
                    _ = try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
                }
                #expect(tinyproxy.requests.filter { $0.hasPrefix("CONNECT") }.count == connects + 1)
                #expect(secure.stats.connectionsAccepted == 1 && secure.stats.requestCount == 3)
                #expect(seen.contains { $0.hasPrefix("CONNECT 127.0.0.1:\(secure.port)") }, "\(seen)")
            }
        }
    }

    @Test("http and https through an HTTPS proxy (TLS to the proxy, TLS inside the tunnel)")
    func httpsProxy() async throws {
        try await Self.withServers { plain, secure in
            try await SquidTLS.withRunning { squid in
                try await Self.fetchEverything(
                    through: try Proxy(url: squid.url.absoluteString), plain: plain, secure: secure)
                let seen = squid.requests.joined(separator: "\n")
                #expect(seen.contains("127.0.0.1:\(plain.port)/bytes/whole.bin"), "\(seen)")
                #expect(seen.contains("CONNECT 127.0.0.1:\(secure.port)"), "\(seen)")
            }
        }
    }

    @Test("http and https through SOCKS5, names resolved here (socks5) and by the proxy (socks5h)")
    func socksProxy() async throws {
        try await Self.withServers { plain, secure in
            try await Microsocks.withRunning { socks in
                for scheme in ["socks5", "socks5h"] {
                    let proxy = try Proxy(url: "\(scheme)://127.0.0.1:\(socks.port)")
                    try await Self.fetchEverything(through: proxy, plain: plain, secure: secure)
                }
                // By name: the origin's host goes to the proxy as a name (socks5h) or as the address found here.
                for scheme in ["socks5", "socks5h"] {
                    let dir = try TemporaryDirectory()
                    let downloader = Self.downloader(
                        .nio, proxy: .all(try Proxy(url: "\(scheme)://127.0.0.1:\(socks.port)")))
                    let url = secure.url(path: "/bytes/named.bin", query: ["size": "1000"], host: "localhost")
                    _ = try await downloader.download(DownloadRequest(url: url, destination: .file(dir.file("n"))))
                }
            }
        }
    }

    @Test(
        "proxy authentication: Basic to an HTTP proxy, RFC 1929 to SOCKS5; a 407 or a refusal fails at once, naming the proxy"
    )
    func proxyAuthentication() async throws {
        try await Self.withServers { plain, secure in
            let credentials = (user: "pu", password: "pr0xy-s3cret")
            try await Tinyproxy.withRunning(credentials: credentials) { tinyproxy in
                try await Microsocks.withRunning(credentials: credentials) { socks in
                    for base in [tinyproxy.url, socks.url] {
                        let host = "127.0.0.1:\(base.port ?? 0)"
                        let scheme = base.scheme ?? ""
                        let good = try Proxy(url: "\(scheme)://pu:pr0xy-s3cret@\(host)")
                        let none = try Proxy(url: "\(scheme)://\(host)")
                        let wrong = try Proxy(url: "\(scheme)://pu:nope@\(host)")
                        for server in [plain, secure] {
                            let dir = try TemporaryDirectory()
                            let url = server.url(path: "/bytes/auth.bin", query: ["size": "1000"])
                            let request = DownloadRequest(url: url, destination: .file(dir.file("a")))
                            _ = try await Self.downloader(.nio, proxy: .all(good)).download(request)
                            if scheme == "http" {
                                _ = try await Self.downloader(.asyncHTTPClient, proxy: .all(good)).download(
                                    request.renamed("b", in: dir))
                            }
                            // tinyproxy answers refused credentials with 401 (407 only for none): through a tunnel
                            // that is the proxy's; in absolute form it could be the server's, which the message says.
                            for (proxy, says) in [
                                (none, "a user and password (give them in the proxy URL)"),
                                (wrong, "refused the user and password"),
                            ] {
                                let clock = RecordingClock()
                                let error = try await #require(throws: DownloadError.self) {
                                    try await Self.downloader(.nio, proxy: .all(proxy), clock: clock).download(
                                        request.renamed("c", in: dir))
                                }
                                #expect(
                                    error.message.contains(says) && error.message.contains(host), "\(proxy) \(error)")
                                #expect(
                                    !error.description.contains("pr0xy-s3cret") && !error.description.contains("nope"))
                                #expect(clock.recorded.isEmpty, "retried: \(error)")
                            }
                            #expect(!FileManager.default.fileExists(atPath: dir.file("c").path))
                        }
                    }
                }
            }
        }
    }

    @Test("no_proxy: matching hosts go straight to the server, the others through the proxy")
    func noProxy() async throws {
        try await TestServer.withRunning { server in
            try await Tinyproxy.withRunning { tinyproxy in
                let dir = try TemporaryDirectory()
                let proxy = try Proxy(url: tinyproxy.url.absoluteString)
                let downloader = Self.downloader(.nio, proxy: .all(proxy, except: NoProxyList("localhost")))
                let direct = server.url(path: "/bytes/direct.bin", query: ["size": "10"], host: "localhost")
                let proxied = server.url(path: "/bytes/proxied.bin", query: ["size": "10"])
                _ = try await downloader.download(DownloadRequest(url: direct, destination: .file(dir.file("d"))))
                _ = try await downloader.download(DownloadRequest(url: proxied, destination: .file(dir.file("p"))))
                let seen = tinyproxy.requests
                #expect(seen.contains { $0.contains("/bytes/proxied.bin") } && !seen.contains { $0.contains("direct") })
                #expect(server.stats.requests.count == 2)
            }
        }
    }

    @Test("a proxy nobody listens on fails the download at once, naming the proxy", arguments: Kind.allCases)
    func unreachableProxy(kind: Kind) async throws {
        try await Self.withServers { plain, secure in
            let port = try freeLoopbackPort()
            for scheme in ["http", "socks5h"] {
                let proxy = try Proxy(url: "\(scheme)://u:hunter2@127.0.0.1:\(port)")
                let usable = kind.speaks(proxy)
                for server in [plain, secure] {
                    let dir = try TemporaryDirectory()
                    let clock = RecordingClock()
                    let url = server.url(path: "/bytes/x.bin", query: ["size": "10"])
                    let error = try await #require(throws: DownloadError.self) {
                        try await Self.downloader(kind, proxy: .all(proxy), clock: clock).download(
                            DownloadRequest(url: url, destination: .file(dir.file("x"))))
                    }
                    #expect(error.message.contains("proxy \(scheme)://u:***@127.0.0.1:\(port)"), "\(error)")
                    if usable { #expect(error.message.contains("refused"), "\(error)") }
                    #expect(clock.recorded.isEmpty && !error.description.contains("hunter2"))
                    #expect(server.stats.requestCount == 0)
                }
            }
        }
    }

    @Test("a proxy killed mid-body cuts the tunnel; the retry resumes with Range through the restarted proxy")
    func proxyKilledMidBody() async throws {
        try await TestServer.withRunning(TestTLS.server()) { server in
            try await Tinyproxy.withRunning { tinyproxy in
                let dir = try TemporaryDirectory()
                let clock = GatedClock()
                let downloader = Self.downloader(
                    .nio, proxy: .all(try Proxy(url: tinyproxy.url.absoluteString)), clock: clock)
                let url = server.url(
                    path: "/bytes/big.bin", query: ["size": "2000000", "stallAfter": "500000", "stall": "gate:g"])
                let download = Task {
                    try await downloader.download(DownloadRequest(url: url, destination: .file(dir.file("big"))))
                }
                try await eventually("the body held after 500 kB") { server.heldCount(at: "g") == 1 }
                // Killed once bytes have reached the client's partial, not while the proxy still holds them all.
                try await eventually("bytes in the partial") {
                    let partial = dir.url.appendingPathComponent(".big.haul-partial").path
                    return ((try? FileManager.default.attributesOfItem(atPath: partial))?[.size] as? Int ?? 0) > 0
                }
                tinyproxy.kill()
                await clock.entered.wait()
                try await tinyproxy.restart()
                server.openGate("g")
                clock.release.open()
                let result = try await download.value
                let served = contentsOf(result.fileURL) == TestServer.expectedBytes(name: "big.bin", size: 2_000_000)
                #expect(served, "not the server's bytes")
                let ranges = server.stats.requests.map(\.range)
                #expect(ranges.count == 2 && ranges[0] == nil && ranges[1]?.hasPrefix("bytes=") == true, "\(ranges)")
                #expect(tinyproxy.requests.contains { $0.hasPrefix("CONNECT") })
            }
        }
    }

    @Test("per-host limits count the origin hosts, not the one proxy they all go through")
    func perHostLimitsThroughAProxy() async throws {
        try await TestServer.withRunning { server in
            try await Tinyproxy.withRunning { tinyproxy in
                let dir = try TemporaryDirectory()
                let proxy = try Proxy(url: tinyproxy.url.absoluteString)
                let queue = DownloadQueue(
                    downloader: Self.downloader(.nio, proxy: .all(proxy)),
                    configuration: .init(maxConcurrentDownloads: 10, perHostLimit: 2))
                var requests: [DownloadRequest] = []
                for index in 0..<4 {
                    for host in ["127.0.0.1", "localhost"] {
                        let url = server.url(
                            path: "/bytes/\(host)-\(index)", query: ["size": "1000", "hold": "g"], host: host)
                        requests.append(DownloadRequest(url: url, destination: .directory(dir.url)))
                    }
                }
                let handles = queue.add(requests)
                try await eventually("two requests held per host") { server.heldCount(at: "g") == 4 }
                #expect(queue.runningCount == 4 && queue.waitingCount == 4)
                server.openGate("g")
                for handle in handles { _ = try await handle.result }
                #expect(server.stats.maxInFlightByHost.count == 2)
                #expect(server.stats.maxInFlightByHost.values.allSatisfy { $0 == 2 })
                #expect(dir.contents().count == 8)
                #expect(tinyproxy.requests.filter { $0.hasPrefix("GET http://") }.count == 8)
            }
        }
    }
}

extension DownloadRequest {
    /// The request with its destination `name` in `directory`.
    fileprivate func renamed(_ name: String, in directory: TemporaryDirectory) -> DownloadRequest {
        var request = self
        request.destination = .file(directory.file(name))
        return request
    }
}
