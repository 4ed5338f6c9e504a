import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `haul daemon` as a user runs it: its secret, its answers over the socket, and its downloads through SIGTERM and
/// SIGKILL.
@Suite("haul daemon", .timeLimit(.minutes(3)))
struct DaemonCommandTests {
    /// A running `haul daemon` and what is needed to call it.
    struct Running {
        let process: HaulProcess
        let port: Int
        let secret: String?

        /// Calls `method`; the answer's members.
        func call(_ method: String, _ params: [Any] = []) async throws -> [String: Any] {
            let all: [Any] = (secret.map { ["token:\($0)"] } ?? []) + params
            let body = try JSONSerialization.data(
                withJSONObject: ["jsonrpc": "2.0", "id": "c", "method": method, "params": all])
            let answer = try await RawHTTP.send(
                port: port, headers: [("Host", "127.0.0.1:\(port)")], body: [UInt8](body))
            return try #require(
                try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any], "\(answer.text)")
        }

        func result(_ method: String, _ params: [Any] = []) async throws -> Any {
            let answer = try await call(method, params)
            return try #require(answer["result"], "\(answer)")
        }

        /// The GIDs of the unfinished downloads: `tellActive`'s, then `tellWaiting(0, 1000)`'s.
        func unfinished() async throws -> [String] {
            let active = try await result("aria2.tellActive", [["gid"]]) as? [[String: Any]] ?? []
            let waiting = try await result("aria2.tellWaiting", [0, 1000, ["gid"]]) as? [[String: Any]] ?? []
            return (active + waiting).compactMap { $0["gid"] as? String }
        }
    }

    /// Starts `haul daemon -d DIR` on a free port and waits for it to serve.
    static func start(_ dir: TemporaryDirectory, _ extra: [String] = [], environment: [String: String] = [:])
        async throws
        -> Running
    {
        let process = try HaulProcess(
            ["daemon", "-d", dir.path, "--rpc-listen", "127.0.0.1:0", "-j", "1"] + extra, environment: environment)
        let port = try await process.daemonRPCPort()
        let secret = try? String(contentsOf: dir.file(".haul/rpc-secret"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        return Running(process: process, port: try #require(port, "\(process.stderrSoFar)"), secret: secret)
    }

    @Test("the secret: made once into DIR/.haul/rpc-secret (0600) and shown once; a file others can read is refused")
    func secret() async throws {
        let dir = try TemporaryDirectory()
        let first = try await Self.start(dir)
        let secret = try #require(first.secret)
        #expect(secret.count >= 32 && first.process.stderrSoFar.contains(secret))
        var info = stat()
        #expect(stat(dir.file(".haul/rpc-secret").path, &info) == 0 && info.st_mode & 0o777 == 0o600)
        let wrong = Running(process: first.process, port: first.port, secret: "guess")
        #expect(
            (try await wrong.call("aria2.getVersion")["error"] as? [String: Any])?["message"] as? String
                == "Unauthorized")
        #expect(try await first.result("aria2.getVersion") is [String: Any])
        first.process.send(SIGTERM)
        let ended = await first.process.finish()
        #expect(ended.status == 0, "\(ended)")
        // Not shown again.
        let second = try await Self.start(dir)
        #expect(second.secret == secret && !second.process.stderrSoFar.contains(secret))
        second.process.send(SIGTERM)
        _ = await second.process.finish()

        let loose = dir.file("loose-secret")
        try "open-secret\n".write(to: loose, atomically: true, encoding: .utf8)
        chmod(loose.path, 0o644)
        let refused = try await HaulProcess.run([
            "daemon", "-d", dir.path, "--rpc-secret-file", loose.path, "--rpc-listen", "127.0.0.1:0",
        ])
        #expect(refused.status != 0 && refused.stderr.contains("can be read by other users"), "\(refused)")
        #expect(!refused.stderr.contains("open-secret"))
        let outside = try await HaulProcess.run(["daemon", "-d", dir.path, "--rpc-listen", "0.0.0.0:6800"])
        #expect(outside.status == 2 && outside.stderr.contains("--rpc-insecure-listen"), "\(outside)")
    }

    /// Runs `script` with the test Python (aria2p's); its last line of output, parsed.
    static func runPython(_ script: String, _ arguments: [String], environment: [String: String] = [:]) async throws
        -> [String: Any]
    {
        let scratch = try TemporaryDirectory()
        let file = scratch.file("script.py")
        try script.write(to: file, atomically: true, encoding: .utf8)
        let child = try ChildProcess(
            try Aria2pTests.python(), [file.path] + arguments, input: "",
            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 })
        let (status, stdout, stderr) = await child.finish()
        try #require(status == 0, "the script failed: \(stderr)")
        let line = try #require(stdout.split(separator: "\n").last.map(String.init), "no output: \(stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
    }

    @Test("--rpc-certificate: aria2p calls over https and hears notifications over wss; plain http is not answered")
    func tls() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let issued = try TestTLS.authority.serverCertificate(.valid)
            let certificate = dir.file("cert.pem")
            let key = dir.file("key.pem")
            let authority = dir.file("ca.pem")
            try issued.certificatePEM.write(to: certificate, atomically: true, encoding: .utf8)
            try issued.keyPEM.write(to: key, atomically: true, encoding: .utf8)
            try TestTLS.authority.certificatePEM.write(to: authority, atomically: true, encoding: .utf8)
            chmod(key.path, 0o644)
            let loose = try await HaulProcess.run([
                "daemon", "-d", dir.path, "--rpc-listen", "127.0.0.1:0", "--rpc-certificate", certificate.path,
                "--rpc-private-key", key.path,
            ])
            #expect(loose.status != 0 && loose.stderr.contains("--rpc-private-key"), "\(loose)")
            #expect(!loose.stderr.contains("PRIVATE KEY"))
            chmod(key.path, 0o600)
            let notKey = try await HaulProcess.run([
                "daemon", "-d", dir.path, "--rpc-listen", "127.0.0.1:0", "--rpc-certificate", certificate.path,
                "--rpc-private-key", certificate.path,
            ])
            #expect(
                notKey.status != 0 && notKey.stderr.contains("--rpc-private-key '\(certificate.path)'"), "\(notKey)")

            let daemon = try await Self.start(
                dir, ["--rpc-certificate", certificate.path, "--rpc-private-key", key.path])
            #expect(daemon.process.stderrSoFar.contains("https://127.0.0.1:\(daemon.port)/jsonrpc"))
            let url = server.url(path: "/bytes/tls.bin", query: ["size": "5000"]).absoluteString
            let script = #"""
                import faulthandler, json, sys, time
                import aria2p, requests
                faulthandler.dump_traceback_later(60, exit=True)
                port, secret, url = sys.argv[1:4]
                out = {}
                try:
                    requests.post("http://127.0.0.1:%s/jsonrpc" % port, json={"jsonrpc": "2.0", "id": 1,
                                  "method": "aria2.getVersion", "params": ["token:" + secret]}, timeout=10)
                    out["plain"] = "answered"
                except requests.exceptions.RequestException:
                    out["plain"] = "refused"
                api = aria2p.API(aria2p.Client(host="https://127.0.0.1", port=int(port), secret=secret))
                done = []
                api.listen_to_notifications(threaded=True, timeout=1,
                                            on_download_complete=lambda api, gid: done.append(gid))
                time.sleep(0.5)
                out["version"] = api.client.get_version()["version"]
                download = api.add_uris([url])
                for _ in range(200):
                    if download.gid in done:
                        break
                    time.sleep(0.05)
                api.stop_listening()
                download.update()
                out["status"] = download.status
                out["notified"] = download.gid in done
                print(json.dumps(out))
                """#
            let seen = await catching {
                try await Self.runPython(
                    script, [String(daemon.port), try #require(daemon.secret), url],
                    environment: [
                        "REQUESTS_CA_BUNDLE": authority.path, "WEBSOCKET_CLIENT_CA_BUNDLE": authority.path,
                    ])
            }
            daemon.process.send(SIGTERM)
            _ = await daemon.process.finish()
            let out = try seen.get()
            #expect(out["plain"] as? String == "refused", "\(out)")
            #expect(out["version"] is String && out["status"] as? String == "complete", "\(out)")
            #expect(out["notified"] as? Bool == true, "\(out)")
        }
    }

    @Test("--rpc-no-secret: a warning at every start, calls without a token answered, Host and Origin still checked")
    func noSecret() async throws {
        let dir = try TemporaryDirectory()
        let daemon = try await Self.start(dir, ["--rpc-no-secret"])
        #expect(daemon.process.stderrSoFar.contains("warning: --rpc-no-secret"))
        #expect(!FileManager.default.fileExists(atPath: dir.file(".haul/rpc-secret").path))
        let open = Running(process: daemon.process, port: daemon.port, secret: nil)
        #expect((try await open.result("aria2.getVersion") as? [String: Any])?["version"] != nil)
        let body = Array(#"{"jsonrpc":"2.0","id":1,"method":"aria2.getVersion"}"#.utf8)
        let rebound = try await RawHTTP.send(
            port: daemon.port, headers: [("Host", "attacker.example:\(daemon.port)")], body: body)
        #expect(rebound.status == 403 || rebound.status == 421, "\(rebound.text)")
        let foreign = try await RawHTTP.send(
            port: daemon.port,
            headers: [("Host", "127.0.0.1:\(daemon.port)"), ("Origin", "http://attacker.example")], body: body)
        #expect(foreign.status == 403, "\(foreign.text)")
        daemon.process.send(SIGTERM)
        _ = await daemon.process.finish()
    }

    @Test("killed with SIGKILL at any moment, restarted: every download it answered for is back, in order")
    func killAndRestart() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            var answered: [String] = []
            for round in 0..<4 {
                let daemon = try await Self.start(dir)
                // What the killed one answered for is there, waiting in the order it was added (the first one was
                // active: it waits again, first).
                #expect(try await daemon.unfinished() == answered, "round \(round)")
                for index in 0..<Int.random(in: 1...6) {
                    let url = server.url(path: "/bytes/k\(round)-\(index)", query: ["size": "100", "hold": "never"])
                    let gid = try await daemon.result("aria2.addUri", [[url.absoluteString]])
                    answered.append(try #require(gid as? String))
                }
                // Killed at once or a moment later, while the next add may be on its way.
                let late = Task {
                    let url = server.url(path: "/bytes/late\(round)", query: ["size": "100", "hold": "never"])
                    return try? await daemon.result("aria2.addUri", [[url.absoluteString]]) as? String
                }
                try await Task.sleep(for: .milliseconds(Int.random(in: 0...20)))
                daemon.process.send(SIGKILL)
                _ = await daemon.process.finish()
                if let gid = await late.value { answered.append(gid) }  // answered before the kill: it must come back
                let restarted = try await Self.start(dir)
                let back = try await restarted.unfinished()
                // One not answered may have been recorded all the same (killed between the commit and the answer).
                #expect(Array(back.filter { answered.contains($0) }) == answered, "round \(round)")
                answered = back
                restarted.process.send(SIGKILL)
                _ = await restarted.process.finish()
            }
        }
    }

    /// An ending is stored a moment after the download ends, with others; until then no answer shows it, so a
    /// SIGKILL right after a client read it takes nothing back. Asked the way clients ask: tellStatus of the download,
    /// the counts of getGlobalStat, and tellStopped.
    @Test("an ending read over RPC is kept: SIGKILL at once, restarted, it is still complete and not fetched again")
    func endingReadIsKept() async throws {
        try await TestServer.withRunning { server in
            for round in 0..<6 {
                let dir = try TemporaryDirectory()
                let daemon = try await Self.start(dir)
                let path = "/bytes/e\(round).bin"
                let url = server.url(path: path, query: ["size": "100"])
                let gid = try #require(try await daemon.result("aria2.addUri", [[url.absoluteString]]) as? String)
                // Asked again at once, as a client polling fast would: told within a millisecond or two of it.
                let deadline = ContinuousClock.now + .seconds(30)
                while true {
                    let told: Bool
                    switch round % 3 {
                    case 0:
                        let status = try await daemon.result("aria2.tellStatus", [gid, ["status"]]) as? [String: Any]
                        told = status?["status"] as? String == "complete"
                    case 1:
                        let stat = try await daemon.result("aria2.getGlobalStat") as? [String: Any]
                        told = stat?["numStopped"] as? String == "1"
                    default:
                        let stopped =
                            try await daemon.result("aria2.tellStopped", [-1, 10, ["gid"]]) as? [[String: Any]]
                        told = stopped?.first?["gid"] as? String == gid
                    }
                    if told { break }
                    try #require(ContinuousClock.now < deadline, "never told it ended, round \(round)")
                }
                daemon.process.send(SIGKILL)
                _ = await daemon.process.finish()
                // Moved away: a run of it again would write it anew.
                try FileManager.default.moveItem(at: dir.file("e\(round).bin"), to: dir.file("kept"))
                let restarted = try await Self.start(dir)
                let status =
                    try await restarted.result("aria2.tellStatus", [gid, ["status", "files"]]) as? [String: Any]
                #expect(status?["status"] as? String == "complete", "round \(round): \(status ?? [:])")
                let stat = try await restarted.result("aria2.getGlobalStat") as? [String: Any]
                #expect(
                    stat?["numStopped"] as? String == "1" && stat?["numWaiting"] as? String == "0", "\(stat ?? [:])")
                restarted.process.send(SIGTERM)
                _ = await restarted.process.finish()
                #expect(!FileManager.default.fileExists(atPath: dir.file("e\(round).bin").path), "round \(round)")
                #expect(server.stats.requests.filter { $0.path == path }.count == 1, "round \(round)")
            }
        }
    }

    @Test("SIGTERM: the running download stops with its partial kept, comes back waiting and resumes with Range")
    func termAndResume() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let daemon = try await Self.start(dir)
            let size = 2_000_000
            let url = server.url(
                path: "/bytes/big.bin", query: ["size": "\(size)", "stallAfter": "500000", "stall": "gate:s"])
            let gid = try #require(try await daemon.result("aria2.addUri", [[url.absoluteString]]) as? String)
            try await eventually("bytes written") {
                FileManager.default.fileExists(atPath: dir.file(".big.bin.haul-partial").path)
            }
            try await eventually("half of it") { server.stats.bodyBytesSent >= 500_000 }
            daemon.process.send(SIGTERM)
            let ended = await daemon.process.finish()
            #expect(ended.status == 0, "\(ended)")
            #expect(FileManager.default.fileExists(atPath: dir.file(".big.bin.haul-partial").path))
            server.openGate("s")
            let restarted = try await Self.start(dir)
            try await eventuallyAsync("complete again", within: .seconds(30)) {
                let status = try? await restarted.result("aria2.tellStatus", [gid, ["status"]]) as? [String: Any]
                return status?["status"] as? String == "complete"
            }
            #expect(
                { contentsOf(dir.file("big.bin")) == TestServer.expectedBytes(name: "big.bin", size: size) }(),
                "not the server's bytes")
            let resumed = try #require(server.stats.requests.last)
            #expect(resumed.range?.hasPrefix("bytes=") == true && resumed.range != "bytes=0-", "\(resumed.range ?? "")")
            restarted.process.send(SIGTERM)
            #expect(await restarted.process.finish().status == 0)
        }
    }
}
