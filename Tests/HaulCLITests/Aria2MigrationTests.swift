import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A user of Debian's `aria2c` moves over to `haul daemon` with the files they have (its configuration file and its
/// session), and back: `aria2c` reads the session `haul daemon` writes.
@Suite("Moving over from aria2c", .timeLimit(.minutes(3)))
struct Aria2MigrationTests {
    /// Calls `method` on a JSON-RPC server at `port` with `secret`; the answer's `result`.
    static func call(port: Int, secret: String, _ method: String, _ params: [Any] = []) async throws -> Any {
        let body = try JSONSerialization.data(
            withJSONObject: ["jsonrpc": "2.0", "id": "m", "method": method, "params": ["token:\(secret)"] + params])
        let answer = try await RawHTTP.send(port: port, headers: [("Host", "127.0.0.1:\(port)")], body: [UInt8](body))
        let members = try #require(
            try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any], "\(answer.text)")
        return try #require(members["result"], "\(members)")
    }

    /// Starts `aria2c` with its RPC on a free port, downloading into `dir`.
    static func startAria2(_ dir: TemporaryDirectory, _ extra: [String]) async throws -> (ChildProcess, Int) {
        let port = try freeLoopbackPort()
        let aria2 = try ChildProcess(
            "/usr/bin/aria2c",
            [
                "--enable-rpc", "--rpc-listen-port=\(port)", "--rpc-secret=reference", "--dir=\(dir.path)", "--no-conf",
                "--quiet",
            ] + extra, input: "", environment: ProcessInfo.processInfo.environment)
        try #require(await waitUntilAccepting(port: port, process: aria2), "aria2c did not start")
        return (aria2, port)
    }

    /// The GIDs and statuses of the waiting list.
    static func waiting(port: Int, secret: String) async throws -> [String] {
        let list = try await call(port: port, secret: secret, "aria2.tellWaiting", [0, 100, ["gid", "status"]])
        return (list as? [[String: Any]] ?? []).map { "\($0["gid"] ?? "") \($0["status"] ?? "")" }
    }

    @Test("aria2c's configuration file and session bring its downloads over, and aria2c reads the session haul writes")
    func moveOver() async throws {
        let dir = try TemporaryDirectory()
        // aria2c's downloads, paused, with the options front ends set; its session saved over the RPC.
        let (aria2, aria2Port) = try await Self.startAria2(dir, ["--save-session=\(dir.file("aria2.session").path)"])
        let first = try await Self.call(
            port: aria2Port, secret: "reference", "aria2.addUri",
            [
                ["http://127.0.0.1:1/a.bin", "http://127.0.0.1:2/a.bin"],
                ["pause": "true", "out": "a.bin", "split": "2", "header": ["X-A: 1"], "dir": dir.file("sub").path],
            ])
        let second = try await Self.call(
            port: aria2Port, secret: "reference", "aria2.addUri",
            [["http://127.0.0.1:1/b.bin"], ["pause": "true", "max-download-limit": "100K"]])
        let gids = try [#require(first as? String), #require(second as? String)]
        #expect(try await Self.call(port: aria2Port, secret: "reference", "aria2.saveSession") as? String == "OK")
        aria2.send(SIGKILL)
        _ = await aria2.finish()
        // The order aria2c wrote them in (its own waiting order), which haul daemon keeps.
        let written = try String(contentsOf: dir.file("aria2.session"), encoding: .utf8).split(separator: "\n")
            .compactMap { $0.hasPrefix(" gid=") ? String($0.dropFirst(" gid=".count)) : nil }
        #expect(Set(written) == Set(gids))

        let port = try freeLoopbackPort()
        let conf = dir.file("aria2.conf")
        try """
        # aria2's own
        enable-rpc=true
        rpc-listen-port=\(port)
        rpc-listen-all=true
        rpc-secret=conf-secret-1
        dir=\(dir.path)
        input-file=\(dir.file("aria2.session").path)
        save-session=\(dir.file("haul.session").path)
        max-concurrent-downloads=2
        split=3
        continue=true

        """.write(to: conf, atomically: true, encoding: .utf8)
        chmod(conf.path, 0o600)
        let daemon = try HaulProcess(["daemon", "--conf-path", conf.path, "-j", "3"])
        try await eventually("the daemon serves", within: .seconds(30)) {
            daemon.stderrSoFar.contains("serving aria2 JSON-RPC on http://127.0.0.1:\(port)/") || daemon.hasExited
        }
        let secret = "conf-secret-1"
        let broughtOver = try await Self.waiting(port: port, secret: secret)
        #expect(broughtOver == written.map { "\($0) paused" }, "\(daemon.stderrSoFar)")
        let options = try #require(
            try await Self.call(port: port, secret: secret, "aria2.getOption", [gids[0]]) as? [String: Any])
        #expect(options["out"] as? String == "a.bin" && options["split"] as? String == "2")
        #expect(options["dir"] as? String == dir.file("sub").path && options["header"] as? [String] == ["X-A: 1"])
        let uris = try await Self.call(port: port, secret: secret, "aria2.getUris", [gids[0]]) as? [[String: Any]]
        #expect(uris?.compactMap { $0["uri"] as? String } == ["http://127.0.0.1:1/a.bin", "http://127.0.0.1:2/a.bin"])
        let global = try #require(
            try await Self.call(port: port, secret: secret, "aria2.getGlobalOption") as? [String: Any])
        // -j given wins over the file's max-concurrent-downloads; the file's split is the default.
        #expect(global["max-concurrent-downloads"] as? String == "3" && global["split"] as? String == "3")
        let said = daemon.stderrSoFar
        #expect(said.contains("not used by haul daemon: enable-rpc, continue"), "\(said)")
        #expect(said.contains("rpc-listen-all=true is not followed") && said.contains("added 2 downloads"), "\(said)")
        #expect(!said.contains("conf-secret-1"))
        daemon.send(SIGTERM)
        let ended = await daemon.finish()
        #expect(ended.status == 0, "\(ended)")
        var info = stat()
        #expect(stat(dir.file("haul.session").path, &info) == 0 && info.st_mode & 0o777 == 0o600)

        // Back: aria2c reads the session haul daemon wrote at shutdown.
        let aria2Dir = try TemporaryDirectory()
        let (back, backPort) = try await Self.startAria2(
            aria2Dir, ["--input-file=\(dir.file("haul.session").path)", "--deferred-input=false"])
        try await eventuallyAsync("aria2c read the session") {
            (try? await Self.waiting(port: backPort, secret: "reference"))?.count == written.count
        }
        let readBack = try await Self.waiting(port: backPort, secret: "reference")
        #expect(readBack == written.map { "\($0) paused" })
        back.send(SIGKILL)
        _ = await back.finish()
    }

    @Test("bad files are refused naming file and line; a secret in a file others can read is refused")
    func badFiles() async throws {
        let dir = try TemporaryDirectory()
        let conf = dir.file("aria2.conf")
        try "dir=\(dir.path)\nsplit=4\nspilt=4\n".write(to: conf, atomically: true, encoding: .utf8)
        let unknown = try await HaulProcess.run(["daemon", "--conf-path", conf.path, "--rpc-listen", "127.0.0.1:0"])
        #expect(unknown.status != 0 && unknown.stderr.contains("\(conf.path):3: no such option of aria2: spilt"))

        try "rpc-secret=loose-secret-2\n".write(to: conf, atomically: true, encoding: .utf8)
        chmod(conf.path, 0o644)
        let loose = try await HaulProcess.run([
            "daemon", "-d", dir.path, "--conf-path", conf.path, "--rpc-listen", "127.0.0.1:0",
        ])
        #expect(loose.status != 0 && loose.stderr.contains("can be read by other users"), "\(loose)")
        #expect(!loose.stderr.contains("loose-secret-2"))

        let input = dir.file("list.txt")
        try "http://127.0.0.1:1/a\n split=many\nhttp://127.0.0.1:1/b\n".write(
            to: input, atomically: true, encoding: .utf8)
        let bad = try await HaulProcess.run([
            "daemon", "-d", dir.path, "-i", input.path, "--rpc-listen", "127.0.0.1:0", "--rpc-no-secret",
        ])
        #expect(bad.status == 1 && bad.stderr.contains("nothing added from \(input.path)"), "\(bad)")
        #expect(bad.stderr.contains("\(input.path):1: split must be a number from 1 to 64, not 'many'"), "\(bad)")
    }
}
