import Foundation
import Haul
import HaulDaemon
import HaulTestServer
import HaulTestSupport
import Testing

/// A daemon started again on its store finds every download as the last one left it.
@Suite("Daemon restart", .timeLimit(.minutes(2)))
struct DaemonRestartTests {
    /// A daemon on `root` with its store there, of `width` (1 unless given), its downloader's waits before a retry on
    /// `clock`.
    private func start(
        _ root: TemporaryDirectory, width: Int = 1, paused: Bool = false, globalOptions: [String: String] = [:],
        clock: any BackoffClock = RecordingClock(), onStoreError: @escaping @Sendable (String) -> Void = { _ in }
    ) throws -> (Daemon, DownloadQueue) {
        // Paused, to read the order before anything starts.
        let started = try startStoredDaemon(
            root, width: width, paused: paused, globalOptions: globalOptions, clock: clock, onStoreError: onStoreError)
        return (started.daemon, started.queue)
    }

    @Test("changeOption on a paused download: its run follows the new split, the change is kept, a bad out is refused")
    func changeWaitingDownload() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            // Room for a download's extra connections.
            let (first, firstQueue) = try start(root, width: 4)
            // Slow enough that more connections are worth it whatever the machine's load does to the first piece's
            // speed: the rest would take a connection over a second even at twice the rate.
            let url = server.url(path: "/bytes/later.bin", query: ["size": String(8 << 20), "rate": "2000000"])
            let gid = try #require(
                try first.call(
                    "aria2.addUri", [[.string(url.absoluteString)], ["pause": "true", "min-split-size": "1M"]]
                ).string)
            #expect(
                try first.call(
                    "aria2.changeOption", [.string(gid), ["split": "3", "max-tries": "2", "continue": "true"]])
                    == "OK")
            let options = try #require(try first.call("aria2.getOption", [.string(gid)]).object)
            #expect(options["split"] == "3" && options["max-tries"] == "2" && options["continue"] == "true")
            // What its run will use: the queue's request of it.
            let changed = try #require(firstQueue.statuses().first?.request)
            #expect(changed.maxConnections == 3 && changed.retryPolicy?.maxRetries == 1)
            // A name that leads out of its directory, and a bad value beside a good one: refused, and nothing changed.
            for refused: JSON in [["out": "../other.bin"], ["split": "5", "timeout": "soon"], ["http-passwd": "x"]] {
                #expect(throws: RPCError.self, "\(refused)") {
                    try first.call("aria2.changeOption", [.string(gid), refused])
                }
            }
            #expect(try first.call("aria2.getOption", [.string(gid)]).object?["split"] == "3")
            // Kept for the next start.
            first.close()
            let (second, secondQueue) = try start(root, width: 4)
            #expect(try second.call("aria2.getOption", [.string(gid)]).object?["split"] == "3")
            #expect(secondQueue.statuses().first?.request.maxConnections == 3)
            #expect(try second.call("aria2.unpause", [.string(gid)]) == .string(gid))
            try await eventuallyAsync("complete", within: .seconds(60)) {
                (try? second.call("aria2.tellStatus", [.string(gid), ["status"]]))?.object?["status"] == "complete"
            }
            // Fetched in segments (the daemon's own split is 1).
            #expect(server.stats.maxInFlight > 1)
            // An active download's settings do not change (its speed limit does).
            let running = try #require(
                try second.call(
                    "aria2.addUri",
                    [
                        [
                            .string(
                                server.url(path: "/bytes/slow.bin", query: ["size": "100000", "rate": "20000"])
                                    .absoluteString)
                        ]
                    ]
                ).string)
            try await eventuallyAsync("active") {
                (try? second.call("aria2.tellStatus", [.string(running), ["status"]]))?.object?["status"] == "active"
            }
            #expect(throws: RPCError.self) {
                try second.call("aria2.changeOption", [.string(running), ["split": "2"]])
            }
            #expect(try second.call("aria2.changeOption", [.string(running), ["max-download-limit": "0"]]) == "OK")
            second.close()
            firstQueue.cancelAll()
            secondQueue.cancelAll()
            await secondQueue.waitUntilIdle()
        }
    }

    @Test("changeOption moves a paused download to another dir and name: shown, kept for the next start, run there")
    func changeWaitingDestination() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let (first, firstQueue) = try start(root)
            let url = server.url(path: "/bytes/first.bin", query: ["size": "1000"])
            let gid = try #require(
                try first.call("aria2.addUri", [[.string(url.absoluteString)], ["pause": "true"]]).string)
            #expect(
                try first.call("aria2.changeOption", [.string(gid), ["dir": "movies", "out": "renamed.bin"]]) == "OK")
            let moved = root.file("movies/renamed.bin").path
            func shown(_ daemon: Daemon) throws -> (String?, String?) {
                let status = try #require(
                    try daemon.call("aria2.tellStatus", [.string(gid), ["dir", "files"]]).object)
                return (status["dir"]?.string, status["files"]?.array?.first?.object?["path"]?.string)
            }
            #expect(try shown(first) == (root.file("movies").path, moved))
            let options = try #require(try first.call("aria2.getOption", [.string(gid)]).object)
            #expect(options["dir"] == .string(root.file("movies").path) || options["dir"] == "movies")
            #expect(options["out"] == "renamed.bin")
            // Out of the root, through a link that leads out, a hidden name: refused, and it stays where it was moved.
            let outside = try TemporaryDirectory()
            #expect(symlink(outside.url.path, root.file("link").path) == 0)
            for refused: JSON in [
                ["dir": "../outside"], ["dir": "/etc"], ["out": ".bashrc"], ["dir": "a/../../b"], ["dir": "link/x"],
            ] {
                #expect(throws: RPCError.self, "\(refused)") {
                    try first.call("aria2.changeOption", [.string(gid), refused])
                }
            }
            #expect(try shown(first) == (root.file("movies").path, moved))
            #expect(outside.contents().isEmpty)
            // Another download of the same URL into that file: refused, as the second add of one file is.
            let other = try #require(
                try first.call("aria2.addUri", [[.string(url.absoluteString)], ["pause": "true", "out": "two.bin"]])
                    .string)
            #expect(throws: RPCError.self) {
                try first.call("aria2.changeOption", [.string(other), ["dir": "movies", "out": "renamed.bin"]])
            }
            #expect(try first.call("aria2.remove", [.string(other)]) == .string(other))
            first.close()
            firstQueue.cancelAll()
            await firstQueue.waitUntilIdle()
            // Kept for the next start, and run there.
            let (second, secondQueue) = try start(root)
            #expect(try shown(second) == (root.file("movies").path, moved))
            #expect(try second.call("aria2.unpause", [.string(gid)]) == .string(gid))
            try await eventuallyAsync("complete", within: .seconds(60)) {
                (try? second.call("aria2.tellStatus", [.string(gid), ["status"]]))?.object?["status"] == "complete"
            }
            #expect(contentsOf(URL(fileURLWithPath: moved)) == TestServer.expectedBytes(name: "first.bin", size: 1000))
            #expect(!FileManager.default.fileExists(atPath: root.file("first.bin").path))
            // Ended, it does not move.
            #expect(throws: RPCError.self) { try second.call("aria2.changeOption", [.string(gid), ["out": "x.bin"]]) }
            second.close()
            secondQueue.cancelAll()
            await secondQueue.waitUntilIdle()
        }
    }

    @Test("changeUri gives a paused download a mirror it then fails over to; kept for the next start")
    func changeUriMirror() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let (first, _) = try start(root)
            let broken = server.url(path: "/bytes/gone.bin", query: ["status": "404"]).absoluteString
            let mirror = server.url(path: "/bytes/gone.bin", query: ["size": "100"]).absoluteString
            let gid = try #require(
                try first.call("aria2.addUri", [[.string(broken)], ["pause": "true", "max-tries": "1"]]).string)
            #expect(try first.call("aria2.changeUri", [.string(gid), 1, [], [.string(mirror)]]) == [0, 1])
            // Its first URI stays: removing it, or putting another before it, is refused.
            for change: [JSON] in [[1, [.string(broken)], []], [1, [], ["http://127.0.0.1:1/x"], 0]] {
                #expect(throws: RPCError.self) { try first.call("aria2.changeUri", [.string(gid)] + change) }
            }
            #expect(throws: RPCError.self) { try first.call("aria2.changeUri", [.string(gid), 1, [], ["ftp://h/x"]]) }
            first.close()
            let (second, secondQueue) = try start(root)
            let uris = try second.call("aria2.getUris", [.string(gid)]).array?.compactMap { $0.object?["uri"]?.string }
            #expect(uris == [broken, mirror])
            #expect(try second.call("aria2.unpause", [.string(gid)]) == .string(gid))
            try await eventuallyAsync("complete", within: .seconds(60)) {
                (try? second.call("aria2.tellStatus", [.string(gid), ["status"]]))?.object?["status"] == "complete"
            }
            #expect(root.contents().contains("gone.bin"))
            second.close()
            secondQueue.cancelAll()
            await secondQueue.waitUntilIdle()
        }
    }

    @Test("a download removed while its run still stops, its options changed, all paused, the daemon stopped: removed")
    func removedWhileStopping() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let clock = GatedClock()
            let (first, firstQueue) = try start(root, clock: clock)
            // Its first attempt fails (503): its run waits before the next, and stops only when the clock lets it.
            let url = server.url(path: "/bytes/r", query: ["status": "503"])
            let gid = try #require(try first.call("aria2.addUri", [[.string(url.absoluteString)]]).string)
            await clock.entered.wait()
            // Answered: the client was told it is removed; its end is not written until its run has stopped.
            #expect(try first.call("aria2.remove", [.string(gid)]) == .string(gid))
            // Neither a change of its options (which stores its whole row) nor a pause of all undoes that.
            _ = try? first.call("aria2.changeOption", [.string(gid), ["max-download-limit": "10K"]])
            #expect(try first.call("aria2.pauseAll", []) == "OK")
            // Stopped as SIGTERM stops it, before that run has stopped.
            first.close()
            clock.release.open()
            firstQueue.cancelAll()
            await firstQueue.waitUntilIdle()
            let requests = server.stats.requests(toPath: "/bytes/r")

            let (second, secondQueue) = try start(root)
            #expect(try second.call("aria2.tellStatus", [.string(gid), ["status"]]).object?["status"] == "removed")
            #expect(listedGIDs(try second.call("aria2.tellWaiting", [0, 10, ["gid"]])).isEmpty)
            #expect(listedGIDs(try second.call("aria2.tellStopped", [0, 10, ["gid"]])) == [gid])
            await secondQueue.waitUntilIdle()
            #expect(server.stats.requests(toPath: "/bytes/r") == requests, "a removed download was fetched again")
            second.close()
        }
    }

    @Test("stopped while the last download's end is still on its way to the daemon: it is recorded complete")
    func endSentLateRecorded() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let (first, firstQueue) = try start(root)
            let held = server.url(path: "/bytes/late", query: ["size": "1000", "hold": "g"])
            let late = try #require(try first.call("aria2.addUri", [[.string(held.absoluteString)]]).string)
            try await eventually("late held") { server.heldCount(at: "g") == 1 }
            let other = try #require(
                try first.call("aria2.addUri", [[.string(server.url(path: "/bytes/other").absoluteString)]]).string)
            // The removal of the waiting one is sent to the queue's observers by this thread, which an observer holds
            // up: every event published meanwhile waits behind it.
            let release = DispatchSemaphore(value: 0)
            let blocked = ResultBox<Void>()
            let holder = firstQueue.observe(including: [.failed]) { _ in
                guard blocked.value == nil else { return }
                blocked.resolve(())
                release.wait()
            }
            defer { holder.cancel() }
            let removing = ResultBox<Void>()
            Thread.detachNewThread {
                _ = try? first.call("aria2.remove", [.string(other)])
                removing.resolve(())
            }
            await blocked.wait()
            // The held one completes: the queue is idle, its end not yet sent to the daemon.
            server.openGate("g")
            await firstQueue.waitUntilIdle()
            let stopped = ResultBox<Void>()
            Task {
                await first.stop()
                stopped.resolve(())
            }
            // Nothing lets the stop return before that end reaches the daemon.
            try await Task.sleep(for: .milliseconds(100))
            #expect(stopped.value == nil, "stopped before the last end was recorded")
            release.signal()
            await removing.wait()
            await stopped.wait()

            let (second, secondQueue) = try start(root, paused: true)
            #expect(try second.call("aria2.tellStatus", [.string(late), ["status"]]) == ["status": "complete"])
            #expect(listedGIDs(try second.call("aria2.tellWaiting", [0, 10, ["gid"]])).isEmpty)
            #expect(server.stats.requests(toPath: "/bytes/late") == 1)
            second.close()
            secondQueue.cancelAll()
        }
    }

    @Test("waiting, paused, moved, finished, removed and secret-bearing downloads come back as they were")
    func restart() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let (first, firstQueue) = try start(root)
            func add(_ daemon: Daemon, _ name: String, _ options: JSON = [:]) throws -> String {
                let url = server.url(path: "/bytes/\(name)", query: ["size": "1000", "hold": "g"])
                let gid = try daemon.call("aria2.addUri", [[.string(url.absoluteString)], options])
                return gid.string ?? "(no GID: \(gid))"
            }
            let done = try #require(
                try first.call(
                    "aria2.addUri", [[.string(server.url(path: "/bytes/done", query: ["size": "10"]).absoluteString)]]
                ).string)
            try await eventually("done") {
                (try? first.call("aria2.tellStatus", [.string(done), ["status"]]))?.object?["status"] == "complete"
            }
            let active = try add(first, "active")
            try await eventually("active held") { server.heldCount(at: "g") == 1 }
            let a = try add(first, "a")
            let b = try add(first, "b", ["pause": "true"])
            let c = try add(first, "c")
            let secret = try add(first, "s", ["http-user": "u", "http-passwd": "pw-123"])
            #expect(try first.call("aria2.changePosition", [.string(c), 0, "POS_SET"]) == 0)
            let removed = try add(first, "removed")
            _ = try first.call("aria2.remove", [.string(removed)])
            try await eventually("removed") {
                (try? first.call("aria2.tellStatus", [.string(removed), ["status"]]))?.object?["status"] == "removed"
            }
            // Stopped as SIGTERM stops it: the running download is cancelled, and comes back.
            first.close()
            firstQueue.cancelAll()
            await firstQueue.waitUntilIdle()
            let stored = try String(contentsOf: root.file(".haul/daemon.sqlite"), encoding: .isoLatin1)
            #expect(!stored.contains("pw-123"), "a password in the store")

            let (second, secondQueue) = try start(root, paused: true)
            let waiting = try second.call("aria2.tellWaiting", [0, 10, ["gid", "status"]])
            #expect(listedGIDs(waiting) == [active, c, a, b])
            #expect(waiting.array?.last?.object?["status"] == "paused")
            let stopped = try second.call("aria2.tellStopped", [0, 10, ["gid", "status"]])
            #expect(listedGIDs(stopped) == [done, removed, secret])
            let withheld = try #require(try second.call("aria2.tellStatus", [.string(secret)]).object)
            #expect(withheld["status"] == "error")
            #expect(withheld["errorMessage"]?.string?.contains("credentials were not kept") == true)
            server.openGate("g")
            secondQueue.resume()
            for gid in [active, c, a] {
                try await eventually("\(gid) complete") {
                    (try? second.call("aria2.tellStatus", [.string(gid), ["status"]]))?.object?["status"] == "complete"
                }
            }
            #expect(try second.call("aria2.tellStatus", [.string(b), ["status"]]) == ["status": "paused"])
            second.close()
            secondQueue.cancelAll()
            await secondQueue.waitUntilIdle()

            // And once more: the history has grown, in the order things stopped.
            let (third, thirdQueue) = try start(root)
            let history = try third.call("aria2.tellStopped", [0, 10, ["gid"]])
            #expect(listedGIDs(history) == [done, removed, secret, active, c, a])
            #expect(try third.call("aria2.purgeDownloadResult", []) == "OK")
            third.close()
            thirdQueue.cancelAll()
            await thirdQueue.waitUntilIdle()
            let (fourth, fourthQueue) = try start(root, paused: true)
            #expect(try fourth.call("aria2.tellStopped", [0, 10]) == [])
            #expect(listedGIDs(try fourth.call("aria2.tellWaiting", [0, 10, ["gid"]])) == [b])
            fourth.close()
            fourthQueue.cancelAll()
        }
    }

    @Test("global options changed over the RPC are kept, applied again over the start's, and keep no secret")
    func globalOptionsKept() async throws {
        let root = try TemporaryDirectory()
        let (first, firstQueue) = try start(root, globalOptions: ["split": "2", "max-concurrent-downloads": "3"])
        #expect(firstQueue.maxConcurrentDownloads == 3)
        #expect(try first.call("aria2.getGlobalOption", []).object?["split"] == "2")
        #expect(
            try first.call(
                "aria2.changeGlobalOption",
                [
                    [
                        "max-concurrent-downloads": "6", "max-overall-download-limit": "1M", "split": "4",
                        "http-user": "u", "http-passwd": "global-pw-9", "header": ["X-A: 1", "Cookie: c=global-c-9"],
                    ]
                ]) == "OK")
        first.close()
        // Started again with its configuration file's options: the RPC's later changes win; the secrets are gone.
        let errors = Locked<[String]>([])
        let (second, secondQueue) = try start(
            root, globalOptions: ["split": "2", "max-concurrent-downloads": "3", "user-agent": "conf/1"],
            onStoreError: { message in errors.withLock { $0.append(message) } })
        #expect(secondQueue.maxConcurrentDownloads == 6 && secondQueue.downloader.maxBytesPerSecond == 1 << 20)
        let options = try #require(try second.call("aria2.getGlobalOption", []).object)
        // The password is not kept, nor its user name (half a credential).
        #expect(options["split"] == "4" && options["user-agent"] == "conf/1" && options["http-user"] == nil)
        #expect(options["http-passwd"] == nil && options["header"] == ["X-A: 1"])
        #expect(errors.withLock { $0 }.isEmpty)
        second.close()
        let stored =
            try Data(contentsOf: root.file(".haul/daemon.sqlite"))
            + ((try? Data(contentsOf: root.file(".haul/daemon.sqlite-wal"))) ?? Data())
        #expect(stored.range(of: Data("global-pw-9".utf8)) == nil && stored.range(of: Data("global-c-9".utf8)) == nil)
    }
}
