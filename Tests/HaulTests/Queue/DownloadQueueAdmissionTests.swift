import Foundation
import Haul
import HaulTestServer
import HaulTestSupport
import Testing

/// Large batches: one of a single priority is entered in slices (its first downloads start before the rest is in),
/// and the order of admission must be what entering it at once would give.
@Suite("DownloadQueue admission of large batches", .timeLimit(.minutes(2)))
struct DownloadQueueAdmissionTests {
    /// More than two slices (DownloadQueue.admissionSlice is 256).
    static let count = 600

    @Test("one priority, one at a time: every download in the order added, across slices")
    func orderAcrossSlices() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: .nio)
            let handles = queue.add(
                (0..<Self.count).map {
                    DownloadRequest(
                        url: server.url(path: "/bytes/f\($0)", query: ["size": "10"]), destination: .directory(dir.url))
                })
            for handle in handles { _ = try await handle.result }
            #expect(server.stats.requests.map(\.path) == (0..<Self.count).map { "/bytes/f\($0)" })
            #expect(queue.progress.finishedFiles == Self.count)
        }
    }

    @Test("mixed priorities: the batch is entered whole, so its highest priority starts first")
    func mixedPrioritiesWhole() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: .nio)
            let requests = (0..<Self.count).map { index in
                DownloadRequest(
                    url: server.url(path: "/bytes/f\(index)", query: ["size": "10"]), destination: .directory(dir.url),
                    priority: index == Self.count - 1 ? 10 : 0)
            }
            let handles = queue.add(requests)
            for handle in handles { _ = try await handle.result }
            let paths = server.stats.requests.map(\.path)
            #expect(paths.first == "/bytes/f\(Self.count - 1)")
            #expect(Array(paths.dropFirst()) == (0..<(Self.count - 1)).map { "/bytes/f\($0)" })
        }
    }
}
