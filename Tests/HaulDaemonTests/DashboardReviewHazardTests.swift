import Foundation
import HaulDaemon
import HaulTestSupport
import Testing

/// The dashboard's sessions under a hostile second look: a session, once ended, gets nothing more.
@Suite("Dashboard review hazards", .timeLimit(.minutes(2)))
struct DashboardReviewHazardTests {
    private func signIn(_ harness: DaemonHarness) async throws -> (cookie: String, csrf: String) {
        let answer = try await RawHTTP.send(
            port: harness.port, path: "/session",
            headers: [("Host", harness.host), ("Content-Type", "application/json")],
            body: JSON.object(["secret": .string(DaemonHarness.secret)]).encoded())
        let cookie = try #require(answer.header("set-cookie")?.split(separator: ";").first.map(String.init))
        let csrf = try #require(answer.json?.object?["csrf"]?.string)
        return (cookie, csrf)
    }

    /// Waits until `condition` holds or `limit` passes; whether it held.
    private func within(_ limit: Duration, _ condition: () -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + limit
        while !condition() {
            if ContinuousClock.now > deadline { return false }
            try await Task.sleep(for: .milliseconds(10))
        }
        return true
    }

    @Test("signing out ends what a session's open WebSocket is pushed: no haul.onChange with downloads after it")
    func signOutEndsPushes() async throws {
        let harness = try await DaemonHarness()
        defer { Task { await harness.stop() } }
        let (cookie, csrf) = try await signIn(harness)
        let socket = try await WebSocketClient.open(
            port: harness.port, path: "/jsonrpc?csrf=\(csrf)",
            headers: [("Host", harness.host), ("Origin", "http://\(harness.host)"), ("Cookie", cookie)])
        #expect(socket.upgraded)
        // Subscribed as the page does, with no secret: the session vouches for it.
        socket.send(
            JSON.object([
                "jsonrpc": "2.0", "id": "subscribe", "method": "haul.subscribe",
                "params": [["interval": "100", "keys": ["gid", "status", "files", "errorMessage"]]],
            ]).encoded())
        try await eventually("subscribed") { socket.messages.contains { $0.object?["id"] == "subscribe" } }
        #expect(socket.messages.first { $0.object?["id"] == "subscribe" }?.object?["result"] == "OK")

        // The user signs out (in this tab or another): the session is over.
        let out = try await RawHTTP.send(
            port: harness.port, method: "DELETE", path: "/session",
            headers: [("Host", harness.host), ("Cookie", cookie), ("X-Haul-CSRF", csrf)])
        #expect(out.status == 200)

        // A download added afterwards (by another client, with the secret) names a private URL.
        let secretURL = "http://127.0.0.1:9/private/payroll-2026.csv?key=abc"
        let gid = try #require(
            try await harness.call("aria2.addUri", [[.string(secretURL)], ["pause": "true"]]).string)

        func pushedAfterSignOut() -> Bool {
            socket.messages.contains { message in
                guard message.object?["method"] == "haul.onChange" else { return false }
                return message.object?["params"]?.array?.first?.object?["changed"]?.array?.contains {
                    $0.object?["gid"]?.string == gid
                } ?? false
            }
        }
        // The session's socket is closed at its next push, as its sign-in has ended.
        #expect(try await within(.seconds(10)) { socket.isClosed || pushedAfterSignOut() })
        #expect(socket.isClosed)
        #expect(
            !pushedAfterSignOut(),
            "a WebSocket of a signed-out session was still pushed the new download \(gid) (\(secretURL))")
    }
}

/// Two daemons on one machine (a local `haul daemon` and a `haul daemon --db` control plane, say), both dashboards
/// open in one browser.
@Suite("Dashboard review hazards in a browser", .serialized, .timeLimit(.minutes(3)))
struct DashboardReviewHazardBrowserTests {
    @Test("signing in to a second daemon's dashboard on the same host does not sign the first one out")
    func twoDaemonsOneBrowser() async throws {
        let first = try await DaemonHarness()
        let second = try await DaemonHarness()
        let browser = try await Browser.start(.chromium)
        do {
            try await browser.open("http://\(first.host)/")
            try await browser.waitUntil("the first sign-in form", "return !document.getElementById('signin').hidden")
            try await browser.signIn()
            try await browser.open("http://\(second.host)/")
            try await browser.waitUntil("the second sign-in form", "return !document.getElementById('signin').hidden")
            try await browser.signIn()
            // Back to the first daemon's dashboard, signed in there a moment ago and never signed out.
            try await browser.open("http://\(first.host)/")
            try await browser.waitUntil(
                "the first dashboard decided",
                "return !document.getElementById('app').hidden || !document.getElementById('signin').hidden")
            let signedIn = try await browser.run("return !document.getElementById('app').hidden") as? Bool
            #expect(
                signedIn == true,
                "the first daemon's dashboard asks to sign in again: the second daemon's haul_session cookie (Path=/, no port) replaced the first one's"
            )
        } catch {
            await browser.close()
            await first.stop()
            await second.stop()
            throw error
        }
        await browser.close()
        await first.stop()
        await second.stop()
    }
}
