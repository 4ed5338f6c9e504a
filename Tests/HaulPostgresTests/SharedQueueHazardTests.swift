import Foundation
import Haul
import HaulNIO
import HaulTestServer
import HaulTestSupport
import PostgresNIO
import Testing

@testable import HaulPostgres

/// The shared queue against what goes wrong around it: a worker killed or fenced with claims taken ahead, a host
/// given as an IPv6 literal, a per-host limit that would stall everything, a new token for a paused download,
/// priorities within one claim.
@Suite(
    "SharedQueue against lost workers, odd hosts and bad settings", .timeLimit(.minutes(3)), .serialized,
    .enabled(if: TestPlatform.isLinux, "runs Debian's PostgreSQL 15, which scripts/test installs"))
struct SharedQueueHazardTests {
    @Test("cancel by host name reaches downloads from an IPv6 literal host")
    func cancelIPv6Host() async throws {
        try await withFixtures { _, database, _ in
            try await SharedQueue.withQueue(database) { queue in
                let url = try #require(URL(string: "http://[::1]:8080/a.bin"))
                try await queue.enqueue([try SharedDownload(request: request(url), path: "a.bin")])
                let record = try #require(try await queue.download(atPath: "a.bin"))
                let bare = try await queue.cancel(.host("::1"))
                let bracketed = try await queue.cancel(.host("[::1]"))
                #expect(
                    bare + bracketed == 1, "host key '\(record.host)': '::1' cancelled \(bare), '[::1]' \(bracketed)")
                #expect(try await queue.counts() == [.cancelled: 1])
            }
        }
    }

    @Test("a worker killed (silent past its lease) is not shown active with its downloads running when none rescues")
    func deadWorkerStatus() async throws {
        try await withFixtures { server, database, _ in
            try await SharedQueue.withQueue(database) { queue in
                try await queue.enqueue([try download("k0", from: server)])
                // A `haul worker` that claimed a download and was SIGKILLed: it never heartbeats again.
                let killed = try await queue.registerWorker(name: "killed", directory: "/k", lease: .milliseconds(500))
                #expect(try await queue.claim(worker: killed, limit: 4).count == 1)
                try await Task.sleep(for: .seconds(3))  // six leases
                #expect(try await queue.cancel(.all) == 1)
                let status = try await queue.status()
                let worker = status.workers.first { $0.id == killed }
                #expect(worker?.state != "active", "\(String(describing: worker))")
                #expect(status.running == 0 && status.cancelled == 1, "\(status)")
            }
        }
    }

    @Test("a per-host limit of 0 (or less) is refused, not stored to stall every download")
    func zeroPerHostRefused() async throws {
        try await withFixtures { server, database, _ in
            try await SharedQueue.withQueue(database) { queue in
                await #expect(throws: SharedQueueError.self) {
                    try await queue.setHostSettings(HostSettings(maxConnectionsPerHost: 0))
                }
                await #expect(throws: SharedQueueError.self) {
                    try await queue.enqueue(
                        [try download("z0", from: server)], hostSettings: HostSettings(maxConnectionsPerHost: -3))
                }
            }
        }
    }
    @Test("claims a fenced worker took ahead and never started are not failed (nor burn an attempt)")
    func fencedWorkerDropsClaimedAhead() async throws {
        try await withFixtures { server, database, directory in
            try await SharedQueue.withQueue(database) { queue in
                // One attempt each (haul enqueue --retries 0); every response held until the gate opens.
                try await queue.enqueue(
                    try (0..<4).map {
                        try SharedDownload(
                            request: request(server.url(path: "/bytes/f\($0)", query: ["size": "2000", "hold": "g"])),
                            path: "f\($0)", maxAttempts: 1)
                    })
                let worker = SharedQueueWorker(
                    queue: queue, transport: NIOTransport(),
                    configuration: .init(
                        directory: directory.url, maxConcurrent: 1, lease: .seconds(2), name: "w", exitsWhenEmpty: true)
                )
                let fenced = Task { await worker.events.first { $0 == .leaseLost } != nil }
                let run = Task { await worker.run() }
                try await eventually("one download running", within: .seconds(20)) { server.heldCount(at: "g") == 1 }
                let claimed = try await queue.counts()[.running] ?? 0
                #expect(claimed >= 2, "the worker claims ahead: \(claimed) running")
                // The worker's heartbeats go unanswered for 3 s (a slow or briefly unreachable database): it fences
                // itself after half its lease, as designed, and then the database answers again.
                let client = queue.client
                try await client.withTransaction(logger: queue.logger) { connection in
                    try await connection.query(
                        "SELECT 1 FROM haul_worker WHERE name = 'w' FOR UPDATE", logger: queue.logger)
                    try await Task.sleep(for: .seconds(3))
                }
                #expect(await fenced.value)
                // The first registration's lease runs out; the worker (registered again) rescues its rows.
                try await Task.sleep(for: .seconds(4))
                server.openGate("g")
                let report = await run.value
                let failed = try await queue.downloads([.failed])
                let fetched = Set(server.stats.requests.map(\.path))
                #expect(
                    failed.isEmpty,
                    "\(failed.map { "\($0.path): \($0.error ?? ""), requested: \(fetched.contains("/bytes/\($0.path)"))" })"
                )
                #expect(try await queue.counts() == [.done: 4], "\(report)")
            }
        }
    }

    @Test("a new token renews a paused download as it does a waiting one (it is neither running nor done)")
    func renewPaused() async throws {
        try await withFixtures { server, database, directory in
            try await SharedQueue.withQueue(database) { queue in
                try await queue.enqueue([try download("t", from: server, query: ["token": "old"])])
                let record = try #require(try await queue.download(atPath: "t"))
                #expect(try await queue.pause([record.id]) == 1)
                let report = try await queue.enqueue([try download("t", from: server, query: ["token": "new"])])
                #expect(report == EnqueueReport(added: 0, alreadyQueued: 0, renewed: 1), "\(report)")
                #expect(try await queue.resume([record.id]) == 1)
                let worker = SharedQueueWorker(
                    queue: queue, transport: NIOTransport(),
                    configuration: .init(directory: directory.url, maxConcurrent: 1, exitsWhenEmpty: true))
                #expect(await worker.run().done == 1)
                #expect(
                    server.stats.requests.map(\.target).allSatisfy { $0.contains("token=new") },
                    "\(server.stats.requests.map(\.target))")
            }
        }
    }

    @Test("within one claim, the higher priority starts first")
    func priorityWithinClaim() async throws {
        try await withFixtures { server, database, directory in
            try await SharedQueue.withQueue(database) { queue in
                var low = request(server.url(path: "/bytes/low", query: ["size": "1000"]))
                low.priority = 0
                var high = request(server.url(path: "/bytes/high", query: ["size": "1000"]))
                high.priority = 10
                try await queue.enqueue([
                    try SharedDownload(request: low, path: "low"), try SharedDownload(request: high, path: "high"),
                ])
                let worker = SharedQueueWorker(
                    queue: queue, transport: NIOTransport(),
                    configuration: .init(directory: directory.url, maxConcurrent: 1, exitsWhenEmpty: true))
                #expect(await worker.run().done == 2)
                let order = server.stats.requests.sorted { $0.receivedAt < $1.receivedAt }.map(\.path)
                #expect(order == ["/bytes/high", "/bytes/low"], "\(order)")
            }
        }
    }
}
