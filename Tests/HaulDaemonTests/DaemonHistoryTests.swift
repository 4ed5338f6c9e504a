import Foundation
import Haul
import HaulDaemon
import HaulNIO
import HaulTestSupport
import Testing

/// A history longer than what is kept in memory: the newest in memory, every one in the store, the pages, lookups,
/// searches and removals the same over both, and after a restart.
@Suite("haul daemon: a long history", .timeLimit(.minutes(3)))
struct DaemonHistoryTests {
    static let count = 1205

    func start(_ root: TemporaryDirectory) throws -> Daemon {
        let queue = daemonTestQueue(width: 1, retries: 0)
        let store = try DaemonStore(path: root.file(".haul/daemon.sqlite").path)
        return try Daemon(queue: queue, configuration: .init(root: root.url, store: store))
    }

    func gids(_ answer: JSON) -> [String] { answer.array?.compactMap { $0.object?["gid"]?.string } ?? [] }

    @Test("1,205 stopped: pages across memory and store, lookups by GID and prefix, search, removal, restart")
    func longHistory() async throws {
        let root = try TemporaryDirectory()
        try FileManager.default.createDirectory(at: root.file(".haul"), withIntermediateDirectories: true)
        let daemon = try start(root)
        // One at a time, refused at once: they stop in the order they were added.
        let all = try (0..<Self.count).map { index in
            try #require(try daemon.call("aria2.addUri", [[.string("http://127.0.0.1:9/file-\(index).bin")]]).string)
        }
        try await eventually("all stopped", within: .seconds(60)) {
            (try? daemon.call("aria2.getGlobalStat", []))?.object?["numStopped"] == .string(String(Self.count))
        }
        // The oldest are read from the store, the newest from memory, and a page across the two in one order.
        #expect(gids(try daemon.call("aria2.tellStopped", [0, 10, ["gid"]])) == Array(all[0..<10]))
        #expect(gids(try daemon.call("aria2.tellStopped", [195, 20, ["gid"]])) == Array(all[195..<215]))
        #expect(gids(try daemon.call("aria2.tellStopped", [-1, 1000, ["gid"]])) == Array(all.suffix(1000).reversed()))
        #expect(gids(try daemon.call("aria2.tellStopped", [0, 2000, ["gid"]])) == all)
        let oldest = try daemon.call("aria2.tellStatus", [.string(all[0])]).object
        #expect(oldest?["status"] == "error" && oldest?["errorCode"] != "0")
        #expect(
            oldest?["files"]?.array?.first?.object?["uris"]?.array?.first?.object?["uri"]
                == "http://127.0.0.1:9/file-0.bin")
        #expect(try daemon.call("aria2.getUris", [.string(String(all[1].prefix(12)))]).array?.count == 1)
        // History: newest first, searched in the store.
        let newest = try daemon.call("haul.tellHistory", [0, 3, .null, ["gid"]]).object
        #expect(newest?["total"] == .string(String(Self.count)))
        #expect(gids(newest?["downloads"] ?? []) == Array(all.suffix(3).reversed()))
        let found = try daemon.call("haul.tellHistory", [0, 10, ["query": "FILE-7.bin"], ["gid"]]).object
        #expect(found?["total"] == "1" && gids(found?["downloads"] ?? []) == [all[7]])
        // A search with a status, in the store: the pattern and the statuses each in their place.
        let failed = try daemon.call(
            "haul.tellHistory", [0, 10, ["query": "file-12", "status": ["error", "removed"]], ["gid"]]
        ).object
        #expect(failed?["total"] == "16")  // file-12, file-120 to file-129, file-1200 to file-1204
        let none = try daemon.call("haul.tellHistory", [0, 10, ["query": "file-12", "status": ["complete"]], ["gid"]])
        #expect(none.object?["total"] == "0")
        // LIKE's wildcards in a query are plain characters.
        for literal in ["file_7.bin", "file%7.bin", "100%"] {
            let matched = try daemon.call("haul.tellHistory", [0, 10, ["query": .string(literal)], ["gid"]]).object
            #expect(matched?["total"] == "0", "\(literal)")
        }
        // An old one removed from the store, a gid of an old one not given again.
        #expect(try daemon.call("aria2.removeDownloadResult", [.string(all[0])]) == "OK")
        #expect(throws: RPCError.self) { try daemon.call("aria2.tellStatus", [.string(all[0])]) }
        #expect(throws: RPCError.self) {
            try daemon.call("aria2.addUri", [["http://127.0.0.1:9/again"], ["gid": .string(all[1]), "pause": "true"]])
        }
        #expect(try daemon.call("aria2.getGlobalStat", []).object?["numStopped"] == .string(String(Self.count - 1)))
        // A page answered again is the same page until the history changes, and right after it does.
        #expect(gids(try daemon.call("aria2.tellStopped", [0, 10, ["gid"]])) == Array(all[1..<11]))
        #expect(
            gids(try daemon.call("aria2.tellStopped", [-1, 2, ["gid"]])) == [all[Self.count - 1], all[Self.count - 2]])
        #expect(try daemon.call("aria2.removeDownloadResult", [.string(all[Self.count - 1])]) == "OK")
        #expect(
            gids(try daemon.call("aria2.tellStopped", [-1, 2, ["gid"]])) == [all[Self.count - 2], all[Self.count - 3]])
        _ = try daemon.call("aria2.addUri", [["http://127.0.0.1:9/late.bin"]])
        try await eventually("the late one stopped") {
            (try? daemon.call("aria2.tellStopped", [-1, 1, ["files"]]))?.array?.first?.object?["files"]?.array?.first?
                .object?["uris"]?.array?.first?.object?["uri"] == "http://127.0.0.1:9/late.bin"
        }
        daemon.close()

        let restarted = try start(root)
        #expect(try restarted.call("aria2.getGlobalStat", []).object?["numStopped"] == .string(String(Self.count - 1)))
        #expect(
            gids(try restarted.call("aria2.tellStopped", [0, 2000, ["gid"]])).prefix(Self.count - 2)
                == all[1..<(Self.count - 1)])
        #expect(try restarted.call("aria2.tellStatus", [.string(all[1]), ["status"]]) == ["status": "error"])
        #expect(try restarted.call("aria2.purgeDownloadResult", []) == "OK")
        #expect(try restarted.call("aria2.getGlobalStat", []).object?["numStopped"] == "0")
        #expect(try restarted.call("aria2.tellStopped", [0, 10]) == [])
        restarted.close()
    }

    @Test("a result removed the moment it ended does not come back after a restart; one just ended does")
    func removedAsItEnds() async throws {
        let root = try TemporaryDirectory()
        try FileManager.default.createDirectory(at: root.file(".haul"), withIntermediateDirectories: true)
        let daemon = try start(root)
        var removed: Set<String> = []
        let all = try (0..<60).map { index in
            try #require(try daemon.call("aria2.addUri", [[.string("http://127.0.0.1:9/r\(index)")]]).string)
        }
        // Each removed as soon as it is listed as stopped, within the time its row is gathered to be written.
        try await eventually("all removed", within: .seconds(30)) {
            for gid in gids((try? daemon.call("aria2.tellStopped", [0, 100, ["gid"]])) ?? []) where gid != all.last {
                if (try? daemon.call("aria2.removeDownloadResult", [.string(gid)])) == "OK" { removed.insert(gid) }
            }
            return removed.count == all.count - 1
        }
        try await eventually("the last one stopped") {
            (try? daemon.call("aria2.tellStatus", [.string(all.last ?? ""), ["status"]])) == ["status": "error"]
        }
        daemon.close()
        let restarted = try start(root)
        #expect(gids(try restarted.call("aria2.tellStopped", [0, 100, ["gid"]])) == [all.last])
        restarted.close()
    }
}
