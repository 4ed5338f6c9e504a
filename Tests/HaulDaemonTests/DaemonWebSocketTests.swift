import Foundation
import Haul
import HaulDaemon
import HaulTestServer
import HaulTestSupport
import Testing

/// The RPC over WebSocket on the same port and path, and aria2's notifications.
@Suite("Daemon WebSocket", .timeLimit(.minutes(2)))
struct DaemonWebSocketTests {
    private func open(_ harness: DaemonHarness, origin: String? = nil) async throws -> WebSocketClient {
        try await WebSocketClient.open(
            port: harness.port, headers: [("Host", harness.host)] + (origin.map { [("Origin", $0)] } ?? []))
    }

    private func call(_ method: String, _ params: [JSON], id: JSON) -> [UInt8] {
        JSON.object([
            "jsonrpc": "2.0", "id": id, "method": .string(method),
            "params": .array([.string("token:\(DaemonHarness.secret)")] + params),
        ]).encoded()
    }

    @Test("calls over WebSocket, a message in fragments, a ping; notifications from start to complete, pause, stop")
    func callsAndNotifications() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness(maxConcurrent: 1)
            let session = try await open(harness)
            #expect(session.upgraded, "\(session.statusLine)")
            session.send(call("aria2.getGlobalStat", [], id: "stat"), fragments: 3)
            session.ping([1, 2, 3])
            try await eventually("the answer") { session.messages.contains { $0.object?["id"] == "stat" } }
            let held = server.url(path: "/bytes/w1", query: ["size": "100", "hold": "g"])
            session.send(call("aria2.addUri", [[.string(held.absoluteString)]], id: "add1"))
            try await eventually("added") { session.messages.contains { $0.object?["id"] == "add1" } }
            let first = try #require(session.messages.first { $0.object?["id"] == "add1" }?.object?["result"]?.string)
            let second = try #require(
                try await harness.call(
                    "aria2.addUri", [[.string(server.url(path: "/bytes/w2", query: ["size": "100"]).absoluteString)]]
                ).string)
            try await eventually("held") { server.heldCount(at: "g") == 1 }
            _ = try await harness.call("aria2.pause", [.string(second)])
            server.openGate("g")
            try await harness.waitFor(first, status: "complete")
            _ = try await harness.call("aria2.unpause", [.string(second)])
            try await harness.waitFor(second, status: "complete")
            let removable = try #require(
                try await harness.call(
                    "aria2.addUri",
                    [[.string(server.url(path: "/bytes/w3", query: ["size": "100", "hold": "h"]).absoluteString)]]
                ).string)
            try await eventually("held") { server.heldCount(at: "h") == 1 }
            _ = try await harness.call("aria2.remove", [.string(removable)])
            try await harness.waitFor(removable, status: "removed")
            func notes(_ gid: String) -> [String] {
                session.messages.compactMap { message -> String? in
                    guard let members = message.object, members["id"] == nil,
                        members["params"]?.array?.first?.object?["gid"]?.string == gid
                    else { return nil }
                    return members["method"]?.string
                }
            }
            try await eventually("every notification") { notes(removable).contains("aria2.onDownloadStop") }
            #expect(notes(first) == ["haul.onDownloadWaiting", "aria2.onDownloadStart", "aria2.onDownloadComplete"])
            // As aria2 does, a waiting download's pause is not announced (a running one's is).
            #expect(
                notes(second) == [
                    "haul.onDownloadWaiting", "haul.onDownloadWaiting",
                    "aria2.onDownloadStart",
                    "aria2.onDownloadComplete",
                ])
            #expect(notes(removable) == ["haul.onDownloadWaiting", "aria2.onDownloadStart", "aria2.onDownloadStop"])
            await harness.stop()
        }
    }

    @Test("pauseAll announces the pause of each running download, and of no waiting or paused one")
    func pauseAllNotifications() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let queue = daemonTestQueue(width: 2)
            let daemon = try Daemon(queue: queue, configuration: .init(root: root.url))
            let notes = recordedNotifications(of: daemon)
            func add(_ name: String, _ options: JSON = [:]) throws -> String {
                let url = server.url(path: "/bytes/\(name)", query: ["size": "100", "hold": "g"])
                return try #require(daemon.call("aria2.addUri", [[.string(url.absoluteString)], options]).string)
            }
            let running = try [add("a"), add("b")]
            _ = try [add("c"), add("d", ["pause": "true"])]
            try await eventually("both held") { server.heldCount(at: "g") == 2 }
            try await eventually("both started") {
                notes.withLock { $0.filter { $0.hasPrefix("aria2.onDownloadStart") }.count } == 2
            }
            notes.withLock { $0 = [] }
            #expect(try daemon.call("aria2.pauseAll", []) == "OK")
            #expect(notes.withLock { $0 }.sorted() == running.map { "aria2.onDownloadPause \($0)" }.sorted())
            daemon.close()
            queue.cancelAll()
            server.openGate("g")
            await queue.waitUntilIdle()
        }
    }

    @Test("a download being removed is not paused by pause or pauseAll, nor announced as paused, nor run again")
    func pauseWhileRemoving() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let queue = daemonTestQueue(width: 1)
            let daemon = try Daemon(queue: queue, configuration: .init(root: root.url))
            let notes = recordedNotifications(of: daemon)
            let url = server.url(path: "/bytes/a", query: ["size": "100", "hold": "g"])
            let gid = try #require(daemon.call("aria2.addUri", [[.string(url.absoluteString)]]).string)
            try await eventually("started") { notes.withLock { $0.contains("aria2.onDownloadStart \(gid)") } }
            try await eventually("held") { server.heldCount(at: "g") == 1 }
            #expect(try daemon.call("aria2.remove", [.string(gid)]) == .string(gid))
            // Its run is still ending (or has ended): as in aria2, it cannot be paused now.
            #expect(throws: RPCError.self) { try daemon.call("aria2.pause", [.string(gid)]) }
            #expect(try daemon.call("aria2.pauseAll", []) == "OK")
            func status() -> String? {
                (try? daemon.call("aria2.tellStatus", [.string(gid), ["status"]]))?.object?["status"]?.string
            }
            try await eventually("removed") { status() == "removed" }
            #expect(try daemon.call("aria2.unpauseAll", []) == "OK")
            server.openGate("g")
            await queue.waitUntilIdle()
            #expect(status() == "removed")
            #expect(!notes.withLock { $0 }.contains("aria2.onDownloadPause \(gid)"))
            #expect(server.stats.requests(toPath: "/bytes/a") == 1)
            #expect(!FileManager.default.fileExists(atPath: root.url.appendingPathComponent("a").path))
            daemon.close()
        }
    }

    @Test("a second addUri of a URL into the same file is a download of its own that fails at once with error 11")
    func sameFileTwice() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let queue = daemonTestQueue(width: 2)
            let daemon = try Daemon(queue: queue, configuration: .init(root: root.url))
            let notes = recordedNotifications(of: daemon)
            func status(_ gid: String) -> [String: JSON] {
                (try? daemon.call("aria2.tellStatus", [.string(gid), ["status", "errorCode"]]))?.object ?? [:]
            }
            let url = server.url(path: "/bytes/same", query: ["size": "100", "hold": "g"])
            let first = try #require(daemon.call("aria2.addUri", [[.string(url.absoluteString)]]).string)
            let second = try #require(daemon.call("aria2.addUri", [[.string(url.absoluteString)]]).string)
            #expect(first != second)
            // As aria2: the same file is being downloaded.
            #expect(status(second) == ["status": "error", "errorCode": "11"])
            #expect(notes.withLock { $0 }.contains("aria2.onDownloadError \(second)"))
            try await eventually("held") { server.heldCount(at: "g") == 1 }
            // The first is not held by the second's share of it: removed, it stops.
            #expect(try daemon.call("aria2.remove", [.string(first)]) == .string(first))
            try await eventually("the first removed") { status(first)["status"] == "removed" }
            server.openGate("g")
            await queue.waitUntilIdle()
            #expect(listedGIDs(try daemon.call("aria2.tellStopped", [0, 10, ["gid"]])) == [second, first])
            #expect(server.stats.requests(toPath: "/bytes/same") == 1)
            daemon.close()
        }
    }

    @Test("unpauseAll announces haul.onDownloadWaiting for each download it resumes, before the start of each")
    func unpauseAllNotifications() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let queue = daemonTestQueue(width: 1)
            let daemon = try Daemon(queue: queue, configuration: .init(root: root.url))
            let notes = recordedNotifications(of: daemon)
            let gids = try ["a", "b"].map { name in
                let url = server.url(path: "/bytes/\(name)", query: ["size": "100", "hold": "g"])
                return try #require(
                    daemon.call("aria2.addUri", [[.string(url.absoluteString)], ["pause": "true"]]).string)
            }
            #expect(notes.withLock { $0 }.isEmpty, "a download added paused does not wait")
            #expect(try daemon.call("aria2.unpauseAll", []) == "OK")
            try await eventually("the first started") {
                notes.withLock { $0.contains("aria2.onDownloadStart \(gids[0])") }
            }
            try await eventually("both announced waiting") {
                notes.withLock { $0.filter { $0.hasPrefix("haul.onDownloadWaiting") }.count } == 2
            }
            let heard = notes.withLock { $0 }
            #expect(
                Set(heard.filter { $0.hasPrefix("haul.onDownloadWaiting") })
                    == Set(gids.map { "haul.onDownloadWaiting \($0)" }))
            #expect(
                heard.firstIndex(of: "haul.onDownloadWaiting \(gids[0])")!
                    < heard.firstIndex(of: "aria2.onDownloadStart \(gids[0])")!)
            server.openGate("g")
            await queue.waitUntilIdle()
            daemon.close()
        }
    }

    @Test("an upgrade from another origin or to another host is refused; a wrong secret over WebSocket is refused late")
    func refusals() async throws {
        let harness = try await DaemonHarness()
        let foreign = try await open(harness, origin: "http://evil.example")
        #expect(!foreign.upgraded && foreign.statusLine.contains("403"), "[\(foreign.statusLine)]")
        let rebound = try await WebSocketClient.open(
            port: harness.port, headers: [("Host", "evil.example:\(harness.port)")])
        #expect(!rebound.upgraded && rebound.statusLine.contains("403"), "\(rebound.statusLine)")
        let session = try await open(harness)
        let started = ContinuousClock.now
        session.send(
            JSON.object(["jsonrpc": "2.0", "id": 1, "method": "aria2.getVersion", "params": ["token:bad"]]).encoded())
        try await eventually("answered") { !session.messages.isEmpty }
        #expect(ContinuousClock.now - started >= .milliseconds(300))
        #expect(session.messages.first?.object?["error"]?.object?["message"] == "Unauthorized")
        // A message over the size limit closes the session.
        let small = try await DaemonHarness(
            access: RPCAccess(maxRequestSize: 1024, unauthorizedDelay: .milliseconds(300)))
        let flooded = try await open(small)
        flooded.send([UInt8](repeating: 32, count: 600), fragments: 1)
        flooded.send([UInt8](repeating: 32, count: 2000), fragments: 4)
        try await eventually("closed") { flooded.isClosed }
        await small.stop()
        await harness.stop()
    }
}
