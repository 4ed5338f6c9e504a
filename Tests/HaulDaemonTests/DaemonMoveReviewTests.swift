import Foundation
import GRDB
import Haul
import HaulDaemon
import HaulTestServer
import HaulTestSupport
import Testing

/// changeOption's move of a waiting download (dir, out) under a hostile second look.
@Suite("Daemon: a waiting download moved, under review", .timeLimit(.minutes(2)))
struct DaemonMoveReviewTests {
    private func start(_ root: TemporaryDirectory, paused: Bool = false) throws -> (Daemon, DownloadQueue) {
        let started = try startStoredDaemon(root, paused: paused)
        return (started.daemon, started.queue)
    }

    private func path(_ daemon: Daemon, _ gid: String) throws -> String? {
        let status = try daemon.call("aria2.tellStatus", [.string(gid), ["files"]]).object
        return status?["files"]?.array?.first?.object?["path"]?.string
    }

    private func stop(_ daemon: Daemon, _ queue: DownloadQueue) async {
        daemon.close()
        queue.cancelAll()
        await queue.waitUntilIdle()
    }

    @Test("a changeOption refused (the download runs) makes no directories")
    func refusedMoveMakesNoDirectories() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let (daemon, queue) = try start(root)
            let url = server.url(path: "/bytes/held.bin", query: ["size": "1000", "hold": "mv"])
            let gid = try #require(try daemon.call("aria2.addUri", [[.string(url.absoluteString)]]).string)
            try await eventually("running") {
                (try? daemon.call("aria2.tellStatus", [.string(gid), ["status"]]))?.object?["status"] == "active"
                    && queue.runningCount == 1
            }
            #expect(throws: RPCError.self) {
                try daemon.call("aria2.changeOption", [.string(gid), ["dir": "stray/deep", "out": "x.bin"]])
            }
            #expect(
                !FileManager.default.fileExists(atPath: root.file("stray").path),
                "a refused changeOption left \(root.file("stray/deep").path)")
            server.openGate("mv")
            await stop(daemon, queue)
        }
    }

    @Test("a move the store cannot record is answered as failed and leaves the download where it was")
    func unrecordedMoveStays() async throws {
        let root = try TemporaryDirectory()
        let (daemon, queue) = try start(root)
        let gid = try #require(
            try daemon.call("aria2.addUri", [["http://127.0.0.1:9/file.bin"], ["pause": "true"]]).string)
        let before = try path(daemon, gid)
        let other = try DatabaseQueue(path: root.file(".haul/daemon.sqlite").path)
        try await other.write { db in
            try db.execute(
                sql: "CREATE TRIGGER refuse BEFORE UPDATE ON downloads BEGIN SELECT RAISE(ABORT, 'no room'); END")
        }
        #expect(throws: RPCError.self) {
            try daemon.call("aria2.changeOption", [.string(gid), ["out": "moved.bin"]])
        }
        // Told it failed, the client expects the download where it was; the queue runs it into moved.bin.
        let queued = queue.statuses().first?.request.destination
        let shownAfter = try path(daemon, gid)
        #expect(shownAfter == before, "shown: \(String(describing: shownAfter))")
        #expect(
            queued == .directory(URL(fileURLWithPath: daemon.rootPath, isDirectory: true)),
            "queue: \(String(describing: queued))")
        try await other.write { db in try db.execute(sql: "DROP TRIGGER refuse") }
        await stop(daemon, queue)
        // And a restart brings it back where the store had it: the shown path changes under the client's feet.
        let (second, secondQueue) = try start(root)
        #expect(try path(second, gid) == before)
        await stop(second, secondQueue)
    }

    @Test("moving onto the file another waiting download writes (same URL as a directory, or another URL) is refused")
    func moveOntoAnotherDownloadsFile() async throws {
        let root = try TemporaryDirectory()
        let (daemon, queue) = try start(root)
        let url = "http://127.0.0.1:9/named.bin"
        // Goes to ROOT/named.bin (a name from its URL).
        let first = try #require(try daemon.call("aria2.addUri", [[.string(url)], ["pause": "true"]]).string)
        let firstPath = try path(daemon, first)
        #expect(firstPath?.hasSuffix("/named.bin") == true)
        let second = try #require(
            try daemon.call("aria2.addUri", [[.string(url)], ["pause": "true", "out": "b.bin"]]).string)
        let third = try #require(
            try daemon.call("aria2.addUri", [["http://127.0.0.1:9/other.bin"], ["pause": "true"]]).string)
        var answers: [String] = []
        for gid in [second, third] {
            do {
                let answer = try daemon.call("aria2.changeOption", [.string(gid), ["out": "named.bin"]])
                answers.append("\(gid): \(answer)")
            } catch {
                answers.append("\(gid): refused")
            }
        }
        #expect(answers.allSatisfy { $0.hasSuffix("refused") }, "\(answers)")
        let shown = try [first, second, third].map { try path(daemon, $0) }
        #expect(Set(shown).count == 3, "three downloads now show one file: \(shown)")
        await stop(daemon, queue)
    }

    @Test("an out or dir with a line break, which the kept options would split into two values, is refused")
    func lineBreakInName() async throws {
        let root = try TemporaryDirectory()
        let (daemon, queue) = try start(root)
        let gid = try #require(
            try daemon.call("aria2.addUri", [["http://127.0.0.1:9/file.bin"], ["pause": "true"]]).string)
        let before = try path(daemon, gid)
        // And what would show a name as another: a C1 control, a bidi override, an invisible character.
        let hidden: [JSON] = [["out": "csi\u{9B}.bin"], ["out": "invoice\u{202E}fdp.exe"], ["dir": "re\u{200B}port"]]
        for options: JSON in [["out": "a\nb.bin"], ["dir": "a\rb"], ["out": "tab\u{7F}.bin"]] + hidden {
            #expect(throws: RPCError.self, "\(options)") {
                try daemon.call("aria2.changeOption", [.string(gid), options])
            }
            #expect(throws: RPCError.self, "\(options)") {
                try daemon.call("aria2.addUri", [["http://127.0.0.1:9/other.bin"], options])
            }
        }
        #expect(try path(daemon, gid) == before)
        await stop(daemon, queue)
    }
}
