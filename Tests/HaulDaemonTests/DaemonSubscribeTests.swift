import Foundation
import Haul
@testable import HaulDaemon
import HaulTestServer
import HaulTestSupport
import Testing

/// `haul.subscribe`: what changed is pushed over the WebSocket, at most every interval, and only when something did.
@Suite("haul daemon: haul.subscribe", .timeLimit(.minutes(2)))
struct DaemonSubscribeTests {
    private func call(_ method: String, _ params: [JSON], id: JSON) -> [UInt8] {
        JSON.object([
            "jsonrpc": "2.0", "id": id, "method": .string(method),
            "params": .array([.string("token:\(DaemonHarness.secret)")] + params),
        ]).encoded()
    }

    /// The `haul.onChange` pushes the session got, in order.
    private func pushes(_ session: WebSocketClient) -> [[String: JSON]] {
        session.messages.compactMap { message in
            guard message.object?["method"] == "haul.onChange" else { return nil }
            return message.object?["params"]?.array?.first?.object
        }
    }

    /// The statuses `gid` was pushed with, in order.
    private func statuses(of gid: String, in pushes: [[String: JSON]]) -> [String] {
        pushes.flatMap { push in
            (push["changed"]?.array ?? []).compactMap { object in
                object.object?["gid"]?.string == gid ? object.object?["status"]?.string : nil
            }
        }
    }

    @Test("a download's changes are pushed from waiting to complete, its removal too; nothing when nothing changes")
    func changesPushed() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness(maxConcurrent: 1)
            let session = try await WebSocketClient.open(port: harness.port, headers: [("Host", harness.host)])
            session.send(
                call("haul.subscribe", [["interval": "100", "keys": ["gid", "status", "completedLength"]]], id: "s"))
            try await eventually("subscribed") { session.messages.contains { $0.object?["id"] == "s" } }
            #expect(session.messages.first { $0.object?["id"] == "s" }?.object?["result"] == "OK")

            let held = server.url(path: "/bytes/s1", query: ["size": "3000", "hold": "g"])
            let gid = try #require(try await harness.call("aria2.addUri", [[.string(held.absoluteString)]]).string)
            try await eventually("pushed as active") { statuses(of: gid, in: pushes(session)).contains("active") }
            server.openGate("g")
            try await eventually("pushed as complete") { statuses(of: gid, in: pushes(session)).last == "complete" }
            let done = try #require(
                pushes(session).flatMap { $0["changed"]?.array ?? [] }.last { $0.object?["gid"]?.string == gid })
            #expect(done.object?["completedLength"] == "3000" && done.object?["totalLength"] == nil)
            let stat = try #require(pushes(session).last?["stat"]?.object)
            #expect(stat["numStopped"] == "1")

            // Quiet: several intervals pass without a push.
            let quiet = pushes(session).count
            try await Task.sleep(for: .milliseconds(600))
            #expect(pushes(session).count == quiet)

            _ = try await harness.call("aria2.removeDownloadResult", [.string(gid)])
            try await eventually("pushed as removed") {
                pushes(session).contains { $0["removed"] == [.string(gid)] }
            }

            // A change of order is said; after unsubscribing, nothing more comes.
            let parked = try #require(
                try await harness.call(
                    "aria2.addUri",
                    [[.string(server.url(path: "/bytes/p1", query: ["size": "10"]).absoluteString)], ["pause": "true"]]
                ).string)
            _ = try await harness.call(
                "aria2.addUri",
                [[.string(server.url(path: "/bytes/p2", query: ["size": "10"]).absoluteString)], ["pause": "true"]])
            _ = try await harness.call("aria2.changePosition", [.string(parked), 0, "POS_END"])
            try await eventually("order changed") { pushes(session).contains { $0["orderChanged"] == true } }
            session.send(call("haul.unsubscribe", [], id: "u"))
            try await eventually("unsubscribed") { session.messages.contains { $0.object?["id"] == "u" } }
            let last = pushes(session).count
            _ = try await harness.call("aria2.unpause", [.string(parked)])
            try await Task.sleep(for: .milliseconds(500))
            #expect(pushes(session).count == last)
            await harness.stop()
        }
    }

    @Test("more changes than a push describes: 'resync'; over HTTP or with a bad interval: an error")
    func resyncAndRefusals() async throws {
        let harness = try await DaemonHarness()
        // Its host paused: the 1,001 wait, none runs or ends.
        _ = try await harness.call("haul.pauseHost", ["http://127.0.0.1:9/"])
        let calls: [JSON] = (0..<1001).map { index in
            [
                "methodName": "aria2.addUri",
                "params": [.string("token:\(DaemonHarness.secret)"), [.string("http://127.0.0.1:9/r\(index)")]],
            ]
        }
        _ = try await harness.call("system.multicall", [.array(calls)], token: nil)
        let session = try await WebSocketClient.open(port: harness.port, headers: [("Host", harness.host)])
        session.send(call("haul.subscribe", [["interval": 100]], id: "s"))
        try await eventually("subscribed") { session.messages.contains { $0.object?["id"] == "s" } }
        // All 1,001 change in one step.
        _ = try await harness.call("aria2.pauseAll")
        try await eventually("resync") { pushes(session).contains { $0["resync"] == true } }
        let resync = try #require(pushes(session).first { $0["resync"] == true })
        #expect(resync["changed"] == [] && resync["stat"]?.object?["numWaiting"] == "1001")

        await #expect(throws: CallError.self) { try await harness.call("haul.subscribe") }
        for interval: JSON in ["50", "60001", "soon"] {
            session.send(call("haul.subscribe", [["interval": interval]], id: "bad"))
        }
        session.send(call("haul.subscribe", [["every": "100"]], id: "unknown"))
        try await eventually("refused") {
            session.messages.filter { $0.object?["id"] == "bad" || $0.object?["id"] == "unknown" }.count == 4
        }
        #expect(
            session.messages.filter { $0.object?["id"] == "bad" }.allSatisfy {
                $0.object?["error"]?.object?["message"]?.string?.contains("interval") == true
            })
        await harness.stop()
    }

    @Test("purgeDownloadResult of a history partly only in the store tells a subscription to read its lists again")
    func purgeOfStoredHistory() async throws {
        let root = try TemporaryDirectory()
        try FileManager.default.createDirectory(at: root.file(".haul"), withIntermediateDirectories: true)
        let path = root.file(".haul/daemon.sqlite").path
        // More stopped downloads than memory keeps: a daemon started on the store has the older ones there only.
        let seeded = (0..<(Daemon.stoppedInMemory + 100)).map { _ in GID.random() }
        try DaemonStore(path: path).save(
            seeded.enumerated().map { index, gid in
                DaemonStore.Row(
                    gid: gid, uris: ["http://127.0.0.1:9/f\(index)"], options: [:], state: "error", rank: index,
                    errorCode: 1, errorMessage: "refused", stoppedOrder: index)
            })
        let queue = daemonTestQueue(width: 1)
        let daemon = try Daemon(queue: queue, configuration: .init(root: root.url, store: try DaemonStore(path: path)))
        // Subscribed as haul.subscribe subscribes; its session's timer asks changes(for:) as here.
        let subscription = Daemon.Subscription(keys: ["gid"])
        daemon.state.withLock { state in
            state.logsChanges = true
            subscription.seen.withLock { $0.logIndex = state.changeLogStart + state.changeLog.count }
        }
        #expect(try daemon.call("aria2.purgeDownloadResult", []) == "OK")
        #expect(try daemon.call("aria2.tellStopped", [0, 2000, ["gid"]]) == [])
        let push = try #require(daemon.changes(for: subscription)?.object?["params"]?.array?.first?.object)
        #expect(push["resync"] == .bool(true))
        daemon.close()
    }
}
