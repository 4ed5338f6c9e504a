import Foundation
import Haul
import HaulNIO
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// A second hostile look at the engine facing servers that lie: redirects and the holds a busy server asks for.
@Suite("Engine, second review", .timeLimit(.minutes(2)))
struct EngineSecondReviewTests {
    @Test("a redirect to an http URL without a host is refused as a redirect, naming the Location")
    func redirectWithoutHost() async throws {
        let response = Array("HTTP/1.1 302 Found\r\nLocation: http:///elsewhere\r\nContent-Length: 0\r\n\r\n".utf8)
        try await RawServer.withRunning(responses: [response]) { port in
            let dir = try TemporaryDirectory()
            let request = DownloadRequest(
                url: try #require(URL(string: "http://127.0.0.1:\(port)/f")), destination: .file(dir.file("f")))
            let downloader = Downloader(transport: NIOTransport(), configuration: testConfiguration(retries: 0))
            let error = await #expect(throws: DownloadError.self) { _ = try await downloader.download(request) }
            #expect(error?.code == .redirectRefused, "\(error.map { "\($0.code): \($0.message)" } ?? "")")
            #expect(error?.message.contains("http:///elsewhere") == true, "\(error?.message ?? "")")
        }
    }

    @Test("a 503 with Retry-After to a segment's request holds that host for every download, as to one stream")
    func segmentRetryAfterHoldsTheHost() async throws {
        try await TestServer.withRunning { primary in
            try await TestServer.withRunning { mirror in
                let dir = try TemporaryDirectory()
                let size = 4 << 20
                let busy = mirror.url(
                    path: "/bytes/file.bin", query: ["size": "\(size)", "status": "503", "retryAfter": "60"],
                    host: "localhost")
                var request = DownloadRequest(
                    url: primary.url(path: "/bytes/file.bin", query: ["size": "\(size)", "rate": "2000000"]),
                    destination: .directory(dir.url))
                request.maxConnections = 4
                request.minimumSegmentSize = 256 << 10
                request.mirrors = [busy]
                let downloader = Downloader(transport: NIOTransport(), configuration: testConfiguration(retries: 0))
                _ = try await downloader.download(request)
                try #require(!mirror.stats.requests.isEmpty, "the busy mirror was never asked")
                // The mirror's host asked for a minute: the next download there waits, which its time limit forbids.
                var next = DownloadRequest(
                    url: mirror.url(path: "/bytes/next.bin", query: ["size": "100"], host: "localhost"),
                    destination: .directory(dir.url))
                next.timeLimit = .seconds(20)
                let error = await #expect(throws: DownloadError.self) { _ = try await downloader.download(next) }
                #expect(error?.code == .timedOut, "\(error.map { "\($0.code): \($0.message)" } ?? "")")
                #expect(error?.message.contains("localhost") == true, "\(error?.message ?? "")")
            }
        }
    }
}
