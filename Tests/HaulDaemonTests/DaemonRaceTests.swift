import Foundation
import Haul
import HaulNIO
import HaulTestServer
import HaulTestSupport
import Testing

@testable import HaulDaemon

/// Two RPC calls about the same downloads at once: what tellStatus, the lists, getGlobalStat, the store and a restart
/// say must agree.
@Suite("haul daemon: calls racing", .serialized, .timeLimit(.minutes(5)))
struct DaemonRaceTests {
    /// A daemon on `root` with its store there; its queue `width` wide, held (nothing admitted) with `held`.
    static func start(
        _ root: TemporaryDirectory, width: Int = 1, held: Bool = false, clock: any BackoffClock = RecordingClock()
    ) throws -> (Daemon, DownloadQueue, DaemonStore) {
        try FileManager.default.createDirectory(at: root.file(".haul"), withIntermediateDirectories: true)
        let store = try DaemonStore(path: root.file(".haul/daemon.sqlite").path)
        let queue = daemonTestQueue(width: width, retries: 1, clock: clock)
        if held { queue.pause() }
        let daemon = try Daemon(queue: queue, configuration: .init(root: root.url, store: store))
        return (daemon, queue, store)
    }

    static func status(_ daemon: Daemon, _ gid: String) -> String? {
        (try? daemon.call("aria2.tellStatus", [.string(gid), ["status"]]))?.object?["status"]?.string
    }

    static func stored(_ store: DaemonStore, _ gid: String) -> String? {
        (try? store.loadUnfinished())?.first { $0.gid.description == gid }?.state
    }

    /// Marks the current thread as the one `marker` names (Thread.name is not kept on Linux).
    static func mark(_ marker: Locked<ObjectIdentifier?>) {
        marker.withLock { $0 = ObjectIdentifier(Thread.current) }
    }

    /// Whether this is the thread `marker` names.
    static func onMarked(_ marker: Locked<ObjectIdentifier?>) -> Bool {
        marker.withLock { $0 } == ObjectIdentifier(Thread.current)
    }

    /// Waits for `semaphore` off the test's cooperative threads.
    static func wait(_ semaphore: DispatchSemaphore) async {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                semaphore.wait()
                continuation.resume()
            }
        }
    }

    /// Waits for `semaphore` off the test's cooperative threads, `seconds` at most; whether it was signalled.
    static func wait(_ semaphore: DispatchSemaphore, upTo seconds: Double) async -> Bool {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(returning: semaphore.wait(timeout: .now() + seconds) == .success)
            }
        }
    }

    /// Runs each of `bodies` on a thread of its own, all released at once, and waits for them all.
    static func race(_ bodies: [@Sendable () -> Void]) async {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                let ready = DispatchSemaphore(value: 0)
                let go = DispatchSemaphore(value: 0)
                let done = DispatchGroup()
                for body in bodies {
                    done.enter()
                    Thread {
                        ready.signal()
                        go.wait()
                        body()
                        done.leave()
                    }.start()
                }
                for _ in bodies { ready.wait() }
                for _ in bodies { go.signal() }
                done.wait()
                continuation.resume()
            }
        }
    }

    // MARK: - Suspicion 1: pauseAll and addUri

    @Test("addUri answered while pauseAll runs, after the queue paused: stored waiting, and waiting after a restart")
    func addedDuringPauseAll() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let (daemon, queue, store) = try Self.start(root)
            let a = try #require(
                try daemon.call(
                    "aria2.addUri",
                    [[.string(server.url(path: "/bytes/a", query: ["size": "1000", "hold": "g"]).absoluteString)]]
                ).string)
            try await eventually("a held") { server.heldCount(at: "g") == 1 }
            // pauseAll's thread is held as it sends the queue's `.paused` event: the queue has paused what it held,
            // the daemon has not yet read its downloads.
            let entered = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let pausing = Locked<ObjectIdentifier?>(nil)
            let observation = queue.observe(including: [.paused]) { _ in
                guard Self.onMarked(pausing) else { return }
                entered.signal()
                release.wait()
            }
            let pausedAll = DispatchSemaphore(value: 0)
            let pauser = Thread {
                Self.mark(pausing)
                _ = try? daemon.call("aria2.pauseAll", [])
                pausedAll.signal()
            }
            pauser.start()
            await Self.wait(entered)
            // Added after the queue's pause: aria2 adds it waiting. (A daemon that makes the two calls one after the
            // other answers it once pauseAll is done: it is given a second, then pauseAll is let go.)
            let added = DispatchSemaphore(value: 0)
            let answer = Locked<String?>(nil)
            let bURL = server.url(path: "/bytes/b", query: ["size": "1000", "hold": "g"]).absoluteString
            Thread {
                let gid = try? daemon.call("aria2.addUri", [[.string(bURL)]])
                answer.withLock { $0 = gid?.string }
                added.signal()
            }.start()
            let answeredAtOnce = await Self.wait(added, upTo: 1)
            release.signal()
            await Self.wait(pausedAll)
            if !answeredAtOnce { await Self.wait(added) }
            observation.cancel()
            let b = try #require(answer.withLock { $0 })

            // (Shown active while its run stops for the pause, as aria2 does.)
            try await eventually("a paused") { Self.status(daemon, a) == "paused" }
            let shown = Self.status(daemon, b)
            #expect(shown == "waiting" || shown == "active", "tellStatus: \(shown ?? "-")")
            #expect(Self.stored(store, b) == "waiting", "the store says \(Self.stored(store, b) ?? "-")")
            daemon.close()
            queue.cancelAll()
            server.openGate("g")
            await queue.waitUntilIdle()

            let (second, secondQueue, _) = try Self.start(root, held: true)
            #expect(Self.status(second, b) == "waiting", "after a restart: \(Self.status(second, b) ?? "-")")
            #expect(Self.status(second, a) == "paused")
            second.close()
            secondQueue.cancelAll()
        }
    }

    @Test("pauseAll while an addUri is between the queue and its GID: tellStatus, the store and a restart agree")
    func pauseAllDuringAdd() async throws {
        let root = try TemporaryDirectory()
        // Held: nothing starts, the download only waits.
        let (daemon, queue, store) = try Self.start(root, held: true)
        // The add's thread is held as it sends the queue's `.queued` event: its download is in the queue, not yet
        // known by its GID.
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let adding = Locked<ObjectIdentifier?>(nil)
        let observation = queue.observe(including: [.queued]) { _ in
            guard Self.onMarked(adding) else { return }
            entered.signal()
            release.wait()
        }
        let added = DispatchSemaphore(value: 0)
        let gid = Locked<String?>(nil)
        let adder = Thread {
            Self.mark(adding)
            let answer = try? daemon.call("aria2.addUri", [["http://127.0.0.1:9/b"]])
            gid.withLock { $0 = answer?.string }
            added.signal()
        }
        adder.start()
        await Self.wait(entered)
        // (A daemon that makes the two calls one after the other answers pauseAll once the add is done: it is given
        // a second, then the add is let go.)
        let pausedAll = DispatchSemaphore(value: 0)
        Thread {
            _ = try? daemon.call("aria2.pauseAll", [])
            pausedAll.signal()
        }.start()
        let answeredAtOnce = await Self.wait(pausedAll, upTo: 1)
        release.signal()
        await Self.wait(added)
        if !answeredAtOnce { await Self.wait(pausedAll) }
        observation.cancel()
        let b = try #require(gid.withLock { $0 })

        let shown = Self.status(daemon, b)
        let stored = Self.stored(store, b)
        // Either answer is aria2's (the add had not been answered), but the store must say the same.
        #expect((shown == "paused") == (stored == "paused"), "tellStatus: \(shown ?? "-"), the store: \(stored ?? "-")")
        daemon.close()
        queue.cancelAll()
        await queue.waitUntilIdle()
        let (second, secondQueue, _) = try Self.start(root, held: true)
        let restarted = Self.status(second, b)
        #expect(restarted == shown, "before the restart: \(shown ?? "-"), after: \(restarted ?? "-")")
        second.close()
        secondQueue.cancelAll()
    }

    // MARK: - Suspicion 2: removeDownloadResult twice, or with purgeDownloadResult

    @Test("two removeDownloadResult of one GID at once: numStopped stays the length of tellStopped")
    func removeResultTwice() async throws {
        let root = try TemporaryDirectory()
        let (daemon, _, _) = try Self.start(root, width: 4)
        var changed = 0
        var bothOK = 0
        var drift = 0
        for index in 0..<200 {
            let gid = try #require(try daemon.call("aria2.addUri", [[.string("http://127.0.0.1:9/r\(index)")]]).string)
            try await eventually("\(gid) stopped") { Self.status(daemon, gid) == "error" }
            let answers = Locked<[String]>([])
            let remove: @Sendable () -> Void = {
                let answer = (try? daemon.call("aria2.removeDownloadResult", [.string(gid)]))?.string ?? "error"
                answers.withLock { $0.append(answer) }
            }
            await Self.race([remove, remove])
            if answers.withLock({ $0 }) == ["OK", "OK"] { bothOK += 1 }
            let numStopped = try daemon.call("aria2.getGlobalStat", []).object?["numStopped"]?.string
            let listed = try daemon.call("aria2.tellStopped", [0, 100_000, ["gid"]]).array?.count ?? -1
            let now = listed - (numStopped.flatMap { Int($0) } ?? 0)
            if now != drift {
                changed += 1
                drift = now
            }
        }
        #expect(changed == 0, "numStopped fell behind tellStopped in \(changed) of 200 races (now by \(drift))")
        #expect(bothOK == 0, "both calls answered OK in \(bothOK) of 200 races")
        daemon.close()
    }

    @Test("removeDownloadResult and purgeDownloadResult at once: numStopped is 0, as tellStopped")
    func removeResultAndPurge() async throws {
        let root = try TemporaryDirectory()
        let (daemon, _, _) = try Self.start(root, width: 4)
        var wrong = 0
        var last = ""
        for index in 0..<200 {
            let gid = try #require(try daemon.call("aria2.addUri", [[.string("http://127.0.0.1:9/p\(index)")]]).string)
            try await eventually("\(gid) stopped") { Self.status(daemon, gid) == "error" }
            await Self.race([
                { _ = try? daemon.call("aria2.removeDownloadResult", [.string(gid)]) },
                { _ = try? daemon.call("aria2.purgeDownloadResult", []) },
            ])
            let numStopped = try daemon.call("aria2.getGlobalStat", []).object?["numStopped"]?.string ?? "-"
            let listed = try daemon.call("aria2.tellStopped", [0, 1000, ["gid"]]).array?.count ?? -1
            if numStopped != String(listed) {
                wrong += 1
                last = "numStopped \(numStopped), tellStopped \(listed)"
            }
            // Back to nothing stopped for the next race.
            daemon.state.withLock { $0.storedStopped = 0 }
        }
        #expect(wrong == 0, "wrong in \(wrong) of 200 races (\(last))")
        daemon.close()
    }

    // MARK: - Other calls about one GID at once

    @Test("changeOption and remove at once on a running download: a restart finds it removed")
    func changeOptionAndRemove() async throws {
        try await TestServer.withRunning { server in
            var wrong = 0
            var restarted: String?
            let rounds = 100
            for index in 0..<rounds {
                let root = try TemporaryDirectory()
                let clock = GatedClock()
                let (daemon, queue, store) = try Self.start(root, clock: clock)
                // Its first attempt fails (503): its run waits before the next, and stops only when the clock lets it.
                let url = server.url(path: "/bytes/c\(index)", query: ["status": "503"])
                let gid = try #require(try daemon.call("aria2.addUri", [[.string(url.absoluteString)]]).string)
                await clock.entered.wait()
                await Self.race([
                    { _ = try? daemon.call("aria2.remove", [.string(gid)]) },
                    { _ = try? daemon.call("aria2.changeOption", [.string(gid), ["max-download-limit": "10K"]]) },
                ])
                // Stopped as SIGTERM stops it, before its run has stopped.
                daemon.close()
                let state = Self.stored(store, gid)
                clock.release.open()
                queue.cancelAll()
                await queue.waitUntilIdle()
                if state != Daemon.removingState {
                    wrong += 1
                    if restarted == nil {
                        let (second, secondQueue, _) = try Self.start(root, held: true)
                        restarted = "stored \(state ?? "-"), after a restart \(Self.status(second, gid) ?? "-")"
                        second.close()
                        secondQueue.cancelAll()
                        await secondQueue.waitUntilIdle()
                    }
                }
            }
            #expect(wrong == 0, "not stored as removed in \(wrong) of \(rounds) races: \(restarted ?? "")")
        }
    }

    @Test("pause and unpause at once: tellStatus and the store agree")
    func pauseAndUnpause() async throws {
        let root = try TemporaryDirectory()
        let (daemon, queue, store) = try Self.start(root, held: true)
        let gid = try #require(try daemon.call("aria2.addUri", [["http://127.0.0.1:9/u"]]).string)
        var wrong = 0
        var last = ""
        for _ in 0..<1000 {
            _ = try? daemon.call("aria2.pause", [.string(gid)])
            await Self.race([
                { _ = try? daemon.call("aria2.unpause", [.string(gid)]) },
                { _ = try? daemon.call("aria2.pause", [.string(gid)]) },
            ])
            let shown = Self.status(daemon, gid)
            let stored = Self.stored(store, gid)
            if (shown == "paused") != (stored == "paused") {
                wrong += 1
                last = "tellStatus \(shown ?? "-"), the store \(stored ?? "-")"
            }
        }
        #expect(wrong == 0, "disagree in \(wrong) of 1000 races (\(last))")
        daemon.close()
        queue.cancelAll()
    }

    @Test("changeOption as the download completes: the store keeps it complete")
    func changeOptionAsItCompletes() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let (daemon, queue, store) = try Self.start(root, width: 1)
            var wrong = 0
            var last = ""
            let rounds = 200
            for index in 0..<rounds {
                let url = server.url(path: "/bytes/k\(index)", query: ["size": "10", "hold": "k\(index)"])
                let gid = try #require(try daemon.call("aria2.addUri", [[.string(url.absoluteString)]]).string)
                try await eventually("held") { server.heldCount(at: "k\(index)") == 1 }
                // changeOption over and over until the download has ended, while it ends.
                await Self.race([
                    {
                        while (try? daemon.call("aria2.changeOption", [.string(gid), ["max-download-limit": "1M"]]))
                            != nil
                        {}
                    },
                    { server.openGate("k\(index)") },
                ])
                try await eventually("complete") { Self.status(daemon, gid) == "complete" }
                store.flush()
                let unfinished = Self.stored(store, gid)
                let ended = try store.stopped(try #require(GID(hex: gid)))
                if unfinished != nil || ended == nil {
                    wrong += 1
                    last = "tellStatus complete, the store \(unfinished ?? "-")"
                }
            }
            #expect(wrong == 0, "the store lost the end in \(wrong) of \(rounds) (\(last))")
            daemon.close()
            queue.cancelAll()
        }
    }
}
