import Foundation
import Haul
import HaulDaemon
import HaulNIO
import HaulTestServer
import HaulTestSupport
import Testing

@testable import HaulPostgres

/// `haul daemon --db` (``Fleet``) against races with workers and workers that die: a download added paused while a
/// worker waits for work, a removal of what a killed worker held.
@Suite(
    "Fleet against idle and dead workers", .timeLimit(.minutes(3)), .serialized,
    .enabled(if: TestPlatform.isLinux, "runs Debian's PostgreSQL 15, which scripts/test installs"))
struct FleetHazardTests {
    private func withFleet(_ body: (Fleet, TestServer, TemporaryDirectory) async throws -> Void) async throws {
        try await PostgresServer.withRunning { postgres in
            try await TestServer.withRunning { server in
                try await SharedQueue.withQueue(try DatabaseURL(postgres.url)) { queue in
                    try await body(Fleet(queue: queue), server, try TemporaryDirectory())
                }
            }
        }
    }

    @Test("addUri with pause=true adds the download paused: an idle worker never fetches it")
    func addPausedWithIdleWorker() async throws {
        try await withFleet { fleet, server, directory in
            let worker = SharedQueueWorker(
                queue: fleet.queue, transport: NIOTransport(),
                configuration: .init(directory: directory.url, maxConcurrent: 2, lease: .seconds(30), name: "idle"))
            let started = Task { await worker.events.first { if case .started = $0 { true } else { false } } != nil }
            let run = Task { await worker.run() }
            #expect(await started.value)
            var gids: [String] = []
            for index in 0..<5 {
                let url = server.url(path: "/bytes/paused\(index)", query: ["size": "100000"]).absoluteString
                gids.append(
                    try #require(try await fleet.call("aria2.addUri", [[.string(url)], ["pause": "true"]]).string))
            }
            // One download not paused, added last: once it is done, the worker has had every chance to claim the
            // others.
            let last = server.url(path: "/bytes/last", query: ["size": "1000"]).absoluteString
            let lastGID = try #require(try await fleet.call("aria2.addUri", [[.string(last)]]).string)
            try await eventuallyAsync("the last download complete", within: .seconds(30)) {
                let status = try? await fleet.call("aria2.tellStatus", [.string(lastGID), ["status"]])
                return status?.object?["status"] == "complete"
            }
            var states: [String] = []
            for gid in gids {
                states.append(
                    try await fleet.call("aria2.tellStatus", [.string(gid), ["status"]]).object?["status"]?.string
                        ?? "?")
            }
            run.cancel()
            _ = await run.value
            #expect(server.stats.requestCount == 1, "a download added paused was fetched: \(states)")
            #expect(states.allSatisfy { $0 == "paused" }, "\(states)")
        }
    }

    @Test("aria2.remove of a download held by a killed worker: the fleet shows it removed, the worker not active")
    func removeHeldByDeadWorker() async throws {
        try await withFleet { fleet, server, _ in
            let url = server.url(path: "/bytes/d0").absoluteString
            let gid = try #require(try await fleet.call("aria2.addUri", [[.string(url)]]).string)
            // `haul worker` SIGKILLed right after its claim; `haul daemon --db -j 0` is the only process left.
            let killed = try await fleet.queue.registerWorker(
                name: "killed", directory: "/k", lease: .milliseconds(500))
            #expect(try await fleet.queue.claim(worker: killed, limit: 1).count == 1)
            try await Task.sleep(for: .seconds(3))
            #expect(try await fleet.call("aria2.remove", [.string(gid)]).string == gid)
            try await Task.sleep(for: .seconds(1))
            let status = try await fleet.call("aria2.tellStatus", [.string(gid), ["status"]])
            let overview = try await fleet.call("haul.fleet", [])
            let workers = overview.object?["workers"]?.array ?? []
            #expect(status.object?["status"] == "removed", "\(status)")
            #expect(workers.first?.object?["state"] != "active", "\(workers)")
        }
    }
}
