import Foundation
import Haul
@testable import HaulDaemon
import HaulTestServer
import HaulTestSupport
import Testing

/// `haul daemon`'s RPC over real sockets: aria2's methods and answers, against a loopback server.
@Suite("Daemon RPC", .timeLimit(.minutes(2)))
struct DaemonRPCTests {
    @Test("addUri to done: the status object's numbers are strings, the file lands in the root, the lists agree")
    func addAndComplete() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness()
            let url = server.url(path: "/bytes/a.bin", query: ["size": "5000"])
            let gid = try #require(try await harness.call("aria2.addUri", [[.string(url.absoluteString)]]).string)
            #expect(gid.count == 16 && gid.allSatisfy(\.isHexDigit))
            try await harness.waitFor(gid, status: "complete")
            let status = try await harness.call("aria2.tellStatus", [.string(gid)])
            let members = try #require(status.object)
            #expect(members["totalLength"] == "5000" && members["completedLength"] == "5000")
            #expect(members["errorCode"] == "0" && members["dir"] == .string(harness.daemon.rootPath))
            let files = try #require(members["files"]?.array?.first?.object)
            #expect(files["path"] == .string(harness.daemon.rootPath + "/a.bin") && files["length"] == "5000")
            #expect(files["uris"] == [["uri": .string(url.absoluteString), "status": "used"]])
            #expect(contentsOf(harness.root.file("a.bin")) == TestServer.expectedBytes(name: "a.bin", size: 5000))
            // Only the keys asked for; a prefix of the GID finds it.
            let brief = try await harness.call(
                "aria2.tellStatus", [.string(String(gid.prefix(6))), ["gid", "status"]])
            #expect(brief == ["gid": .string(gid), "status": "complete"])
            let stopped = try await harness.call("aria2.tellStopped", [.int(0), .int(10), ["gid"]])
            #expect(stopped == [["gid": .string(gid)]])
            #expect(try await harness.call("aria2.tellActive") == [])
            let stat = try #require(try await harness.call("aria2.getGlobalStat").object)
            #expect(stat["numStopped"] == "1" && stat["numActive"] == "0" && stat["numWaiting"] == "0")
            #expect(try await harness.call("aria2.removeDownloadResult", [.string(gid)]) == "OK")
            await #expect(throws: CallError.self) { try await harness.call("aria2.tellStatus", [.string(gid)]) }
            await harness.stop()
        }
    }

    @Test("pause, unpause, positions and pages: the waiting list in order, negative offsets counted from the end")
    func waitingList() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness(maxConcurrent: 1)
            var gids: [String] = []
            for name in ["a", "b", "c", "d"] {
                let url = server.url(path: "/bytes/\(name)", query: ["size": "100", "hold": "g"])
                gids.append(
                    try #require(try await harness.call("aria2.addUri", [[.string(url.absoluteString)]]).string))
            }
            try await eventually("a held") { server.heldCount(at: "g") == 1 }
            func waiting(_ offset: Int64, _ count: Int64) async throws -> [String] {
                let list = try await harness.call("aria2.tellWaiting", [.int(offset), .int(count), ["gid"]])
                return list.array?.compactMap { $0.object?["gid"]?.string } ?? []
            }
            #expect(try await waiting(0, 10) == [gids[1], gids[2], gids[3]])
            #expect(try await waiting(-1, 2) == [gids[3], gids[2]])
            #expect(try await waiting(1, 1) == [gids[2]])
            #expect(try await waiting(5, 1) == [])
            #expect(try await waiting(-5, 2) == [])
            // Moved to the front (aria2 answers the new position as a number), then one back from there.
            #expect(try await harness.call("aria2.changePosition", [.string(gids[3]), .int(0), "POS_SET"]) == .int(0))
            #expect(try await harness.call("aria2.changePosition", [.string(gids[3]), .int(1), "POS_CUR"]) == .int(1))
            #expect(try await harness.call("aria2.changePosition", [.string(gids[1]), .int(0), "POS_END"]) == .int(2))
            #expect(try await waiting(0, 10) == [gids[3], gids[2], gids[1]])
            #expect(try await harness.call("aria2.pause", [.string(gids[2])]) == .string(gids[2]))
            let paused = try await harness.call("aria2.tellStatus", [.string(gids[2]), ["status"]])
            #expect(paused == ["status": "paused"])
            await #expect(throws: CallError.self) { try await harness.call("aria2.unpause", [.string(gids[3])]) }
            #expect(
                try await harness.call("aria2.tellActive", [["gid", "status"]]) == [
                    ["gid": .string(gids[0]), "status": "active"]
                ])
            server.openGate("g")
            try await harness.waitFor(gids[1], status: "complete")
            // Passed over while paused; resumed, it runs.
            #expect(try await harness.call("aria2.tellStatus", [.string(gids[2]), ["status"]]) == ["status": "paused"])
            #expect(try await harness.call("aria2.unpause", [.string(gids[2])]) == .string(gids[2]))
            try await harness.waitFor(gids[2], status: "complete")
            #expect(server.stats.requests.map(\.path) == ["/bytes/a", "/bytes/d", "/bytes/b", "/bytes/c"])
            let stopped = try await harness.call("aria2.tellStopped", [.int(-1), .int(2), ["gid"]])
            #expect(stopped == [["gid": .string(gids[2])], ["gid": .string(gids[1])]])
            #expect(try await harness.call("aria2.purgeDownloadResult") == "OK")
            #expect(try await harness.call("aria2.tellStopped", [.int(0), .int(10)]) == [])
            await harness.stop()
        }
    }

    @Test("pages from the end and POS_END count the downloads waiting, not a split file's connections waiting")
    func waitingListWithConnections() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let queue = daemonTestQueue(width: 1)
            let daemon = try Daemon(queue: queue, configuration: .init(root: root.url))
            // One slot: the split file's extra connections wait for it, ahead of the download waiting.
            let big = server.url(path: "/bytes/big.bin", query: ["size": "\(4 << 20)", "rate": "200000"])
            let split = try #require(
                daemon.call(
                    "aria2.addUri", [[.string(big.absoluteString)], ["split": "4", "min-split-size": "1M"]]
                ).string)
            let small = server.url(path: "/bytes/small", query: ["size": "100"])
            let waiting = try #require(daemon.call("aria2.addUri", [[.string(small.absoluteString)]]).string)
            try await eventually("connections waiting") { queue.waitingCount > 1 }
            #expect(listedGIDs(try daemon.call("aria2.tellActive", [["gid"]])) == [split])
            #expect(listedGIDs(try daemon.call("aria2.tellWaiting", [0, 10, ["gid"]])) == [waiting])
            #expect(listedGIDs(try daemon.call("aria2.tellWaiting", [-1, 1, ["gid"]])) == [waiting])
            #expect(try daemon.call("aria2.changePosition", [.string(waiting), 0, "POS_END"]) == 0)
            daemon.close()
            queue.cancelAll()
            await queue.waitUntilIdle()
        }
    }

    @Test("a download paused while it runs is active, in tellActive, until its run has stopped; then paused, waiting")
    func pausedWhileStopping() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let clock = GatedClock()
            let queue = daemonTestQueue(width: 1, clock: clock)
            let daemon = try Daemon(queue: queue, configuration: .init(root: root.url))
            func status() throws -> JSON? {
                try daemon.call("aria2.tellStatus", [.string(gid), ["status"]]).object?["status"]
            }
            // Its first attempt fails (503): its run waits before the next, and stops only when the clock lets it.
            let url = server.url(path: "/bytes/p", query: ["status": "503"])
            let gid = try #require(daemon.call("aria2.addUri", [[.string(url.absoluteString)]]).string)
            await clock.entered.wait()
            #expect(try daemon.call("aria2.pause", [.string(gid)]) == .string(gid))
            #expect(listedGIDs(try daemon.call("aria2.tellActive", [["gid"]])) == [gid])
            #expect(listedGIDs(try daemon.call("aria2.tellWaiting", [0, 10, ["gid"]])).isEmpty)
            #expect(try status() == "active")
            clock.release.open()
            try await eventually("stopped, paused") { (try? status()) == "paused" }
            #expect(listedGIDs(try daemon.call("aria2.tellActive", [["gid"]])).isEmpty)
            #expect(listedGIDs(try daemon.call("aria2.tellWaiting", [0, 10, ["gid"]])) == [gid])
            daemon.close()
            queue.cancelAll()
            await queue.waitUntilIdle()
        }
    }

    @Test("remove: a waiting or running download ends as removed, nothing at its destination")
    func remove() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness(maxConcurrent: 1)
            let held = server.url(path: "/bytes/r1", query: ["size": "100", "hold": "g"])
            let running = try #require(try await harness.call("aria2.addUri", [[.string(held.absoluteString)]]).string)
            let other = server.url(path: "/bytes/r2", query: ["size": "100"])
            let waiting = try #require(try await harness.call("aria2.addUri", [[.string(other.absoluteString)]]).string)
            try await eventually("held") { server.heldCount(at: "g") == 1 }
            #expect(try await harness.call("aria2.remove", [.string(waiting)]) == .string(waiting))
            #expect(try await harness.call("aria2.forceRemove", [.string(running)]) == .string(running))
            try await harness.waitFor(running, status: "removed")
            try await harness.waitFor(waiting, status: "removed")
            #expect(harness.root.contents().filter { !$0.hasPrefix(".") } == [])
            await #expect(throws: CallError.self) { try await harness.call("aria2.remove", [.string(running)]) }
            await harness.stop()
        }
    }

    @Test("a speed limit changed with changeOption holds an active download back, and lifting it lets it end")
    func changeOptionSpeed() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness()
            let url = server.url(
                path: "/bytes/slow", query: ["size": "3000000", "stallAfter": "100000", "stall": "gate:s"])
            let gid = try #require(
                try await harness.call("aria2.addUri", [[.string(url.absoluteString)], ["max-download-limit": "0"]])
                    .string)
            try await eventually("bytes") {
                ((try? harness.daemon.call("aria2.tellStatus", [.string(gid)]))?.object?["completedLength"]?.string)
                    .flatMap { Int($0) } ?? 0 > 0
            }
            #expect(try await harness.call("aria2.changeOption", [.string(gid), ["max-download-limit": "1"]]) == "OK")
            #expect(try await harness.call("aria2.getOption", [.string(gid)]).object?["max-download-limit"] == "1")
            server.openGate("s")
            try await eventually("held back") {
                let completed = (try? harness.daemon.call("aria2.tellStatus", [.string(gid)]))?.object?[
                    "completedLength"]
                return (completed?.string.flatMap { Int($0) } ?? 0) > 100_000
            }
            #expect(try await harness.call("aria2.tellStatus", [.string(gid), ["status"]]) == ["status": "active"])
            #expect(try await harness.call("aria2.changeOption", [.string(gid), ["max-download-limit": "0"]]) == "OK")
            try await harness.waitFor(gid, status: "complete")
            await #expect(throws: CallError.self) {
                try await harness.call("aria2.changeOption", [.string(gid), ["split": "4"]])
            }
            await harness.stop()
        }
    }

    @Test("global options: max-concurrent-downloads at once, download defaults checked when set")
    func globalOptions() async throws {
        let harness = try await DaemonHarness(maxConcurrent: 2)
        #expect(try await harness.call("aria2.getGlobalOption").object?["max-concurrent-downloads"] == "2")
        #expect(
            try await harness.call("aria2.changeGlobalOption", [["max-concurrent-downloads": "5", "split": "3"]])
                == "OK")
        #expect(harness.queue.maxConcurrentDownloads == 5)
        let options = try #require(try await harness.call("aria2.getGlobalOption").object)
        #expect(options["max-concurrent-downloads"] == "5" && options["split"] == "3")
        #expect(options["max-overall-download-limit"] == "0" && harness.queue.downloader.maxBytesPerSecond == nil)
        #expect(try await harness.call("aria2.changeGlobalOption", [["max-overall-download-limit": "2M"]]) == "OK")
        #expect(harness.queue.downloader.maxBytesPerSecond == 2 << 20)
        #expect(try await harness.call("aria2.getGlobalOption").object?["max-overall-download-limit"] == "2097152")
        for bad: JSON in [
            ["max-concurrent-downloads": "0"], ["split": "many"], ["no-such-option": "1"], ["dir": "/tmp"],
            ["max-overall-download-limit": "fast"],
            // Checked whole: the good option beside a bad one does not apply either.
            ["max-concurrent-downloads": "7", "split": "many"],
        ] {
            await #expect(throws: CallError.self, "\(bad)") {
                try await harness.call("aria2.changeGlobalOption", [bad])
            }
        }
        #expect(harness.queue.maxConcurrentDownloads == 5)
        #expect(
            try await harness.call("aria2.changeGlobalOption", [["all-proxy": "http://u:global-proxy-pw@127.0.0.1:1"]])
                == "OK")
        let shown = try await harness.call("aria2.getGlobalOption")
        #expect(shown.object?["all-proxy"] == "http://u:...@127.0.0.1:1" && !"\(shown)".contains("global-proxy-pw"))
        #expect(try await harness.call("aria2.changeGlobalOption", [["max-overall-download-limit": "0"]]) == "OK")
        #expect(harness.queue.downloader.maxBytesPerSecond == nil)
        await harness.stop()
    }

    @Test("getVersion, getSessionInfo, the listings (without a token), multicall and a batch over HTTP")
    func systemMethods() async throws {
        let harness = try await DaemonHarness()
        let version = try #require(try await harness.call("aria2.getVersion").object)
        #expect(version["version"]?.string?.isEmpty == false)
        #expect(version["enabledFeatures"]?.array?.contains("haul.onDownloadWaiting") == true)
        let session = try await harness.call("aria2.getSessionInfo").object?["sessionId"]?.string
        #expect(session?.count == 32)
        let methods = try #require(try await harness.call("system.listMethods", token: nil).array)
        #expect(methods.contains("aria2.addUri") && methods.contains("system.multicall"))
        #expect(
            try await harness.call("system.listNotifications", token: nil).array?.contains("aria2.onDownloadStart")
                == true)
        let multicall = try await harness.call(
            "system.multicall",
            [
                [
                    ["methodName": "aria2.getGlobalStat", "params": [.string("token:\(DaemonHarness.secret)")]],
                    [
                        "methodName": "aria2.tellStatus",
                        "params": [.string("token:\(DaemonHarness.secret)"), "0000000000000001"],
                    ],
                ]
            ],
            token: nil)
        let results = try #require(multicall.array)
        #expect(results.count == 2 && results[0].array?.first?.object?["numActive"] == "0")
        #expect(results[1].object?["message"] == "GID 0000000000000001 is not found")
        let batch = try await harness.post([
            [
                "jsonrpc": "2.0", "id": 1, "method": "aria2.getVersion",
                "params": [.string("token:\(DaemonHarness.secret)")],
            ],
            [
                "jsonrpc": "2.0", "id": 2, "method": "aria2.nothing",
                "params": [.string("token:\(DaemonHarness.secret)")],
            ],
        ])
        let answers = try #require(batch.json?.array)
        #expect(
            answers.count == 2 && answers[1].object?["error"]?.object?["message"] == "No such method: aria2.nothing")
        #expect(batch.header("content-type") == "application/json-rpc")
        await harness.stop()
    }

    @Test("aria2's pages: offsets from the start and from the end, clamped as aria2 clamps them")
    func pages() {
        #expect(Daemon.page(5, offset: 0, count: 2) == 0..<2)
        #expect(Daemon.page(5, offset: 3, count: 10) == 3..<5)
        #expect(Daemon.page(5, offset: 5, count: 1) == 0..<0)
        #expect(Daemon.page(5, offset: -1, count: 2) == 3..<5)
        #expect(Daemon.page(5, offset: -2, count: 10) == 0..<4)
        #expect(Daemon.page(5, offset: -6, count: 1) == 0..<0)
        #expect(Daemon.page(5, offset: 0, count: 0) == 0..<0)
    }
}
