import Foundation
import Haul
import HaulNIO
import HaulTestServer
import HaulTestSupport
import Testing

@testable import HaulPostgres

/// What the fleet's control plane does to a shared queue: pause and resume (waiting and running downloads), retry by
/// id, the lists by state, one download read back, and the throughput over time; against a real PostgreSQL 15.
@Suite(
    "SharedQueue: pause, resume, retry, lists", .timeLimit(.minutes(3)), .serialized,
    .enabled(if: TestPlatform.isLinux, "runs Debian's PostgreSQL 15, which scripts/test installs"))
struct SharedQueueControlTests {
    @Test("a paused download is never claimed; a running one stops at its worker's heartbeat, its attempt not counted")
    func pauseAndResume() async throws {
        try await withFixtures { server, database, directory in
            try await SharedQueue.withQueue(database) { queue in
                try await queue.enqueue([
                    try download("held0", from: server, query: ["size": "50000", "hold": "p"]),
                    try download("held1", from: server, query: ["size": "50000", "hold": "p"]),
                    try download("later", from: server, query: ["size": "3000"]),
                ])
                let later = try #require(try await queue.download(atPath: "later"))
                #expect(try await queue.pause([later.id]) == 1)
                #expect(try await queue.pause([later.id]) == 0, "a paused download is paused once")
                #expect(try await queue.counts() == [.waiting: 2, .paused: 1])
                let configuration = SharedQueueWorker.Configuration(
                    directory: directory.url, maxConcurrent: 4, lease: .milliseconds(1_200), exitsWhenEmpty: true)
                let worker = SharedQueueWorker(queue: queue, transport: NIOTransport(), configuration: configuration)
                let run = Task { await worker.run() }
                try await eventually("both held downloads running", within: .seconds(20)) {
                    server.heldCount(at: "p") == 2
                }
                let held = try #require(try await queue.download(atPath: "held0"))
                #expect(held.state == .running && held.attempt == 1 && held.worker == configuration.name)
                #expect(try await queue.pause([held.id]) == 1)
                #expect(try await queue.download(held.id)?.pauseRequested == true)
                try await eventuallyAsync("the running download paused by its worker", within: .seconds(20)) {
                    (try? await queue.download(held.id))??.state == .paused
                }
                let paused = try #require(try await queue.download(held.id))
                #expect(paused.attempt == 0 && paused.worker == nil && !paused.pauseRequested, "\(paused)")
                server.openGate("p")
                let report = await run.value
                #expect(report.done == 1, "\(report)")
                #expect(try await queue.counts() == [.done: 1, .paused: 2])
                #expect(server.stats.requests.filter { $0.path.hasSuffix("/later") }.isEmpty)
                let status = try await queue.status()
                #expect(status.paused == 2 && status.hosts.allSatisfy { $0.waiting == 0 && $0.running == 0 })

                #expect(try await queue.resume([held.id, later.id, 999_999]) == 2)
                #expect(try await queue.resume([held.id]) == 0)
                let again = await SharedQueueWorker(
                    queue: queue, transport: NIOTransport(), configuration: configuration
                ).run()
                #expect(again.done == 2, "\(again)")
                #expect(try await queue.counts() == [.done: 3])
                for path in ["held0", "held1", "later"] {
                    #expect(FileManager.default.fileExists(atPath: directory.url.appendingPathComponent(path).path))
                }
                let hosts = try await queue.status().hosts
                #expect(hosts.allSatisfy { $0.waiting == 0 && $0.running == 0 }, "\(hosts)")
            }
        }
    }

    @Test("a pause withdrawn before the worker's heartbeat lets the download finish; cancel takes paused ones too")
    func resumeBeforeHeartbeatAndCancelPaused() async throws {
        try await withFixtures { server, database, directory in
            try await SharedQueue.withQueue(database) { queue in
                try await queue.enqueue([
                    try download("kept", from: server, query: ["size": "20000", "hold": "k"]),
                    try download("dropped", from: server, query: ["size": "20000"]),
                ])
                let dropped = try #require(try await queue.download(atPath: "dropped"))
                #expect(try await queue.pause([dropped.id]) == 1)
                let worker = SharedQueueWorker(
                    queue: queue, transport: NIOTransport(),
                    configuration: .init(
                        directory: directory.url, maxConcurrent: 2, lease: .seconds(60), exitsWhenEmpty: true))
                let run = Task { await worker.run() }
                try await eventually("the download running", within: .seconds(20)) { server.heldCount(at: "k") == 1 }
                let kept = try #require(try await queue.download(atPath: "kept"))
                // The lease of a minute puts the next heartbeat ten seconds away: the pause is withdrawn before it.
                #expect(try await queue.pause([kept.id]) == 1)
                #expect(try await queue.resume([kept.id]) == 1)
                server.openGate("k")
                let report = await run.value
                #expect(report.done == 1 && report.returned == 0, "\(report)")
                #expect(try await queue.cancel(.ids([dropped.id])) == 1)
                #expect(try await queue.counts() == [.done: 1, .cancelled: 1])
                #expect(try await queue.status().hosts.allSatisfy { $0.waiting == 0 && $0.running == 0 })
            }
        }
    }

    @Test("lists by state with paging; retry by id puts failed and cancelled ones back; throughput in slots")
    func listsRetryThroughput() async throws {
        try await withFixtures { server, database, directory in
            try await SharedQueue.withQueue(database) { queue in
                var list = try (0..<6).map { try download("ok\($0)", from: server, query: ["size": "1000"]) }
                list.append(try download("gone", from: server, query: ["status": "404"]))
                list.append(try download("cancelled", from: server))
                try await queue.enqueue(list)
                let waiting = try await queue.downloads([.waiting], offset: 2, limit: 3)
                #expect(waiting.map(\.path) == ["ok2", "ok3", "ok4"])
                let cancelled = try #require(try await queue.download(atPath: "cancelled"))
                #expect(try await queue.cancel(.ids([cancelled.id])) == 1)
                let report = await SharedQueueWorker(
                    queue: queue, transport: NIOTransport(),
                    configuration: .init(directory: directory.url, maxConcurrent: 2, exitsWhenEmpty: true)
                ).run()
                #expect(report.done == 6 && report.failed == 1, "\(report)")
                let done = try await queue.downloads([.done])
                #expect(done.map(\.path) == (0..<6).reversed().map { "ok\($0)" })
                #expect(done.allSatisfy { $0.size == 1000 && $0.worker != nil && $0.finishedAt != nil })
                let ended = try await queue.downloads([.failed, .cancelled])
                #expect(ended.map(\.path) == ["cancelled", "gone"])
                #expect(ended.last?.error?.contains("404") == true, "\(ended)")
                let missing = try await queue.download(999_999)
                let elsewhere = try await queue.download(atPath: "nope")
                #expect(missing == nil && elsewhere == nil)

                let samples = try await queue.throughput(last: .seconds(60), every: .seconds(10))
                #expect(samples.count == 6)
                #expect(zip(samples, samples.dropFirst()).allSatisfy { $1.start - $0.start == 10 })
                #expect(samples.reduce(0) { $0 + $1.files } == 6 && samples.reduce(0) { $0 + $1.bytes } == 6000)

                let ids = try await queue.downloads([.done, .failed, .cancelled], limit: 100).map(\.id)
                #expect(try await queue.retry(ids) == 2, "only the failed and the cancelled one go back")
                #expect(try await queue.counts() == [.done: 6, .waiting: 2])
                let retried = try #require(try await queue.download(atPath: "gone"))
                #expect(retried.attempt == 0 && retried.error == nil && retried.state == .waiting)
                let host = try #require(try await queue.status().hosts.first)
                #expect(host.waiting == 2 && host.running == 0)
            }
        }
    }
}
