import Foundation
import Haul
import HaulTestServer
import HaulTestSupport
import Testing

/// The queue's admission against redirects, a second look: the per-host limit counts what a server sees, measured by
/// the server's own count of requests in flight per `Host` (127.0.0.1 and localhost are two hosts of one server).
@Suite("Admission, a second review", .timeLimit(.minutes(2)))
struct AdmissionSecondReviewTests {
    /// "Never ... more than `perHostLimit` against one scheme + host + port": a download redirected to another host
    /// fetches from that host, so it counts against it, as a download gone on at a mirror does.
    @Test("a download redirected to another host counts against that host: its per-host limit holds there")
    func redirectCountsAgainstItsTarget() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 4, perHostLimit: 1), transport: .nio)
            let direct = queue.add(DownloadRequest(url: server.held("direct"), destination: .directory(dir.url)))
            try await eventually("the direct request held") { server.heldCount(at: "g") == 1 }
            let elsewhere = server.url(
                path: "/bytes/elsewhere", query: ["redirectTo": server.held("moved").absoluteString], host: "localhost")
            let redirected = queue.add(DownloadRequest(url: elsewhere, destination: .directory(dir.url)))
            // Either it waits for the slot at 127.0.0.1 (one running), or it is there beside the first (two held).
            try await eventually("the redirected download waits for its slot, or runs") {
                server.stats.requests.contains { $0.path == "/bytes/elsewhere" }
                    && (server.heldCount(at: "g") == 2 || queue.runningCount == 1)
            }
            server.openGate("g")
            _ = try await direct.result
            _ = try await redirected.result
            let most = server.stats.maxInFlightByHost["127.0.0.1:\(server.port)"]
            #expect(most == 1, "\(most ?? 0) requests in flight at once at 127.0.0.1 for a per-host limit of 1")
        }
    }

    /// SegmentsAndMirrors: "every connection counts against ... perHostLimit like a download": the extra connections
    /// of a file whose URL redirects to another host fetch from that host, and count against it.
    @Test("a split file redirected to another host: its connections count there; the per-host limit holds")
    func splitRedirectCountsAgainstItsTarget() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 8, perHostLimit: 2), transport: .nio)
            let size = 4 << 20
            func split(_ url: URL) -> DownloadRequest {
                var request = DownloadRequest(url: url, destination: .directory(dir.url))
                request.maxConnections = 8
                request.minimumSegmentSize = 256 << 10
                return request
            }
            let query = ["size": "\(size)", "rate": "1500000"]
            let direct = queue.add(split(server.url(path: "/bytes/direct.bin", query: query)))
            let target = server.url(path: "/bytes/moved.bin", query: query)
            let redirected = queue.add(
                split(
                    server.url(
                        path: "/bytes/start.bin", query: ["redirectTo": target.absoluteString], host: "localhost")))
            for (handle, name) in [(direct, "direct.bin"), (redirected, "moved.bin")] {
                let result = try await handle.result
                #expect(
                    { contentsOf(result.fileURL) == TestServer.expectedBytes(name: name, size: size) }(),
                    "not the server's bytes")
            }
            let stats = server.stats
            #expect(stats.requestCount > 4, "no file was split")
            let most = stats.maxInFlightByHost["127.0.0.1:\(server.port)"]
            #expect((most ?? 0) <= 2, "\(most ?? 0) requests in flight at once at 127.0.0.1 for a per-host limit of 2")
        }
    }
}
