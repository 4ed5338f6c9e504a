import Foundation
import GRDB
import Haul
import HaulDaemon
import HaulNIO
import HaulTestSupport
import Testing

/// `addUri` calls in a run (a multicall, a batch) are recorded together: each call answered as it would be on its
/// own, a write the store refuses failing its group's calls and adding none of them, a restart bringing back every
/// download that was answered.
@Suite("haul daemon: adds recorded together")
struct DaemonAddTests {
    func start(_ root: TemporaryDirectory) throws -> Daemon {
        try FileManager.default.createDirectory(at: root.file(".haul"), withIntermediateDirectories: true)
        let queue = daemonTestQueue(width: 1, retries: 0)
        let store = try DaemonStore(path: root.file(".haul/daemon.sqlite").path)
        return try Daemon(queue: queue, configuration: .init(root: root.url, store: store))
    }

    /// The results of a `system.multicall` of `calls`, through the endpoint as a client's request is answered.
    func multicall(_ daemon: Daemon, _ calls: [JSON]) async throws -> [JSON] {
        let body: JSON = ["jsonrpc": "2.0", "id": 1, "method": "system.multicall", "params": [.array(calls)]]
        let answer = try #require(await daemon.endpoint(secret: nil).handle(body.encoded()).answer)
        return try #require(try JSON.parse(answer).object?["result"]?.array)
    }

    static func add(_ name: String, _ options: [String: JSON] = [:], position: Int? = nil) -> JSON {
        var params: [JSON] = [
            [.string("http://127.0.0.1:9/\(name)")], .object(options.merging(["pause": "true"]) { given, _ in given }),
        ]
        if let position { params.append(.int(Int64(position))) }
        return ["methodName": "aria2.addUri", "params": .array(params)]
    }

    func waiting(_ daemon: Daemon) throws -> [String] {
        try daemon.call("aria2.tellWaiting", [0, 2000, ["gid"]]).array?.compactMap { $0.object?["gid"]?.string } ?? []
    }

    @Test("600 adds in one multicall, bad ones and a position among them: answered one by one, kept across a restart")
    func longRun() async throws {
        let root = try TemporaryDirectory()
        let daemon = try start(root)
        let given = "0123456789abcdef"
        var calls = (0..<600).map { Self.add("file-\($0)") }
        calls[5] = Self.add("bad", ["max-download-limit": "fast"])
        calls[300] = Self.add("first", position: 0)
        calls[400] = Self.add("given", ["gid": .string(given)])
        calls[401] = Self.add("given-again", ["gid": .string(given)])
        let results = try await multicall(daemon, calls)
        #expect(results.count == 600)
        #expect(results[5].object?["code"] == .int(1))
        #expect(results[401].object?["message"] == .string("GID \(given) is not unique."))
        #expect(results[400] == [.string(given)])
        let added = results.enumerated().compactMap { index, result in
            result.array?.first?.string.map { (index, $0) }
        }
        #expect(added.count == 598)
        // In the order they were added, but the one that asked for the front.
        let order = added.filter { $0.0 == 300 }.map(\.1) + added.filter { $0.0 != 300 }.map(\.1)
        #expect(try waiting(daemon) == order)
        daemon.close()

        let restarted = try start(root)
        #expect(try waiting(restarted) == order)
        #expect(try restarted.call("aria2.tellStatus", [.string(given), ["status"]]) == ["status": "paused"])
        restarted.close()
    }

    @Test("paused and started adds mixed in one multicall: each as asked, in order, the started ones run")
    func mixed() async throws {
        let root = try TemporaryDirectory()
        let daemon = try start(root)
        // Even ones paused, odd ones started (to a closed port: each ends at once with an error).
        let calls = (0..<40).map { index in
            index.isMultiple(of: 2) ? Self.add("p\(index)") : Self.add("s\(index)", ["pause": "false"])
        }
        let gids = try await multicall(daemon, calls).compactMap { $0.array?.first?.string }
        #expect(gids.count == 40)
        try await eventually("the started ones stopped") {
            (try? daemon.call("aria2.tellStopped", [0, 100, ["gid"]]))?.array?.count == 20
        }
        let stopped = try daemon.call("aria2.tellStopped", [0, 100, ["gid", "status"]]).array ?? []
        #expect(
            Set(stopped.compactMap { $0.object?["gid"]?.string })
                == Set(gids.enumerated().filter { $0.0 % 2 == 1 }.map(\.1)))
        #expect(stopped.allSatisfy { $0.object?["status"] == "error" })
        #expect(try waiting(daemon) == gids.enumerated().filter { $0.0.isMultiple(of: 2) }.map(\.1))
        daemon.close()
    }

    @Test("a write the store refuses fails every add of its group and adds none of them; the next group is added")
    func refusedWrite() async throws {
        let root = try TemporaryDirectory()
        let daemon = try start(root)
        let first = try #require(try await multicall(daemon, [Self.add("first")]).first?.array?.first?.string)
        // Another connection makes the store refuse one row of the group (the second), as a full disk would.
        let other = try DatabaseQueue(path: root.file(".haul/daemon.sqlite").path)
        try await other.write { db in
            try db.execute(
                sql: """
                    CREATE TRIGGER refuse BEFORE INSERT ON downloads WHEN NEW.uris LIKE '%/b"%'
                    BEGIN SELECT RAISE(ABORT, 'no room'); END
                    """)
        }
        let refused = try await multicall(daemon, [Self.add("a"), Self.add("b"), Self.add("c")])
        #expect(refused.count == 3)
        for result in refused {
            let message = result.object?["message"]?.string ?? ""
            #expect(message.hasPrefix("cannot record the download") && message.contains("no room"), "\(result)")
        }
        #expect(try waiting(daemon) == [first])
        #expect(try daemon.call("aria2.tellStopped", [0, 10]).array == [])
        try await other.write { db in try db.execute(sql: "DROP TRIGGER refuse") }
        let added = try await multicall(daemon, [Self.add("d"), Self.add("e")]).compactMap { $0.array?.first?.string }
        #expect(added.count == 2)
        #expect(try waiting(daemon) == [first] + added)
        daemon.close()

        let restarted = try start(root)
        #expect(try waiting(restarted) == [first] + added)
        restarted.close()
    }
}
