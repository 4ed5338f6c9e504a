import Foundation
import Haul
import HaulDaemon
import HaulNIO
import HaulPostgres
import HaulTestServer
import HaulTestSupport
import Testing

/// `haul daemon --db`'s methods over a real PostgreSQL 15 shared queue, a worker in this process: what aria2's
/// clients and the fleet page call, checked against the queue itself.
@Suite(
    "Fleet: aria2's RPC over the shared queue", .timeLimit(.minutes(3)), .serialized,
    .enabled(if: TestPlatform.isLinux, "runs Debian's PostgreSQL 15, which scripts/test installs"))
struct FleetTests {
    private func withFleet(_ body: (Fleet, TestServer, TemporaryDirectory) async throws -> Void) async throws {
        try await PostgresServer.withRunning { postgres in
            try await TestServer.withRunning { server in
                try await SharedQueue.withQueue(try DatabaseURL(postgres.url)) { queue in
                    try await body(Fleet(queue: queue), server, try TemporaryDirectory())
                }
            }
        }
    }

    private func worker(_ fleet: Fleet, _ directory: TemporaryDirectory, name: String = "w1") -> SharedQueueWorker {
        SharedQueueWorker(
            queue: fleet.queue, transport: NIOTransport(),
            configuration: .init(
                directory: directory.url, maxConcurrent: 2, lease: .milliseconds(1_200), name: name,
                exitsWhenEmpty: true))
    }

    @Test(
        "addUri enqueues at dir/out under the workers' directories; the lists, tellStatus and the global stat read it")
    func addAndList() async throws {
        try await withFleet { fleet, server, directory in
            let url = server.url(path: "/bytes/a", query: ["size": "2048"]).absoluteString
            let first = try #require(
                try await fleet.call("aria2.addUri", [[.string(url)], ["dir": "sub/dir", "out": "a.bin"]]).string)
            #expect(first.count == 16)
            let named = try #require(
                try await fleet.call("aria2.addUri", [[.string(server.url(path: "/bytes/b.iso").absoluteString)]])
                    .string)
            let again = try await fleet.call("aria2.addUri", [[.string(url)], ["dir": "sub/dir", "out": "a.bin"]])
            #expect(again.string == first, "the same URL at the same path is the download queued already")
            let status = try await fleet.call("aria2.tellStatus", [.string(first)])
            #expect(status.object?["status"]?.string == "waiting")
            #expect(status.object?["files"]?.array?.first?.object?["path"]?.string == "sub/dir/a.bin")
            let keys = try await fleet.call("aria2.tellStatus", [.string(named), ["gid", "status"]])
            #expect(keys.object?.keys.sorted() == ["gid", "status"])
            let waiting = try await fleet.call("aria2.tellWaiting", [0, 10, ["gid"]])
            #expect(waiting.array?.compactMap { $0.object?["gid"]?.string } == [first, named])
            #expect(try await fleet.call("aria2.getGlobalStat", []).object?["numWaiting"] == "2")

            let report = await worker(fleet, directory).run()
            #expect(report.done == 2, "\(report)")
            let done = try await fleet.call("aria2.tellStatus", [.string(first)])
            #expect(done.object?["status"] == "complete" && done.object?["completedLength"] == "2048")
            #expect(done.object?["worker"] == "w1")
            #expect(FileManager.default.fileExists(atPath: directory.url.appendingPathComponent("sub/dir/a.bin").path))
            let stopped = try await fleet.call("aria2.tellStopped", [0, 10, ["gid", "status"]])
            #expect(
                stopped.array?.count == 2 && stopped.array?.allSatisfy { $0.object?["status"] == "complete" } == true)
            let page = try await fleet.call("haul.fleetDownloads", ["complete", 1, 1])
            #expect(page.object?["total"] == 2 && page.object?["downloads"]?.array?.count == 1)
            let overview = try await fleet.call("haul.fleet", [])
            let workers = overview.object?["workers"]?.array ?? []
            #expect(workers.map { $0.object?["name"]?.string } == ["w1"], "\(overview)")
            #expect(workers.first?.object?["state"] == "stopped" && workers.first?.object?["done"] == 2)
            #expect(workers.first?.object?["machine"]?.string?.isEmpty == false)
            let samples = overview.object?["throughput"]?.array ?? []
            #expect(samples.count == 60)
            #expect(samples.reduce(Int64(0)) { $0 + ($1.object?["files"]?.int ?? 0) } == 2)
            #expect(overview.object?["counts"]?.object?["done"] == 2)
        }
    }

    @Test("pause, unpause and remove act on the queue; bulk retry puts failures back; errors say what is wrong")
    func actions() async throws {
        try await withFleet { fleet, server, directory in
            var gids: [String] = []
            for name in ["p", "q", "missing"] {
                let query = name == "missing" ? ["status": "404"] : ["size": "1000"]
                let url = server.url(path: "/bytes/\(name)", query: query).absoluteString
                gids.append(try #require(try await fleet.call("aria2.addUri", [[.string(url)]]).string))
            }
            #expect(try await fleet.call("aria2.pause", [.string(gids[0])]).string == gids[0])
            await #expect(throws: RPCError("GID \(gids[0]) cannot be changed in its state")) {
                try await fleet.call("aria2.pause", [.string(gids[0])])
            }
            #expect(try await fleet.call("aria2.tellStatus", [.string(gids[0]), ["status"]]) == ["status": "paused"])
            #expect(try await fleet.call("aria2.remove", [.string(gids[1])]).string == gids[1])
            let report = await worker(fleet, directory).run()
            #expect(report.done == 0 && report.failed == 1, "\(report)")
            #expect(try await fleet.call("aria2.unpause", [.string(gids[0])]).string == gids[0])
            #expect(try await fleet.call("haul.fleetRetry", [.array(gids.map { .string($0) })]) == 2)
            let second = await worker(fleet, directory).run()
            #expect(second.done == 2 && second.failed == 1, "\(second)")
            #expect(try await fleet.call("haul.fleetRetry", []) == 1, "every failure, without a list")
            #expect(try await fleet.call("haul.fleetRemove", [.array(gids.map { .string($0) })]) == 1)

            await #expect(throws: RPCError("GID 00000000000003e7 is not found")) {
                try await fleet.call("aria2.tellStatus", ["00000000000003e7"])
            }
            await #expect(
                throws: RPCError("aria2.changePosition is not available on a shared queue (haul daemon --db)")
            ) {
                try await fleet.call("aria2.changePosition", [.string(gids[0]), 0, "POS_SET"])
            }
            await #expect(throws: RPCError("option http-passwd is not available on a shared queue (haul daemon --db)"))
            {
                try await fleet.call("aria2.addUri", [["http://127.0.0.1/x"], ["http-user": "u", "http-passwd": "p"]])
            }
            await #expect(throws: RPCError.self) {
                try await fleet.call("aria2.addUri", [["http://127.0.0.1/x"], ["header": "Authorization: Bearer t"]])
            }
            // A URL naming no file is saved as wget and haul get save it.
            let index = try await fleet.call("aria2.addUri", [["http://127.0.0.1/"]])
            let path = try await fleet.call("aria2.tellStatus", [index]).object?["files"]?.array?.first?.object?["path"]
            #expect(path == "index.html")
            await #expect(throws: RPCError("dir '..' leads out of its directory")) {
                try await fleet.call("aria2.addUri", [["http://127.0.0.1/x"], ["dir": "../up"]])
            }
            #expect(try await fleet.call("haul.changeFleet", [["per-host": "3"]]) == "OK")
            #expect(try await fleet.call("haul.fleet", []).object?["perHost"] == 3)
        }
    }
}
