import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// aria2p (PyPI), a client nobody here wrote, drives `haul daemon` through its `API`; the same scenario drives
/// Debian's `aria2c`, and the two answer alike where aria2 defines the answer.
@Suite("aria2p against haul daemon and aria2c", .timeLimit(.minutes(3)))
struct Aria2pTests {
    /// The scenario, in aria2p's own terms; prints what it saw as one JSON object.
    static let scenario = #"""
        import faulthandler, json, sys, time
        import aria2p

        # A client stuck on an answer that never comes fails with where it was stuck, not a hung test.
        faulthandler.dump_traceback_later(60, exit=True)

        port, secret, done_url, held_url, second_url = sys.argv[1:6]
        api = aria2p.API(aria2p.Client(host="http://127.0.0.1", port=int(port), secret=secret))
        notes = []
        def note(kind):
            return lambda api, gid: notes.append([kind, gid])
        api.listen_to_notifications(
            threaded=True, timeout=1,
            on_download_start=note("start"), on_download_pause=note("pause"), on_download_stop=note("stop"),
            on_download_complete=note("complete"), on_download_error=note("error"))
        time.sleep(0.5)

        def status_of(download):
            try:
                download.update()
                return download.status
            except aria2p.ClientException:
                return "gone"

        def wait(download, *statuses):
            for _ in range(300):
                if status_of(download) in statuses:
                    return True
                time.sleep(0.05)
            return False

        def results(values):
            return [value if value is True else "error: %s" % value for value in values]

        out = {}
        try:
            done = api.add_uris([done_url], options={"out": "done.bin"})
            out["done_completed"] = wait(done, "complete")
            out["done"] = {"status": done.status, "total": done.total_length, "completed": done.completed_length,
                           "name": done.name, "progress": done.progress}
            held = api.add_uris([held_url])
            out["held_active"] = wait(held, "active")
            second = api.add_uris([second_url], options={"max-download-limit": "20K"})
            out["second_status"] = status_of(second)
            out["second_limit"] = api.get_options([second])[0].get("max-download-limit")
            out["set_options"] = results(api.set_options({"max-download-limit": "30K"}, [second]))
            out["second_limit_after"] = api.get_options([second])[0].get("max-download-limit")
            out["pause"] = results(api.pause([second]))
            out["second_paused"] = wait(second, "paused")
            out["listed"] = sorted(d.gid for d in api.get_downloads())
            stats = api.get_stats()
            out["stats"] = {"active": stats.num_active, "waiting": stats.num_waiting, "stopped": stats.num_stopped}
            out["resume"] = results(api.resume([second]))
            out["second_resumed"] = status_of(second)
            # aria2p's remove also drops the results: the downloads end removed, then are gone.
            # The waiting one first: removing the active one first would start it, or not, as timing goes.
            out["remove"] = results(api.remove([second, held], force=True))
            out["held_removed"] = wait(held, "removed", "gone")
            out["second_removed"] = wait(second, "removed", "gone")
            out["stopped_after"] = [d.gid == done.gid for d in api.get_downloads()]
            time.sleep(1.5)
        finally:
            api.stop_listening()
        gids = {done.gid: "done", held.gid: "held", second.gid: "second"}
        out["notes"] = [[kind, gids.get(gid, gid)] for kind, gid in notes]
        # GIDs are each server's own: named, they compare.
        text = json.dumps(out, sort_keys=True)
        for gid, name in gids.items():
            text = text.replace(gid, name)
        print(text)
        """#

    /// The Python with aria2p that `scripts/test` installs.
    static func python() throws -> String {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let path = root.appendingPathComponent(".build/test-venv/bin/python").path
        try #require(
            FileManager.default.isExecutableFile(atPath: path),
            "aria2p is not installed: run scripts/test (it makes .build/test-venv with aria2p)")
        return path
    }

    /// Runs the scenario against an RPC server on `port` with `secret`; what it printed.
    static func runScenario(port: Int, secret: String, server: TestServer, tag: String) async throws -> [String: Any] {
        let scratch = try TemporaryDirectory()
        let script = scratch.file("scenario.py")
        try scenario.write(to: script, atomically: true, encoding: .utf8)
        let urls = [
            server.url(path: "/bytes/\(tag)-done", query: ["size": "40000"]),
            server.url(path: "/bytes/\(tag)-held", query: ["size": "1000", "hold": tag]),
            // Held too, so that nothing ends on its own while the scenario looks at it (the server's gates stay shut).
            server.url(path: "/bytes/\(tag)-second", query: ["size": "1000", "hold": tag]),
        ].map(\.absoluteString)
        let child = try ChildProcess(
            try python(), [script.path, String(port), secret] + urls, input: "",
            environment: ProcessInfo.processInfo.environment)
        let (status, stdout, stderr) = await child.finish()
        _ = scratch
        try #require(status == 0, "the scenario failed: \(stderr)")
        let line = try #require(stdout.split(separator: "\n").last.map(String.init), "no output: \(stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
    }

    @Test(
        "aria2p's API drives haul daemon as it drives aria2c: add, list, pause, resume, remove, options, stats, notifications"
    )
    func sameAsAria2() async throws {
        try await TestServer.withRunning { server in
            // haul daemon, width 1 so the second download waits behind the held one.
            let dir = try TemporaryDirectory()
            let daemon = try await DaemonCommandTests.start(dir)
            let secret = try #require(daemon.secret)
            let ours = await catching {
                try await Self.runScenario(port: daemon.port, secret: secret, server: server, tag: "haul")
            }
            daemon.process.send(SIGTERM)
            _ = await daemon.process.finish()
            let haul = try ours.get()

            // aria2c on a free port, the same way.
            let aria2 = try await Aria2Reference(secret: "reference", arguments: ["--max-concurrent-downloads=1"])
            let scenario = await catching {
                try await Self.runScenario(port: aria2.port, secret: "reference", server: server, tag: "aria2")
            }
            // Stopped whatever the scenario did: its held request would keep the test server from stopping.
            await aria2.stop()
            server.openGate("aria2")
            server.openGate("haul")
            let reference = try scenario.get()

            // Where aria2 defines the answer, haul daemon gives the same one.
            for key in [
                "done_completed", "held_active", "second_status", "second_limit", "set_options", "second_limit_after",
                "pause", "second_paused", "stats", "resume", "second_resumed", "remove", "held_removed",
                "second_removed", "stopped_after", "notes",
            ] {
                #expect(
                    canonical(haul[key]) == canonical(reference[key]),
                    "\(key): haul \(canonical(haul[key])), aria2 \(canonical(reference[key]))")
            }
            let done = try #require(haul["done"] as? [String: Any])
            let referenceDone = try #require(reference["done"] as? [String: Any])
            #expect(canonical(done) == canonical(referenceDone))
            #expect((haul["listed"] as? [String])?.count == 3)
            #expect(contentsOf(dir.file("done.bin")) == TestServer.expectedBytes(name: "haul-done", size: 40000))
        }
    }
}

/// `value` as JSON with sorted keys, to compare answers whatever order their members came in.
func canonical(_ value: Any?) -> String {
    guard let value else { return "missing" }
    guard JSONSerialization.isValidJSONObject([value]),
        let data = try? JSONSerialization.data(withJSONObject: [value], options: [.sortedKeys])
    else { return "\(value)" }
    return String(decoding: data, as: UTF8.self)
}

/// What `body` returned or threw.
func catching<Value>(_ body: () async throws -> Value) async -> Result<Value, any Error> {
    do {
        return .success(try await body())
    } catch {
        return .failure(error)
    }
}
