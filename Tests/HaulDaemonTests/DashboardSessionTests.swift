import Foundation
import HaulDaemon
import HaulTestSupport
import Testing

/// The dashboard's files and its sign-in, over raw sockets: what a browser is sent and what a hostile client can and
/// cannot do with a session.
@Suite("Dashboard sessions", .timeLimit(.minutes(2)))
struct DashboardSessionTests {
    /// Signs in with `secret`: the answer, and the cookie (`name=value`) and CSRF token it gave.
    private func signIn(_ harness: DaemonHarness, secret: String = DaemonHarness.secret) async throws -> (
        answer: HTTPAnswer, cookie: String?, csrf: String?
    ) {
        let answer = try await RawHTTP.send(
            port: harness.port, path: "/session",
            headers: [("Host", harness.host), ("Content-Type", "application/json")],
            body: JSON.object(["secret": .string(secret)]).encoded())
        let cookie = answer.header("set-cookie")?.split(separator: ";").first.map(String.init)
        return (answer, cookie, answer.json?.object?["csrf"]?.string)
    }

    private func rpc(
        _ harness: DaemonHarness, _ method: String, headers: [(String, String)], params: [JSON] = []
    ) async throws -> JSON? {
        try await harness.post(
            ["jsonrpc": "2.0", "id": 1, "method": .string(method), "params": .array(params)], headers: headers
        ).json
    }

    @Test("the page, its script and style are served from the binary with a strict content policy")
    func files() async throws {
        let harness = try await DaemonHarness()
        defer { Task { await harness.stop() } }
        for (path, type, marker) in [
            ("/", "text/html", "<script type=\"module\" src=\"/app.js\">"),
            ("/app.js", "text/javascript", "haul.subscribe"),
            ("/fleet.js", "text/javascript", "haul.fleetDownloads"),
            ("/app.css", "text/css", "prefers-color-scheme: dark"),
        ] {
            let answer = try await RawHTTP.send(
                port: harness.port, method: "GET", path: path, headers: [("Host", harness.host)])
            #expect(answer.status == 200, "\(path)")
            #expect(answer.header("content-type")?.hasPrefix(type) == true, "\(path)")
            #expect(answer.text.contains(marker), "\(path)")
            let policy = try #require(answer.header("content-security-policy"))
            #expect(policy.contains("script-src 'self'") && policy.contains("frame-ancestors 'none'"))
            #expect(!policy.contains("unsafe-inline"))
            #expect(answer.header("x-content-type-options") == "nosniff")
        }
        // Another name for the daemon (DNS rebinding) gets no page.
        let rebound = try await RawHTTP.send(
            port: harness.port, method: "GET", path: "/", headers: [("Host", "evil.example:80")])
        #expect(rebound.status == 403)
        let missing = try await RawHTTP.send(
            port: harness.port, method: "GET", path: "/nothing", headers: [("Host", harness.host)])
        #expect(missing.status == 404)
    }

    @Test("signing in gives an HttpOnly SameSite=Strict cookie and a CSRF token; a wrong secret none, and late")
    func signIn() async throws {
        let harness = try await DaemonHarness()
        defer { Task { await harness.stop() } }
        let before = ContinuousClock.now
        let wrong = try await signIn(harness, secret: "not-the-secret")
        #expect(ContinuousClock.now - before >= .milliseconds(300))
        #expect(wrong.answer.json?.object?["signedIn"] == false)
        #expect(wrong.answer.json?.object?["error"] == "wrong secret")
        #expect(wrong.cookie == nil && wrong.csrf == nil)

        let right = try await signIn(harness)
        let setCookie = try #require(right.answer.header("set-cookie"))
        #expect(setCookie.contains("HttpOnly") && setCookie.contains("SameSite=Strict") && setCookie.contains("Path=/"))
        #expect(!setCookie.contains("Secure"), "no TLS here: a Secure cookie would never come back")
        #expect(right.answer.header("cache-control") == "no-store")
        let cookie = try #require(right.cookie)
        let csrf = try #require(right.csrf)
        #expect(!right.answer.text.contains(DaemonHarness.secret))
        #expect(!setCookie.contains(DaemonHarness.secret) && !csrf.contains(DaemonHarness.secret))

        // The page asks whether it is still signed in with the token it kept; the cookie alone (which goes to every
        // port of the host, to another program's pages too) is not signed in, and gets no token.
        let state = try await RawHTTP.send(
            port: harness.port, method: "GET", path: "/session",
            headers: [("Host", harness.host), ("Cookie", cookie), ("X-Haul-CSRF", csrf)])
        #expect(state.json?.object?["signedIn"] == true && state.json?.object?["csrf"] == nil)
        let cookieOnly = try await RawHTTP.send(
            port: harness.port, method: "GET", path: "/session", headers: [("Host", harness.host), ("Cookie", cookie)])
        #expect(cookieOnly.json?.object?["signedIn"] == false && cookieOnly.json?.object?["csrf"] == nil)
        #expect(!cookieOnly.text.contains(csrf))
        let stranger = try await RawHTTP.send(
            port: harness.port, method: "GET", path: "/session",
            headers: [("Host", harness.host), ("Cookie", "haul_session_\(harness.port)=0123")])
        #expect(stranger.json?.object?["signedIn"] == false && stranger.json?.object?["csrf"] == nil)
        // Malformed sign-ins are told what to send.
        let garbage = try await RawHTTP.send(
            port: harness.port, path: "/session", headers: [("Host", harness.host)], body: Array("secret=x".utf8))
        #expect(garbage.status == 400)
    }

    @Test("with --rpc-no-secret the page is signed in at once and its calls need nothing")
    func noSecret() async throws {
        let harness = try await DaemonHarness(secret: nil)
        defer { Task { await harness.stop() } }
        let state = try await RawHTTP.send(
            port: harness.port, method: "GET", path: "/session", headers: [("Host", harness.host)])
        #expect(state.json?.object?["signedIn"] == true && state.json?.object?["secretNeeded"] == false)
        let answer = try await rpc(harness, "aria2.getGlobalStat", headers: [("X-Haul-CSRF", "")])
        #expect(answer?.object?["result"] != nil)
        // Still only from the daemon's own pages.
        let foreign = try await harness.post(
            ["jsonrpc": "2.0", "id": 1, "method": "aria2.getGlobalStat", "params": []],
            headers: [("Origin", "http://127.0.0.1:1")])
        #expect(foreign.status == 403)
    }

    @Test("a call with the cookie and the CSRF token needs no secret; the cookie alone, the token alone do not")
    func callsOfASession() async throws {
        let harness = try await DaemonHarness()
        defer { Task { await harness.stop() } }
        let (_, cookie, csrf) = try await signIn(harness)
        let session = try #require(cookie)
        let token = try #require(csrf)
        let both = try await rpc(
            harness, "aria2.getGlobalStat", headers: [("Cookie", session), ("X-Haul-CSRF", token)])
        #expect(both?.object?["result"]?.object?["numActive"] == "0")
        // A token: given by an old client, it is taken off and not needed.
        let tokened = try await rpc(
            harness, "aria2.getGlobalStat", headers: [("Cookie", session), ("X-Haul-CSRF", token)],
            params: ["token:whatever"])
        #expect(tokened?.object?["result"] != nil)
        for headers in [
            [("Cookie", session)], [("X-Haul-CSRF", token)], [("Cookie", session), ("X-Haul-CSRF", token + "0")],
            [("Cookie", "haul_session_\(harness.port)=\(token)"), ("X-Haul-CSRF", token)],
        ] {
            let refused = try await rpc(harness, "aria2.getGlobalStat", headers: headers)
            #expect(refused?.object?["error"]?.object?["message"] == "Unauthorized", "\(headers)")
        }
        // From another origin, even with both, nothing is answered.
        let foreign = try await harness.post(
            ["jsonrpc": "2.0", "id": 1, "method": "aria2.getGlobalStat", "params": []],
            headers: [("Cookie", session), ("X-Haul-CSRF", token), ("Origin", "http://127.0.0.1:1")])
        #expect(foreign.status == 403)

        // Signing out needs the token, and ends the session.
        let noToken = try await RawHTTP.send(
            port: harness.port, method: "DELETE", path: "/session",
            headers: [("Host", harness.host), ("Cookie", session)])
        #expect(noToken.status == 403)
        let out = try await RawHTTP.send(
            port: harness.port, method: "DELETE", path: "/session",
            headers: [("Host", harness.host), ("Cookie", session), ("X-Haul-CSRF", token)])
        #expect(out.status == 200)
        #expect(out.header("set-cookie")?.contains("Max-Age=0") == true)
        let after = try await rpc(
            harness, "aria2.getGlobalStat", headers: [("Cookie", session), ("X-Haul-CSRF", token)])
        #expect(after?.object?["error"]?.object?["message"] == "Unauthorized")
    }

    @Test("a WebSocket opened with the cookie and the token in its URL calls without a secret; without the token not")
    func webSocketOfASession() async throws {
        let harness = try await DaemonHarness()
        defer { Task { await harness.stop() } }
        let (_, cookie, csrf) = try await signIn(harness)
        let session = try #require(cookie)
        let token = try #require(csrf)
        let call = JSON.object(["jsonrpc": "2.0", "id": "s", "method": "aria2.getGlobalStat", "params": []]).encoded()

        let signedIn = try await WebSocketClient.open(
            port: harness.port, path: "/jsonrpc?csrf=\(token)",
            headers: [("Host", harness.host), ("Origin", "http://\(harness.host)"), ("Cookie", session)])
        #expect(signedIn.upgraded)
        signedIn.send(call)
        try await eventually("answered") { !signedIn.messages.isEmpty }
        #expect(signedIn.messages.first?.object?["result"]?.object?["numActive"] == "0")

        for (path, headers) in [
            ("/jsonrpc", [("Cookie", session)]), ("/jsonrpc?csrf=\(token)", []),
            ("/jsonrpc?csrf=\(token)x", [("Cookie", session)]),
        ] {
            let client = try await WebSocketClient.open(
                port: harness.port, path: path, headers: [("Host", harness.host)] + headers)
            #expect(client.upgraded)
            client.send(call)
            try await eventually("answered") { !client.messages.isEmpty }
            #expect(client.messages.first?.object?["error"]?.object?["message"] == "Unauthorized", "\(path)")
        }
        // Signed out, the session's open WebSocket is no longer signed in either.
        let out = try await RawHTTP.send(
            port: harness.port, method: "DELETE", path: "/session",
            headers: [("Host", harness.host), ("Cookie", session), ("X-Haul-CSRF", token)])
        #expect(out.status == 200)
        signedIn.send(call)
        try await eventually("answered again") { signedIn.messages.count == 2 }
        #expect(signedIn.messages.last?.object?["error"]?.object?["message"] == "Unauthorized")
        // Another origin's page, cookie and token and all, is not upgraded.
        let foreign = try await WebSocketClient.open(
            port: harness.port, path: "/jsonrpc?csrf=\(token)",
            headers: [("Host", harness.host), ("Origin", "http://127.0.0.1:1"), ("Cookie", session)])
        #expect(!foreign.upgraded)
    }
}
