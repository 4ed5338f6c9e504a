import Foundation
import Haul
import HaulNIO
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The README's promises tried as an attacker and as a cron job would: a revalidation that fails, a checksum a file
/// does not have, credentials after a downgrade, a server's absurd `Retry-After`, a proxy that goes silent, and `-s N`
/// where a download used to stay one stream. Checked against the servers' own records.
@Suite("Promises held again", .timeLimit(.minutes(2)))
struct PromisesUnderAttackTests {
    static let size = 4 << 20

    func downloader(
        _ journal: MemoryJournal? = nil, retries: Int = 0, revalidates: Bool = false, clock: RecordingClock? = nil,
        _ change: (inout Downloader.Configuration) -> Void = { _ in }
    ) -> Downloader {
        var configuration = TransportKind.nio.configuration(clock: clock ?? RecordingClock(), retries: retries)
        configuration.journal = journal
        configuration.revalidatesCompletedFiles = revalidates
        change(&configuration)
        return Downloader(transport: NIOTransport(), configuration: configuration)
    }

    func request(_ url: URL, _ file: URL, policy: ConflictPolicy = .fail) -> DownloadRequest {
        DownloadRequest(url: url, destination: .file(file), conflictPolicy: policy)
    }

    func completedStamp(_ journal: MemoryJournal, _ path: String) -> FileStamp? {
        for record in journal.allRecords() where record.path == path {
            if case .completed(_, _, let stamp, _) = record.state { return stamp }
        }
        return nil
    }

    @Test("a revalidation cut short keeps the file, its record and the new copy's partial; the next -N resumes it")
    func cutRevalidation() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let file = dir.file("f")
            let first = server.url(path: "/bytes/f", query: ["size": "\(Self.size)"])
            _ = try await downloader(journal).download(request(first, file))
            let stamp = try #require(FileStamp(ofFileAt: file.path))

            // The server has a new copy (another size: another ETag), and the connection is cut 1 MiB into it.
            let newer = Self.size + 100
            let cut = server.url(path: "/bytes/f", query: ["size": "\(newer)", "cutAfter": "\(1 << 20)"])
            let error = try await #require(throws: DownloadError.self) {
                try await downloader(journal, revalidates: true).download(request(cut, file))
            }
            #expect(error.code == .truncated)
            #expect(FileStamp(ofFileAt: file.path) == stamp, "the file changed")
            #expect(completedStamp(journal, file.path) == stamp, "the completed record was lost")
            #expect(dir.contents().contains(".f.haul-partial"), "the new copy's partial was thrown away")

            // A plain rerun skips the file, without a request.
            server.resetStats()
            let plain = try await downloader(journal).download(request(first, file))
            #expect(plain.skipped && server.stats.requestCount == 0)

            // The next -N resumes the new copy: its condition first, then the rest with If-Range.
            let renewed = server.url(path: "/bytes/f", query: ["size": "\(newer)"])
            let result = try await downloader(journal, revalidates: true).download(request(renewed, file))
            #expect(!result.skipped)
            #expect({ contentsOf(file) == TestServer.expectedBytes(name: "f", size: newer) }(), "not the new copy")
            let sent = try #require(server.stats.requests.first)
            #expect(server.stats.requestCount == 1)
            #expect(sent.value(forHeader: "if-none-match") == TestServer.entityTag(name: "f", size: Self.size))
            #expect(sent.range == "bytes=\(1 << 20)-")
            #expect(sent.ifRange == TestServer.entityTag(name: "f", size: newer))
            #expect(server.stats.bodyBytesSent == newer - (1 << 20))
            #expect(dir.contents() == ["f"])
            #expect(journal.allRecords().count == 1)
        }
    }

    @Test("a revalidation that meets a 404 or a server that is gone leaves the file Haul's: the next run skips it")
    func failedRevalidations() async throws {
        let dir = try TemporaryDirectory()
        let journal = MemoryJournal()
        let file = dir.file("f")
        var port = 0
        try await TestServer.withRunning { server in
            port = server.port
            _ = try await downloader(journal).download(
                request(server.url(path: "/bytes/f", query: ["size": "1000"]), file))
            let gone = server.url(path: "/bytes/f", query: ["size": "1000", "status": "404"])
            let error = try await #require(throws: DownloadError.self) {
                try await downloader(journal, revalidates: true).download(request(gone, file))
            }
            #expect(error.status == 404)
        }
        // The server is gone: the connection is refused.
        let refused = try #require(URL(string: "http://127.0.0.1:\(port)/bytes/f?size=1000"))
        let error = try await #require(throws: DownloadError.self) {
            try await downloader(journal, revalidates: true).download(request(refused, file))
        }
        #expect(error.code == .transport)
        // Back again: a plain run skips the file; -N asks and gets a 304.
        try await TestServer.withRunning(TestServer.Configuration(port: port)) { server in
            #expect(try await downloader(journal).download(request(refused, file)).skipped)
            let checked = try await downloader(journal, revalidates: true).download(request(refused, file))
            #expect(checked.notModified)
            #expect(server.stats.requestCount == 1)
        }
    }

    @Test("a 304 that carries a new validator updates the stored one: the next revalidation asks with it")
    func notModifiedUpdatesTheValidator() async throws {
        let heads = Locked<[String]>([])
        let body = "0123456789"
        try await RawServer.withRunning(respond: { index, head in
            heads.withLock { $0.append(head) }
            let response =
                index == 0
                ? "HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nContent-Length: 10\r\n\r\n\(body)"
                : "HTTP/1.1 304 Not Modified\r\nETag: \"v\(index + 1)\"\r\n\r\n"
            return Array(response.utf8)
        }) { port in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let url = try #require(URL(string: "http://127.0.0.1:\(port)/r"))
            _ = try await downloader(journal).download(request(url, dir.file("r")))
            for _ in 0..<2 {
                #expect(
                    try await downloader(journal, revalidates: true).download(request(url, dir.file("r"))).notModified)
            }
        }
        let conditions = heads.withLock { $0 }.map { head in
            head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("if-none-match:") }.map(String.init)
        }
        #expect(conditions == [nil, "If-None-Match: \"v1\"", "If-None-Match: \"v2\""], "\(conditions)")
    }

    @Test("a digest asked for on a rerun is checked against the file there: a mismatch fails, overwrite fetches again")
    func checksumOnRerun() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let file = dir.file("a")
            let url = server.url(path: "/bytes/a", query: ["size": "1000"])
            for computes in [true, false] {
                try? FileManager.default.removeItem(at: file)
                let journal = MemoryJournal()
                _ = try await downloader(journal) { $0.computesSHA256 = computes }.download(request(url, file))
                server.resetStats()
                // From the journal's SHA-256, or hashing the file: the same answer.
                var wrong = request(url, file)
                wrong.expectedDigest = try Digest(algorithm: .sha256, hex: String(repeating: "ab", count: 32))
                let error = try await #require(throws: DownloadError.self) {
                    try await downloader(journal).download(wrong)
                }
                #expect(error.code == .checksumMismatch)
                #expect(error.message.contains("'\(file.path)' is there already, but its sha-256 is "), "\(error)")
                var right = request(url, file)
                right.expectedDigest = try Digest(
                    algorithm: .sha512, hex: sha512Hex(TestServer.expectedBytes(name: "a", size: 1000)))
                #expect(try await downloader(journal).download(right).skipped)
                #expect(server.stats.requestCount == 0)
            }
            // The server's file changed (same resource, another query): overwrite fetches it again and verifies it.
            _ = journal
            let newer = server.url(path: "/bytes/a", query: ["size": "1001"])
            let journalForOverwrite = MemoryJournal()
            try? FileManager.default.removeItem(at: file)
            _ = try await downloader(journalForOverwrite).download(request(url, file))
            var overwrite = request(newer, file, policy: .overwrite)
            overwrite.expectedDigest = try Digest(
                algorithm: .sha256, hex: sha256Hex(TestServer.expectedBytes(name: "a", size: 1001)))
            let fetched = try await downloader(journalForOverwrite).download(overwrite)
            #expect(!fetched.skipped)
            #expect({ contentsOf(file) == TestServer.expectedBytes(name: "a", size: 1001) }())

            // A file Haul did not write, with the skip policy: the digest decides too.
            let foreign = dir.file("foreign")
            try Data("not it".utf8).write(to: foreign)
            var skip = request(url, foreign, policy: .skip)
            skip.expectedDigest = overwrite.expectedDigest
            let refused = try await #require(throws: DownloadError.self) { try await downloader().download(skip) }
            #expect(refused.code == .checksumMismatch)
            #expect(contentsOf(foreign) == Array("not it".utf8))
        }
    }

    @Test("a netrc password never follows an https to http redirect to the same host in clear")
    func netrcAfterDowngrade() async throws {
        try await TestServer.withRunning { plain in
            try await TestServer.withRunning(TestTLS.server()) { secure in
                let dir = try TemporaryDirectory()
                let netrc = try Netrc(parsing: "machine 127.0.0.1 login me password secret\n", file: "t")
                let target = plain.url(path: "/bytes/x", query: ["size": "10"])
                let url = secure.url(path: "/bytes/x", query: ["size": "10", "redirectTo": target.absoluteString])
                var configuration = TransportKind.nioOverTLS.configuration()
                configuration.credentials = netrc
                let downloader = Downloader(transport: NIOTransport(), configuration: configuration)
                _ = try await downloader.download(DownloadRequest(url: url, destination: .file(dir.file("x"))))
                // Sent over https; not after the downgrade.
                #expect(secure.stats.requests.first?.authorization != nil)
                #expect(plain.stats.requests.count == 1)
                #expect(plain.stats.requests.first?.authorization == nil)
            }
        }
    }

    @Test("Retry-After beyond 64 bits of seconds is the longest wait the policy allows, not none")
    func hugeRetryAfter() async throws {
        let responses = [
            Array(
                "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 99999999999999999999\r\nContent-Length: 0\r\n\r\n"
                    .utf8),
            Array("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".utf8),
        ]
        try await RawServer.withRunning(responses: responses) { port in
            let dir = try TemporaryDirectory()
            let clock = RecordingClock()
            let url = try #require(URL(string: "http://127.0.0.1:\(port)/x"))
            // The cap made short: the host is held that long for real (every download to it waits).
            let cap = Duration.milliseconds(200)
            _ = try await downloader(retries: 1, clock: clock) { $0.retryPolicy.maxRetryAfter = cap }.download(
                request(url, dir.file("x")))
            #expect(clock.recorded == [cap])
        }
    }

    @Test("a proxy that accepts and stays silent is named in the stall message")
    func silentProxyNamed() async throws {
        let listener = try SilentListener()
        defer { listener.close() }
        let dir = try TemporaryDirectory()
        let proxy = try Proxy(url: "http://127.0.0.1:\(listener.port)")
        let error = try await #require(throws: DownloadError.self) {
            try await downloader {
                $0.proxy = .all(proxy)
                $0.stallTimeout = .milliseconds(400)
            }.download(request(try #require(URL(string: "http://example.test/x")), dir.file("x")))
        }
        #expect(error.code == .stalled)
        #expect(error.message.contains("the proxy http://127.0.0.1:\(listener.port)"), "\(error.message)")
    }

    @Test("-s N is used for a revalidation's new copy and for the rest of a file another tool left")
    func segmentsForRevalidationAndContinuation() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let file = dir.file("s")
            let size = 6 << 20
            _ = try await downloader(journal).download(
                request(server.url(path: "/bytes/s", query: ["size": "1000"]), file))
            server.resetStats()
            var refresh = request(server.url(path: "/bytes/s", query: ["size": "\(size)", "rate": "3000000"]), file)
            refresh.maxConnections = 4
            refresh.minimumSegmentSize = 256 << 10
            _ = try await downloader(journal, revalidates: true).download(refresh)
            #expect({ contentsOf(file) == TestServer.expectedBytes(name: "s", size: size) }(), "not the new copy")
            let first = try #require(server.stats.requests.first)
            #expect(first.value(forHeader: "if-none-match") != nil && first.range == "bytes=0-\((256 << 10) - 1)")
            #expect(server.stats.maxInFlight >= 2, "one stream: \(server.stats.maxInFlight)")

            // A file another tool left a third of: the rest in segments.
            server.resetStats()
            let other = dir.file("c")
            try Data(TestServer.expectedBytes(name: "c", size: size).prefix(size / 3)).write(to: other)
            var rest = request(server.url(path: "/bytes/c", query: ["size": "\(size)", "rate": "3000000"]), other)
            rest.continuesExistingFile = true
            rest.maxConnections = 4
            rest.minimumSegmentSize = 256 << 10
            _ = try await downloader().download(rest)
            #expect({ contentsOf(other) == TestServer.expectedBytes(name: "c", size: size) }(), "not the file")
            #expect(server.stats.requests.first?.range == "bytes=\(size / 3)-\(size / 3 + (256 << 10) - 1)")
            #expect(server.stats.maxInFlight >= 2, "one stream: \(server.stats.maxInFlight)")
            #expect(server.stats.bodyBytesSent <= size - size / 3 + (1 << 20))
        }
    }
}

/// A loopback port that accepts connections (the kernel's backlog does) and never answers: a proxy gone silent.
final class SilentListener: Sendable {
    let port: Int
    private let descriptor: Int32

    init() throws {
        let descriptor = socket(AF_INET, streamSocket, 0)
        self.descriptor = descriptor
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) }
        }
        guard bound == 0, listen(descriptor, 16) == 0 else { throw POSIXError(.EADDRINUSE) }
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard named == 0 else { throw POSIXError(.EBADF) }
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    func close() { _ = Glibc.close(descriptor) }
}
