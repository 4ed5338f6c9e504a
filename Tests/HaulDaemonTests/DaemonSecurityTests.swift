import Foundation
import Haul
import HaulDaemon
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Everything reachable over the daemon's socket is hostile until it has shown the secret, from a name that is the
/// daemon's, and from an origin allowed to call it; and what it names on disk stays in the download root.
@Suite("Daemon security", .timeLimit(.minutes(2)))
struct DaemonSecurityTests {
    @Test("a wrong or missing secret: 'Unauthorized', answered only after the delay; nothing is done")
    func wrongSecret() async throws {
        let harness = try await DaemonHarness()
        for token in ["nope", "", "test-secret-012", "test-secret-01234"] as [String?] + [nil] {
            let started = ContinuousClock.now
            let error = await #expect(throws: CallError.self) {
                try await harness.call("aria2.addUri", [["http://127.0.0.1:1/x"]], token: token)
            }
            #expect(error?.message == "Unauthorized" && error?.code == 1)
            #expect(ContinuousClock.now - started >= .milliseconds(300), "answered before the delay")
        }
        #expect(harness.queue.statuses().isEmpty)
        await harness.stop()
    }

    @Test("a Host that is not the daemon's (DNS rebinding) is refused before the secret is looked at")
    func wrongHost() async throws {
        let harness = try await DaemonHarness()
        let call: JSON = [
            "jsonrpc": "2.0", "id": 1, "method": "aria2.getVersion",
            "params": [.string("token:\(DaemonHarness.secret)")],
        ]
        for host in [
            "evil.example:\(harness.port)", "127.0.0.1:1", "127.0.0.1", "localhost.evil.example:\(harness.port)",
        ] {
            let answer = try await RawHTTP.send(port: harness.port, headers: [("Host", host)], body: call.encoded())
            #expect(answer.status == 403, "\(host)")
            #expect(answer.json == nil)
        }
        let missing = try await RawHTTP.send(port: harness.port, headers: [], body: call.encoded())
        #expect(missing.status == 403)
        for host in ["localhost:\(harness.port)", "127.0.0.1:\(harness.port)", "LOCALHOST:\(harness.port)"] {
            let answer = try await RawHTTP.send(port: harness.port, headers: [("Host", host)], body: call.encoded())
            #expect(answer.status == 200 && answer.json?.object?["result"] != nil, "\(host)")
        }
        await harness.stop()
    }

    @Test("a name given as an allowed host is answered, with its port; others are still refused")
    func allowedHosts() async throws {
        let harness = try await DaemonHarness(
            access: RPCAccess(allowedHosts: ["NAS.example"], unauthorizedDelay: .milliseconds(300)))
        let call: JSON = [
            "jsonrpc": "2.0", "id": 1, "method": "aria2.getVersion",
            "params": [.string("token:\(DaemonHarness.secret)")],
        ]
        for (host, status) in [
            ("nas.example:\(harness.port)", 200), ("NAS.EXAMPLE:\(harness.port)", 200), ("nas.example", 403),
            ("nas.example:1", 403), ("other.example:\(harness.port)", 403),
        ] {
            let answer = try await RawHTTP.send(port: harness.port, headers: [("Host", host)], body: call.encoded())
            #expect(answer.status == status, "\(host)")
        }
        // The allowed name's page is the daemon's own origin.
        let page = try await RawHTTP.send(
            port: harness.port,
            headers: [("Host", "nas.example:\(harness.port)"), ("Origin", "http://nas.example:\(harness.port)")],
            body: call.encoded())
        #expect(page.status == 200 && page.json?.object?["result"] != nil)
        await harness.stop()
    }

    @Test("another origin's page is refused, its preflight too; an allowed origin gets CORS headers")
    func origins() async throws {
        let harness = try await DaemonHarness(
            access: RPCAccess(allowedOrigins: ["http://127.0.0.1:8080"], unauthorizedDelay: .milliseconds(300)))
        let call: JSON = [
            "jsonrpc": "2.0", "id": 1, "method": "aria2.getVersion",
            "params": [.string("token:\(DaemonHarness.secret)")],
        ]
        let foreign = try await harness.post(call, headers: [("Origin", "http://evil.example")])
        #expect(foreign.status == 403 && foreign.header("access-control-allow-origin") == nil)
        let preflight = try await RawHTTP.send(
            port: harness.port, method: "OPTIONS",
            headers: [
                ("Host", harness.host), ("Origin", "http://evil.example"), ("Access-Control-Request-Method", "POST"),
            ])
        #expect(preflight.status == 403 && preflight.header("access-control-allow-origin") == nil)
        let allowed = try await harness.post(call, headers: [("Origin", "http://127.0.0.1:8080")])
        #expect(allowed.status == 200 && allowed.header("access-control-allow-origin") == "http://127.0.0.1:8080")
        let allowedPreflight = try await RawHTTP.send(
            port: harness.port, method: "OPTIONS",
            headers: [
                ("Host", harness.host), ("Origin", "http://127.0.0.1:8080"), ("Access-Control-Request-Method", "POST"),
                ("Access-Control-Request-Headers", "content-type"),
            ])
        #expect(allowedPreflight.status == 200)
        #expect(allowedPreflight.header("access-control-allow-headers") == "content-type")
        // The daemon's own origin (its dashboard) is allowed without being listed.
        let own = try await harness.post(call, headers: [("Origin", "http://127.0.0.1:\(harness.port)")])
        #expect(own.status == 200)
        await harness.stop()
    }

    @Test("garbage and the wrong shape: parse error, 404, 405, 413; the daemon keeps answering")
    func garbage() async throws {
        let harness = try await DaemonHarness(
            access: RPCAccess(maxRequestSize: 4096, unauthorizedDelay: .milliseconds(300)))
        let bad = try await RawHTTP.send(
            port: harness.port, headers: [("Host", harness.host)], body: Array("{\"id\":".utf8))
        #expect(bad.status == 200 && bad.json?.object?["error"]?.object?["code"] == .int(-32700))
        let other = try await RawHTTP.send(port: harness.port, path: "/rpc", headers: [("Host", harness.host)])
        #expect(other.status == 404)
        let get = try await RawHTTP.send(port: harness.port, method: "GET", headers: [("Host", harness.host)])
        #expect(get.status == 405)
        let large = try await RawHTTP.send(
            port: harness.port, headers: [("Host", harness.host)], body: [UInt8](repeating: 32, count: 10_000))
        #expect(large.status == 413)
        #expect(try await harness.call("aria2.getGlobalStat").object != nil)
        await harness.stop()
    }

    @Test("dir and out stay in the root: '..', absolute paths outside, dot-names and a symbolic link out are refused")
    func confinement() async throws {
        let harness = try await DaemonHarness()
        let outside = try TemporaryDirectory()
        try FileManager.default.createSymbolicLink(
            atPath: harness.root.file("link").path, withDestinationPath: outside.path)
        let refused: [JSON] = [
            ["dir": "../x"], ["dir": "a/../../x"], ["dir": "/etc"], ["dir": .string(outside.path)], ["dir": ".ssh"],
            ["dir": "a/.git/hooks"], ["out": "../x"], ["out": ".bashrc"], ["out": "a/b"], ["dir": "link"],
            ["dir": "link/sub"], ["dir": .string(harness.daemon.rootPath + "/link/sub")],
            ["dir": .string(harness.daemon.rootPath + "/a/../../x")], ["out": ".."],
        ]
        for options in refused {
            await #expect(throws: CallError.self, "\(options)") {
                try await harness.call("aria2.addUri", [["http://127.0.0.1:1/file"], options])
            }
        }
        #expect(outside.contents().isEmpty && harness.queue.statuses().isEmpty)
        #expect(!FileManager.default.fileExists(atPath: harness.root.file("a").path))
        // Inside it: a relative dir, and the root given absolutely.
        let gid = try await harness.call(
            "aria2.addUri", [["http://127.0.0.1:1/file"], ["dir": "sub/deeper", "out": "name.bin", "pause": "true"]])
        let status = try await harness.call("aria2.tellStatus", [gid, ["dir", "status"]])
        #expect(status == ["dir": .string(harness.daemon.rootPath + "/sub/deeper"), "status": "paused"])
        _ = try await harness.call(
            "aria2.addUri", [["http://127.0.0.1:1/file"], ["dir": .string(harness.root.path), "pause": "true"]])
        await harness.stop()
    }

    @Test("secrets in options never come back: passwords, secret headers (Authorization, X-Api-Key...), user info")
    func secretsNotAnswered() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness()
            var url = URLComponents(
                url: server.url(path: "/bytes/s", query: ["size": "10", "hold": "g"]), resolvingAgainstBaseURL: false)!
            url.user = "alice"
            url.password = "url-password"
            let gid = try await harness.call(
                "aria2.addUri",
                [
                    [.string(url.url!.absoluteString)],
                    [
                        "http-user": "bob", "http-passwd": "option-password",
                        "header": [
                            "Authorization: Bearer tok-123", "Cookie: c=cookie-value", "X-Plain: shown",
                            "X-Api-Key: api-key-456",
                        ],
                    ],
                ])
            try await eventually("held") { server.heldCount(at: "g") == 1 }
            var everything = ""
            for method in ["aria2.tellStatus", "aria2.getOption", "aria2.getUris", "aria2.getFiles"] {
                everything += "\(try await harness.call(method, [gid]))"
            }
            everything += "\(try await harness.call("aria2.tellActive"))"
            for secret in ["url-password", "option-password", "tok-123", "cookie-value", "api-key-456"] {
                #expect(!everything.contains(secret), "\(secret) in an answer")
            }
            #expect(everything.contains("X-Plain: shown"))
            server.openGate("g")
            try await harness.waitFor(gid.string ?? "", status: "complete")
            let request = try #require(server.stats.requests.first)
            #expect(request.authorization == "Bearer tok-123")
            await harness.stop()
        }
    }

    @Test("options: an unknown name is an error naming it; a feature Haul lacks is accepted and reported; bad values")
    func options() async throws {
        let harness = try await DaemonHarness()
        let unknown = await #expect(throws: CallError.self) {
            try await harness.call("aria2.addUri", [["http://127.0.0.1:1/f"], ["max-downlod-limit": "1K"]])
        }
        #expect(unknown?.message == "No such option: max-downlod-limit")
        for bad: JSON in [
            ["split": "0"], ["checksum": "md5=abc"], ["allow-overwrite": "yes"], ["gid": "xyz"],
            ["http-user": "only"], ["max-download-limit": "fast"], ["header": "no colon"],
        ] {
            await #expect(throws: CallError.self, "\(bad)") {
                try await harness.call("aria2.addUri", [["http://127.0.0.1:1/f"], bad])
            }
        }
        await #expect(throws: CallError.self) { try await harness.call("aria2.addUri", [["ftp://127.0.0.1/f"]]) }
        await #expect(throws: CallError.self) { try await harness.call("aria2.addUri", [[]]) }
        let gid = try await harness.call(
            "aria2.addUri",
            [["http://127.0.0.1:1/f"], ["bt-max-peers": "10", "pause": "true", "gid": "00000000000000aa"]])
        #expect(gid == "00000000000000aa")
        #expect(try await harness.call("aria2.getOption", [gid]).object?["bt-max-peers"] == "10")
        let duplicate = await #expect(throws: CallError.self) {
            try await harness.call("aria2.addUri", [["http://127.0.0.1:1/f"], ["gid": "00000000000000aa"]])
        }
        #expect(duplicate?.message.contains("not unique") == true)
        await harness.stop()
    }
}
