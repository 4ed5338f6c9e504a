import Foundation
import Haul
import HaulDaemon
import HaulNIO
import HaulTestServer
import HaulTestSupport
import Testing

/// aria2's configuration, input and session files: read as aria2 reads them, written as it writes them, and a
/// daemon's downloads carried over through one.
@Suite("aria2's files", .timeLimit(.minutes(2)))
struct Aria2FilesTests {
    @Test("a configuration file: name=value lines, comments and blanks skipped, spaces trimmed, bad lines named")
    func configuration() throws {
        let text = "# aria2.conf\n\ndir=/srv/downloads\r\n  split = 4\nheader=X-A: 1\nheader=X-B: 2\nrpc-secret=a=b\n"
        let settings = try Aria2Files.readConfiguration(text, name: "aria2.conf")
        #expect(settings.map(\.name) == ["dir", "split", "header", "header", "rpc-secret"])
        #expect(settings.map(\.value) == ["/srv/downloads", "4", "X-A: 1", "X-B: 2", "a=b"])
        #expect(settings.map(\.line) == [3, 4, 5, 6, 7])
        #expect(throws: RPCError("aria2.conf:2: 'continue' is not name=value")) {
            try Aria2Files.readConfiguration("dir=/x\ncontinue\n", name: "aria2.conf")
        }
        #expect(Aria2Files.role(of: "split") == .globalOption)
        #expect(Aria2Files.role(of: "max-overall-download-limit") == .globalOption)
        #expect(Aria2Files.role(of: "bt-max-peers") == .globalOption)  // accepted, inert
        #expect(Aria2Files.role(of: "enable-rpc") == .unused)
        #expect(Aria2Files.role(of: "spilt") == .unknown)
    }

    @Test("an input file: tab-separated mirrors, indented options, comments, CRLF; an option before a URI is named")
    func input() throws {
        let text = """
            # list
            http://a.example/f\thttp://b.example/f\t
             gid=2089b05ecca3d829
            \tdir=sub
             header=X-A: 1
             header=X-B: 2
            \r
            http://c.example/g\r
             pause=true\r

            """
        let entries = try Aria2Files.readInput(text, name: "list.txt")
        #expect(entries.map(\.uris) == [["http://a.example/f", "http://b.example/f"], ["http://c.example/g"]])
        #expect(entries[0].options == ["gid": ["2089b05ecca3d829"], "dir": ["sub"], "header": ["X-A: 1", "X-B: 2"]])
        #expect(entries[1].options == ["pause": ["true"]] && entries.map(\.line) == [2, 8])
        #expect(throws: RPCError("list.txt:1: an option line before any URI")) {
            try Aria2Files.readInput(" dir=x\nhttp://a/\n", name: "list.txt")
        }
        #expect(throws: RPCError("list.txt:2: 'pause' is not name=value")) {
            try Aria2Files.readInput("http://a/\n pause\n", name: "list.txt")
        }
    }

    @Test("a daemon's session read by another daemon: the same GIDs, order, paused state and options, secrets left out")
    func sessionRoundTrip() async throws {
        try await TestServer.withRunning { server in
            let first = try await DaemonHarness(maxConcurrent: 1)
            let failed = try #require(
                try await first.call(
                    "aria2.addUri", [[.string(server.url(path: "/bytes/f", query: ["status": "404"]).absoluteString)]]
                ).string)
            try await first.waitFor(failed, status: "error")
            let held = server.url(path: "/bytes/held", query: ["hold": "g"]).absoluteString
            let active = try #require(try await first.call("aria2.addUri", [[.string(held)]]).string)
            try await eventually("held") { server.heldCount(at: "g") == 1 }
            let mirrored = try #require(
                try await first.call(
                    "aria2.addUri",
                    [
                        ["http://127.0.0.1:1/m", "http://127.0.0.1:2/m"],
                        [
                            "dir": "sub", "out": "m.bin", "split": "2",
                            "header": ["X-A: 1", "Authorization: Bearer tk-1"],
                        ],
                    ]
                ).string)
            let paused = try #require(
                try await first.call(
                    "aria2.addUri",
                    [["http://user:pw-2@127.0.0.1:1/p"], ["pause": "true", "http-user": "u", "http-passwd": "pw-3"]]
                ).string)
            let session = first.daemon.session()
            server.openGate("g")
            await first.stop()
            #expect(!session.contains("pw-2") && !session.contains("pw-3") && !session.contains("tk-1"), "\(session)")
            #expect(session.contains("# \(paused): its credentials are not written here"))
            #expect(session.contains("http://127.0.0.1:1/m\thttp://127.0.0.1:2/m\t\n gid=\(mirrored)\n"))
            let entries = try Aria2Files.readInput(session, name: "session")
            #expect(entries.compactMap { $0.options["gid"]?.first } == [failed, active, mirrored, paused])

            let second = try await DaemonHarness(maxConcurrent: 1)
            second.queue.pause()  // to read the order before anything starts
            #expect(try second.daemon.add(entries, from: "session") == 4)
            let waiting = try await second.call("aria2.tellWaiting", [0, 10, ["gid", "status"]])
            #expect(
                waiting
                    == .array([
                        ["gid": .string(failed), "status": "waiting"], ["gid": .string(active), "status": "waiting"],
                        ["gid": .string(mirrored), "status": "waiting"], ["gid": .string(paused), "status": "paused"],
                    ]))
            let options = try #require(try await second.call("aria2.getOption", [.string(mirrored)]).object)
            #expect(options["dir"] == "sub" && options["out"] == "m.bin" && options["split"] == "2")
            #expect(options["header"] == ["X-A: 1"])
            // Read again (a session file given at every start): the GIDs it knows are left as they are.
            #expect(try second.daemon.add(entries, from: "session") == 0)
            second.queue.resume()
            await second.stop()
        }
    }

    @Test("a session saved while a removed download's run still stops leaves it out, as aria2 does")
    func sessionWhileRemoving() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let clock = GatedClock()
            let queue = daemonTestQueue(width: 1, clock: clock)
            let daemon = try Daemon(queue: queue, configuration: .init(root: root.url))
            // Its first attempt fails (503): its run waits before the next, and stops only when the clock lets it.
            let url = server.url(path: "/bytes/r", query: ["status": "503"])
            let gid = try #require(daemon.call("aria2.addUri", [[.string(url.absoluteString)]]).string)
            await clock.entered.wait()
            #expect(daemon.session().contains("gid=\(gid)"))
            #expect(try daemon.call("aria2.remove", [.string(gid)]) == .string(gid))
            #expect(!daemon.session().contains(gid))
            clock.release.open()
            daemon.close()
            queue.cancelAll()
            await queue.waitUntilIdle()
        }
    }

    @Test("a file with a bad entry adds nothing and names every bad line")
    func badInput() async throws {
        let harness = try await DaemonHarness()
        let text =
            "http://127.0.0.1:1/a\nhttp://127.0.0.1:1/b\n split=many\nftp://x/c\nhttp://127.0.0.1:1/d\n dir=../up\n"
        #expect {
            try harness.daemon.add(Aria2Files.readInput(text, name: "in.txt"), from: "in.txt")
        } throws: { error in
            let message = (error as? RPCError)?.message ?? ""
            return message.contains("in.txt:2: split") && message.contains("in.txt:4: 'ftp://x/c'")
                && message.contains("in.txt:5: dir") && !message.contains("in.txt:1")
        }
        #expect(try await harness.call("aria2.tellWaiting", [0, 10]) == [])
        await harness.stop()
    }

    @Test("saveSession writes the session file whole, readable by its owner only; without one it fails as in aria2")
    func saveSession() async throws {
        let harness = try await DaemonHarness()
        await #expect {
            try await harness.call("aria2.saveSession")
        } throws: { error in
            (error as? CallError)?.message == "Filename is not given."
        }
        await harness.stop()
        let root = try TemporaryDirectory()
        let file = root.file("session.txt")
        var configuration = Daemon.Configuration(root: root.url)
        configuration.sessionFile = file
        let queue = daemonTestQueue(width: 1)
        queue.pause()
        let daemon = try Daemon(queue: queue, configuration: configuration)
        let gid = try #require(try daemon.call("aria2.addUri", [["http://127.0.0.1:1/s"]]).string)
        #expect(try daemon.call("aria2.saveSession", []) == "OK")
        #expect(try String(contentsOf: file, encoding: .utf8) == "http://127.0.0.1:1/s\t\n gid=\(gid)\n")
        var info = stat()
        #expect(stat(file.path, &info) == 0 && info.st_mode & 0o777 == 0o600)
        #expect(!FileManager.default.fileExists(atPath: file.path + "__temp"))
        daemon.close()
        queue.cancelAll()
        await queue.waitUntilIdle()
    }
}
