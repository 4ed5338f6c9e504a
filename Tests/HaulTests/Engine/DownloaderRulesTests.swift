import Foundation
import HTTPTypes
import Haul
import HaulTestServer
import HaulTestSupport
import Testing

/// Redirect, naming, destination and verification rules, on both transports.
@Suite("Downloader rules", .timeLimit(.minutes(2)))
struct DownloaderRulesTests {
    @Test("a chain of redirects is followed, each reported", arguments: TransportKind.allCases)
    func redirectChain(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let events = EventLog()
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration())
            let url = server.url(
                path: "/bytes/hops", query: ["size": "100", "redirects": "3", "redirectStatus": "307"])
            let result = try await downloader.download(
                DownloadRequest(url: url, destination: .directory(dir.url)), onEvent: events.record)
            #expect(events.redirects == 3)
            #expect(contentsOf(result.fileURL) == TestServer.expectedBytes(name: "hops", size: 100))
        }
    }

    @Test("redirect loops, too many hops and non-http targets are refused", arguments: TransportKind.allCases)
    func refusedRedirects(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration())
            let cases: [([String: String], DownloadError.Code)] = [
                (["redirectLoop": "1"], .redirectLoop),
                (["redirects": "11"], .tooManyRedirects),
                (["redirectTo": "file:///etc/passwd"], .redirectRefused),
                (["redirectTo": "ftp://127.0.0.1/x"], .redirectRefused),
            ]
            for (query, code) in cases {
                let url = server.url(path: "/bytes/r", query: query.merging(["size": "10"]) { a, _ in a })
                let error = try await #require(throws: DownloadError.self) {
                    try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
                }
                #expect(error.code == code, "\(query)")
            }
            #expect(dir.contents().isEmpty)
        }
    }

    @Test(
        "Authorization and Cookie never reach another origin; the same origin keeps them",
        arguments: TransportKind.allCases)
    func credentialsStayWithTheirOrigin(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration())
            let elsewhere = server.url(path: "/bytes/target", query: ["size": "10"], host: "localhost")
            let url = server.url(path: "/bytes/start", query: ["size": "10", "redirectTo": elsewhere.absoluteString])
            var fields = HTTPFields()
            fields[.authorization] = "Bearer secret"
            fields[.cookie] = "session=1"
            _ = try await downloader.download(
                DownloadRequest(url: url, destination: .file(dir.file("out")), headerFields: fields))
            let requests = server.stats.requests
            #expect(requests.count == 2)
            #expect(requests[0].authorization == "Bearer secret" && requests[0].cookie == "session=1")
            #expect(requests[1].host?.hasPrefix("localhost") == true)
            #expect(requests[1].authorization == nil && requests[1].cookie == nil)

            server.resetStats()
            let sameOrigin = server.url(
                path: "/bytes/auth", query: ["size": "10", "redirects": "1", "requireAuth": "Bearer secret"])
            _ = try await downloader.download(
                DownloadRequest(url: sameOrigin, destination: .file(dir.file("same")), headerFields: fields))
            #expect(server.stats.requests.allSatisfy { $0.authorization == "Bearer secret" })
        }
    }

    @Test("names from URLs and Content-Disposition never leave the directory", arguments: TransportKind.allCases)
    func namesStayInside(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let parent = try TemporaryDirectory()
            let dir = parent.url.appendingPathComponent("inside")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration())
            func fetch(_ url: URL, disposition: Bool = false) async throws -> String {
                let result = try await downloader.download(
                    DownloadRequest(url: url, destination: .directory(dir, useContentDisposition: disposition)))
                #expect(
                    result.fileURL.deletingLastPathComponent().standardizedFileURL.path == dir.standardizedFileURL.path)
                return result.fileURL.lastPathComponent
            }
            let escaping = try #require(URL(string: "\(server.baseURL.absoluteString)/bytes/..%2F..%2Fescape?size=5"))
            #expect(try await fetch(escaping) == "escape")
            let nul = try #require(URL(string: "\(server.baseURL.absoluteString)/bytes/a%00b?size=5"))
            #expect(try await fetch(nul) == "ab")
            let traversal = server.url(
                path: "/bytes/cd", query: ["size": "5", "disposition": "attachment; filename=\"../../x\""])
            #expect(try await fetch(traversal, disposition: true) == "x")
            let extended = server.url(
                path: "/bytes/cd2",
                query: [
                    "size": "5",
                    "disposition": "attachment; filename=\"fallback.txt\"; filename*=UTF-8''%E2%82%AC%20rates.txt",
                ])
            #expect(try await fetch(extended, disposition: true) == "€ rates.txt")
            let absolute = server.url(
                path: "/bytes/cd3", query: ["size": "5", "disposition": "attachment; filename=\"/etc/passwd\""])
            #expect(try await fetch(absolute, disposition: true) == "passwd")
            let hidden = server.url(
                path: "/bytes/cd4", query: ["size": "5", "disposition": "attachment; filename=\".bashrc\""])
            #expect(try await fetch(hidden, disposition: true) == "bashrc")

            let dots = try #require(URL(string: "\(server.baseURL.absoluteString)/bytes/..?size=5"))
            let error = try await #require(throws: DownloadError.self) { try await fetch(dots) }
            #expect(error.code == .unsafeName)
            #expect(parent.contents() == ["inside"])
        }
    }

    @Test("a symlink planted at the partial or the destination name is refused", arguments: TransportKind.allCases)
    func symlinksRefused(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let victim = dir.file("victim")
            try Data("precious".utf8).write(to: victim)
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration())
            // Above DownloadRun.restartableLimit, so that the body goes to a named partial on every system.
            let url = server.url(path: "/bytes/evil", query: ["size": "300000"])
            try FileManager.default.createSymbolicLink(
                atPath: dir.file(".evil.haul-partial").path, withDestinationPath: victim.path)
            let partialError = try await #require(throws: DownloadError.self) {
                try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            }
            #expect(partialError.code == .unsafePath)
            #if os(Linux)
            // A small body is written to an unnamed file: the planted link is neither followed nor needed.
            let small = server.url(path: "/bytes/small", query: ["size": "100"])
            try FileManager.default.createSymbolicLink(
                atPath: dir.file(".small.haul-partial").path, withDestinationPath: victim.path)
            let result = try await downloader.download(DownloadRequest(url: small, destination: .directory(dir.url)))
            #expect(contentsOf(result.fileURL) == TestServer.expectedBytes(name: "small", size: 100))
            try FileManager.default.removeItem(atPath: dir.file(".small.haul-partial").path)
            try FileManager.default.removeItem(at: result.fileURL)
            #endif
            try FileManager.default.removeItem(atPath: dir.file(".evil.haul-partial").path)

            try FileManager.default.createSymbolicLink(atPath: dir.file("evil").path, withDestinationPath: victim.path)
            for policy in ConflictPolicy.allCases {
                let error = try await #require(throws: DownloadError.self) {
                    try await downloader.download(
                        DownloadRequest(url: url, destination: .directory(dir.url), conflictPolicy: policy))
                }
                #expect(error.code == .unsafePath, "\(policy)")
            }
            #expect(contentsOf(victim) == Array("precious".utf8))
            #expect(dir.contents() == ["evil", "victim"])
        }
    }

    @Test(
        "SHA-256 only when asked: none by default, every file's with computesSHA256 (a skipped one's too), an expected one's"
    )
    func sha256OnlyWhenAsked() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let url = server.url(path: "/bytes/s.bin", query: ["size": "300000"])
            let expected = sha256Hex(TestServer.expectedBytes(name: "s.bin", size: 300_000))
            let plain = Downloader(
                transport: TransportKind.nio.makeTransport(), configuration: TransportKind.nio.configuration())
            #expect(
                try await plain.download(DownloadRequest(url: url, destination: .file(dir.file("a")))).sha256 == nil)

            var asked = DownloadRequest(url: url, destination: .file(dir.file("b")))
            asked.expectedDigest = try Digest(algorithm: .sha256, hex: expected)
            #expect(try await plain.download(asked).sha256 == expected)
            // Another algorithm is checked, and gives no SHA-256.
            var other = DownloadRequest(url: url, destination: .file(dir.file("c")))
            other.expectedDigest = try Digest(
                algorithm: .sha512, hex: sha512Hex(TestServer.expectedBytes(name: "s.bin", size: 300_000)))
            #expect(try await plain.download(other).sha256 == nil)

            var configuration = TransportKind.nio.configuration()
            configuration.computesSHA256 = true
            let hashing = Downloader(transport: TransportKind.nio.makeTransport(), configuration: configuration)
            #expect(
                try await hashing.download(DownloadRequest(url: url, destination: .file(dir.file("d")))).sha256
                    == expected)
            let skipped = try await hashing.download(
                DownloadRequest(url: url, destination: .file(dir.file("a")), conflictPolicy: .skip))
            #expect(skipped.skipped && skipped.sha256 == expected)
        }
    }

    @Test("checksum and size checks: a mismatch publishes nothing", arguments: TransportKind.allCases)
    func verification(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration())
            let url = server.url(path: "/bytes/checked", query: ["size": "4096"])
            let good = sha256Hex(TestServer.expectedBytes(name: "checked", size: 4096))

            var right = DownloadRequest(url: url, destination: .file(dir.file("right")))
            right.expectedDigest = try Digest(algorithm: .sha256, hex: good)
            right.expectedSize = 4096
            _ = try await downloader.download(right)

            var wrong = DownloadRequest(url: url, destination: .file(dir.file("wrong")))
            wrong.expectedDigest = try Digest(algorithm: .sha256, hex: String(repeating: "0", count: 64))
            let mismatch = try await #require(throws: DownloadError.self) { try await downloader.download(wrong) }
            #expect(mismatch.code == .checksumMismatch)
            #expect(mismatch.description.contains(good))

            var sized = DownloadRequest(url: url, destination: .file(dir.file("sized")))
            sized.expectedSize = 4000
            await #expect(throws: DownloadError.self) { try await downloader.download(sized) }

            var limited = DownloadRequest(url: url, destination: .file(dir.file("limited")))
            limited.maxSize = 1000
            let tooBig = try await #require(throws: DownloadError.self) { try await downloader.download(limited) }
            #expect(tooBig.code == .sizeLimitExceeded)
            #expect(dir.contents() == ["right"])
        }
    }

    @Test("conflict policies: fail, skip, overwrite, rename", arguments: TransportKind.allCases)
    func conflictPolicies(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let existing = dir.file("data.bin")
            try Data("old".utf8).write(to: existing)
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration())
            let url = server.url(path: "/bytes/data.bin", query: ["size": "64"])
            let fresh = TestServer.expectedBytes(name: "data.bin", size: 64)
            func request(_ policy: ConflictPolicy) -> DownloadRequest {
                DownloadRequest(url: url, destination: .directory(dir.url), conflictPolicy: policy)
            }

            let error = try await #require(throws: DownloadError.self) { try await downloader.download(request(.fail)) }
            #expect(error.code == .destinationExists)
            #expect(contentsOf(existing) == Array("old".utf8))
            #expect(server.stats.requestCount == 0)

            let skipped = try await downloader.download(request(.skip))
            #expect(skipped.skipped && skipped.size == 3)
            #expect(server.stats.requestCount == 0)

            let renamed = try await downloader.download(request(.rename))
            #expect(renamed.fileURL.lastPathComponent == "data (1).bin")
            let renamedAgain = try await downloader.download(request(.rename))
            #expect(renamedAgain.fileURL.lastPathComponent == "data (2).bin")
            #expect(contentsOf(existing) == Array("old".utf8))

            _ = try await downloader.download(request(.overwrite))
            #expect(contentsOf(existing) == fresh)
            #expect(dir.contents() == ["data (1).bin", "data (2).bin", "data.bin"])
        }
    }

    @Test(
        "an unsupported URL is an invalid request: another scheme, or no host; http and https in any case are not",
        arguments: [
            ("ftp://127.0.0.1/file", true), ("httpx://127.0.0.1/file", true), ("http:///file", true),
            ("file:///tmp/file", true), ("HTTP://127.0.0.1:1/file", false), ("hTTpS://127.0.0.1:1/file", false),
        ])
    func invalidURL(_ text: String, invalid: Bool) async throws {
        let dir = try TemporaryDirectory()
        let downloader = Downloader(
            transport: TransportKind.asyncHTTPClient.makeTransport(), configuration: testConfiguration(retries: 0))
        let url = try #require(URL(string: text))
        let error = await #expect(throws: DownloadError.self) {
            try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
        }
        // Valid ones reach the network (port 1 refuses) and fail there, not as invalid requests.
        #expect((error?.code == .invalidRequest) == invalid, "\(text): \(String(describing: error))")
    }
}
