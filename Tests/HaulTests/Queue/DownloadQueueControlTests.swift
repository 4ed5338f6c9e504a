import Foundation
import Haul
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// One download at a time through the queue, on each transport against a real loopback server: pause and resume
/// (waiting and running), its place in the waiting order, its speed limit while it runs, and its status.
@Suite("DownloadQueue: one download's controls", .timeLimit(.minutes(2)))
struct DownloadQueueControlTests {
    @Test(
        "a paused waiting download is passed over, keeps its place, and starts where it was once resumed",
        arguments: TransportKind.allCases)
    func pauseWaiting(transport: TransportKind) async throws {
        try await TestServer.withRunning(transport.server()) { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: transport)
            let events = queue.events(including: [.paused, .resumed])
            let handles = queue.add(
                ["a", "b", "c", "d"].map { DownloadRequest(url: server.held($0), destination: .directory(dir.url)) })
            try await eventually("a held") { server.heldCount(at: "g") == 1 }
            #expect(handles[1].pause() && handles[1].pause())
            #expect(handles[1].status.state == .paused && handles[1].status.position == 0)
            #expect(queue.statuses().map(\.id) == handles.map(\.id))
            #expect(queue.statuses().map(\.state) == [.running, .paused, .waiting, .waiting])
            #expect(queue.statuses().map(\.position) == [nil, 0, 1, 2])
            // A page of them, without the others.
            #expect(queue.runningStatuses().map(\.id) == [handles[0].id])
            #expect(queue.waitingStatuses(1..<3).map(\.id) == [handles[2].id, handles[3].id])
            #expect(queue.waitingStatuses(1..<3).map(\.position) == [1, 2])
            #expect(queue.waitingStatuses(2..<99).map(\.id) == [handles[3].id] && queue.waitingStatuses(5..<9).isEmpty)
            server.openGate("g")
            for index in [0, 2, 3] { _ = try await handles[index].result }
            // Passed over, and still there: the queue is not idle while a download is paused.
            #expect(handles[1].outcome == nil && queue.waitingCount == 1 && queue.runningCount == 0)
            #expect(server.stats.requests.map(\.path) == ["/bytes/a", "/bytes/c", "/bytes/d"])
            #expect(handles[1].resume())
            let result = try await handles[1].result
            #expect(contentsOf(result.fileURL) == TestServer.expectedBytes(name: "b", size: 1000))
            #expect(server.stats.requests.map(\.path).last == "/bytes/b")
            #expect(!handles[1].pause() && !handles[1].resume())  // it has ended
            let status = handles[1].status
            #expect(status.state == .finished && status.progress.bytesWritten == 1000)
            #expect(throws: Never.self) { try status.outcome?.get() }
            queue.finishEvents()
            var seen: [String] = []
            for await event in events {
                switch event {
                case .paused(let id): seen.append("paused \(id)")
                case .resumed(let id): seen.append("resumed \(id)")
                default: Issue.record("an event not subscribed to: \(event)")
                }
            }
            #expect(seen == ["paused \(handles[1].id)", "resumed \(handles[1].id)"])
        }
    }

    @Test(
        "a download added paused never starts, keeps the order it was added in, and runs once resumed",
        arguments: TransportKind.allCases)
    func addPaused(transport: TransportKind) async throws {
        try await TestServer.withRunning(transport.server()) { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 4), transport: transport)
            let events = queue.events(including: [.paused])
            // Free slots: added then paused, they could start in between; added paused, they cannot.
            let handles = ["a", "b", "c"].map { name in
                queue.add(
                    DownloadRequest(url: server.url(path: "/bytes/\(name)"), destination: .directory(dir.url)),
                    paused: true)
            }
            #expect(queue.statuses().map(\.id) == handles.map(\.id))
            #expect(queue.statuses().allSatisfy { $0.state == .paused } && queue.runningCount == 0)
            #expect(server.stats.requestCount == 0)
            #expect(queue.resumeAll() == 3)
            for handle in handles { _ = try await handle.result }
            #expect(server.stats.requests.count == 3)
            queue.finishEvents()
            var paused: [DownloadID] = []
            for await case .paused(let id) in events { paused.append(id) }
            #expect(paused == handles.map(\.id))
        }
    }

    @Test(
        "a running download paused stops, keeps its partial, waits at the front, and resumes it with Range",
        arguments: TransportKind.allCases)
    func pauseRunning(transport: TransportKind) async throws {
        try await TestServer.withRunning(transport.server()) { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: transport, journal: journal)
            let size = 600_000  // above the size below which a partial is not kept
            let big = server.url(
                path: "/bytes/big", query: ["size": "\(size)", "stallAfter": "200000", "stall": "gate:s"])
            let handle = queue.add(DownloadRequest(url: big, destination: .directory(dir.url)))
            let next = queue.add(DownloadRequest(url: server.held("next"), destination: .directory(dir.url)))
            try await eventually("bytes of the first response written") {
                handle.status.progress.bytesWritten > 0
            }
            #expect(handle.status.state == .running && handle.status.connections == 1)
            #expect(handle.pause())
            #expect(handle.status.state == .paused)
            // Stopped: back at the front of the waiting order, its slot given to the next download.
            try await eventually("back in the waiting order") { handle.status.position == 0 }
            try await eventually("the next download started") { server.heldCount(at: "g") == 1 }
            #expect(handle.status.connections == 0 && handle.status.progress.bytesPerSecond == 0)
            let kept = handle.status.progress.bytesWritten
            #expect(kept > 0 && dir.contents() == [".big.haul-partial"])
            #expect(journal.allRecords().contains { if case .partial = $0.state { true } else { false } })
            server.openGate("s")
            #expect(handle.resume())
            server.openGate("g")
            let result = try await handle.result
            _ = try await next.result
            #expect(
                { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "big", size: size) }(),
                "not the server's bytes")
            let requests = server.stats.requests.filter { $0.path == "/bytes/big" }
            #expect(requests.count == 2)
            let range = try #require(requests.last?.range)
            let from = Int(range.dropFirst("bytes=".count).prefix { $0 != "-" }) ?? 0
            #expect(from > 0 && from <= 200_000, "\(range)")
            #expect(result.bytesTransferred == Int64(size - from))
            #expect(Set(dir.contents()) == ["big", "next"])
        }
    }

    @Test(
        "a download cancelled while paused, and a running one cancelled as its pause takes effect, end cancelled and keep nothing",
        arguments: 0..<4)
    func cancelPaused(round: Int) async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: .nio, journal: journal)
            let running = queue.add(
                DownloadRequest(
                    url: server.url(
                        path: "/bytes/r", query: ["size": "600000", "stallAfter": "100000", "stall": "forever"]),
                    destination: .directory(dir.url)))
            let waiting = queue.add(DownloadRequest(url: server.held("w"), destination: .directory(dir.url)))
            try await eventually("bytes written") { running.status.progress.bytesWritten > 0 }
            waiting.pause()
            // The cancellation races the run's own decision to keep its partial for the pause; each round lets the
            // run go a little further before it.
            running.pause()
            for _ in 0..<round { await Task.yield() }
            running.cancel()
            waiting.cancel()
            for handle in [running, waiting] {
                await #expect(throws: DownloadError.self) { try await handle.result }
                #expect(
                    handle.outcome.map { if case .failure(let error) = $0 { error.isCancellation } else { false } }
                        == true)
            }
            await queue.waitUntilIdle()
            #expect(dir.contents().isEmpty && journal.allRecords().isEmpty)
        }
    }

    @Test("a running download paused, then cancelled while it waits, discards the partial its pause kept")
    func cancelAfterPause() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: .nio, journal: journal)
            let handle = queue.add(
                DownloadRequest(
                    url: server.url(
                        path: "/bytes/p", query: ["size": "600000", "stallAfter": "100000", "stall": "forever"]),
                    destination: .directory(dir.url)))
            try await eventually("bytes written") { handle.status.progress.bytesWritten > 0 }
            #expect(handle.pause())
            try await eventually("back in the waiting order") { handle.status.position == 0 }
            #expect(dir.contents() == [".p.haul-partial"])
            handle.cancel()
            await #expect(throws: DownloadError.self) { try await handle.result }
            #expect(dir.contents().isEmpty && journal.allRecords().isEmpty)
        }
    }

    @Test("with keepsPartialOnCancel, a paused download cancelled keeps the partial its pause kept")
    func cancelAfterPauseKeeping() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            var configuration = TransportKind.nio.configuration(retries: 3)
            configuration.journal = journal
            configuration.keepsPartialOnCancel = true
            let queue = DownloadQueue(
                downloader: Downloader(transport: TransportKind.nio.makeTransport(), configuration: configuration),
                configuration: .init(maxConcurrentDownloads: 1))
            let handle = queue.add(
                DownloadRequest(
                    url: server.url(
                        path: "/bytes/p", query: ["size": "600000", "stallAfter": "100000", "stall": "forever"]),
                    destination: .directory(dir.url)))
            try await eventually("bytes written") { handle.status.progress.bytesWritten > 0 }
            #expect(handle.pause())
            try await eventually("back in the waiting order") { handle.status.position == 0 }
            handle.cancel()
            await #expect(throws: DownloadError.self) { try await handle.result }
            #expect(dir.contents() == [".p.haul-partial"])
            #expect(journal.allRecords().contains { if case .partial = $0.state { true } else { false } })
        }
    }

    @Test("moving waiting downloads changes the order they start in", arguments: TransportKind.allCases)
    func moveInWaitingOrder(transport: TransportKind) async throws {
        try await TestServer.withRunning(transport.server()) { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: transport)
            let handles = queue.add(
                ["a", "b", "c", "d", "e"].map {
                    DownloadRequest(url: server.held($0), destination: .directory(dir.url))
                })
            try await eventually("a held") { server.heldCount(at: "g") == 1 }
            #expect(handles[4].move(toPosition: 0) == 0)
            #expect(handles[1].move(toPosition: 99) == 3)
            #expect(handles[0].move(toPosition: 0) == nil)  // running
            #expect(
                queue.statuses().compactMap { $0.position == nil ? nil : $0.id } == [4, 2, 3, 1].map { handles[$0].id })
            server.openGate("g")
            for handle in handles { _ = try await handle.result }
            #expect(server.stats.requests.map(\.path) == ["a", "e", "c", "d", "b"].map { "/bytes/\($0)" })
            #expect(handles[2].move(toPosition: 0) == nil)  // ended
        }
    }

    @Test(
        "a speed limit set while a download runs holds it back at once, and lifting it lets it finish",
        arguments: TransportKind.allCases)
    func speedLimitWhileRunning(transport: TransportKind) async throws {
        try await TestServer.withRunning(transport.server()) { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 2), transport: transport)
            let size = 4_000_000
            let url = server.url(
                path: "/bytes/limited", query: ["size": "\(size)", "stallAfter": "100000", "stall": "gate:s"])
            let handle = queue.add(DownloadRequest(url: url, destination: .directory(dir.url)))
            try await eventually("bytes written") { handle.status.progress.bytesWritten > 0 }
            #expect(handle.status.maxBytesPerSecond == nil)
            // Taken before the limit: a chunk read after it is told before the download waits (however soon after
            // the last progress event it came), even one still on its way from before the stall.
            let before = handle.status.progress.bytesWritten
            // One byte a second: the first chunk read puts the download in debt for hours.
            #expect(handle.setMaxBytesPerSecond(1))
            #expect(handle.status.maxBytesPerSecond == 1)
            server.openGate("s")
            // In debt now or soon: a chunk read after the gate opens puts it there (and is told before the wait);
            // a chunk read just before the limit was set, and told already, may have put it there first, and then
            // nothing more is read. Either way it is held in a wait of hours when the limit is lifted below.
            try await Self.settle { handle.status.progress.bytesWritten > before }
            // Held back: not finished, though the server sends it all as fast as the client reads.
            #expect(handle.outcome == nil && handle.status.progress.bytesWritten < Int64(size))
            #expect(handle.setMaxBytesPerSecond(nil))
            // A wait that did not notice the change would last for days: failed here rather than left hanging.
            try await eventually("finished once the limit is lifted", within: .seconds(30)) { handle.outcome != nil }
            let result = try await handle.result
            #expect(
                { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "limited", size: size) }(),
                "not the server's bytes")
            #expect(!handle.setMaxBytesPerSecond(10))  // it has ended
        }
    }

    @Test(
        "the downloader's shared limit set while two downloads run holds both back, and lifting it lets them finish",
        arguments: TransportKind.allCases)
    func sharedLimitWhileRunning(transport: TransportKind) async throws {
        try await TestServer.withRunning(transport.server()) { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 2), transport: transport)
            let size = 4_000_000
            let handles = ["a", "b"].map { name in
                queue.add(
                    DownloadRequest(
                        url: server.url(
                            path: "/bytes/\(name)",
                            query: ["size": "\(size)", "stallAfter": "100000", "stall": "gate:s"]),
                        destination: .directory(dir.url)))
            }
            try await eventually("bytes written") { handles.allSatisfy { $0.status.progress.bytesWritten > 0 } }
            #expect(queue.downloader.maxBytesPerSecond == nil)
            let before = handles.map(\.status.progress.bytesWritten)
            queue.downloader.setMaxBytesPerSecond(1)
            #expect(queue.downloader.maxBytesPerSecond == 1)
            server.openGate("s")
            // In debt now or soon, as in the test above.
            try await Self.settle { zip(handles, before).allSatisfy { $0.status.progress.bytesWritten > $1 } }
            #expect(handles.allSatisfy { $0.outcome == nil && $0.status.progress.bytesWritten < Int64(size) })
            queue.downloader.setMaxBytesPerSecond(nil)
            try await eventually("finished once the limit is lifted", within: .seconds(30)) {
                handles.allSatisfy { $0.outcome != nil }
            }
            for handle in handles { _ = try await handle.result }
        }
    }

    @Test(
        "a host's own limit: 0 holds its downloads back while another host's run, raising it lets that many start",
        arguments: TransportKind.allCases)
    func hostLimits(transport: TransportKind) async throws {
        try await TestServer.withRunning(transport.server()) { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 10, perHostLimit: 4), transport: transport)
            let held = server.held("x", gate: "a", host: "localhost")
            let slow = DownloadQueue.hostKey(for: held)
            #expect(slow.hasSuffix("://localhost:\(server.port)"))
            queue.setLimit(0, forHost: slow)
            var handles: [DownloadHandle] = []
            for index in 0..<3 {
                for host in ["localhost", "127.0.0.1"] {
                    handles.append(
                        queue.add(
                            DownloadRequest(
                                url: server.held("\(host)-\(index)", gate: host == "localhost" ? "a" : "b", host: host),
                                destination: .directory(dir.url))))
                }
            }
            try await eventually("the other host's three held") { server.heldCount(at: "b") == 3 }
            let statuses = Dictionary(uniqueKeysWithValues: queue.hostStatuses().map { ($0.host, $0) })
            #expect(statuses[slow] == HostStatus(host: slow, running: 0, waiting: 3, ownLimit: 0, limit: 0))
            #expect(statuses[slow]?.isPaused == true)
            let other = DownloadQueue.hostKey(for: server.held("y", host: "127.0.0.1"))
            #expect(statuses[other] == HostStatus(host: other, running: 3, waiting: 0, ownLimit: nil, limit: 4))
            #expect(server.heldCount(at: "a") == 0)
            queue.setLimit(2, forHost: slow)
            try await eventually("two of the held host's started") { server.heldCount(at: "a") == 2 }
            #expect(queue.hostStatuses().first { $0.host == slow }?.waiting == 1)
            server.openGate("a")
            server.openGate("b")
            for handle in handles { _ = try await handle.result }
            // The server's own count: never more than two at once from the limited host.
            #expect(server.stats.maxInFlightByHost["localhost:\(server.port)"] == 2)
            queue.setLimit(nil, forHost: slow)
            #expect(queue.hostStatuses().isEmpty)
        }
    }

    @Test("a speed limit set on a waiting download applies once it runs; pause and resume all")
    func limitWhileWaitingAndAll() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: .nio)
            let first = queue.add(DownloadRequest(url: server.held("first"), destination: .directory(dir.url)))
            let url = server.url(path: "/bytes/slow", query: ["size": "300000"])
            let limited = queue.add(DownloadRequest(url: url, destination: .directory(dir.url)))
            try await eventually("first held") { server.heldCount(at: "g") == 1 }
            #expect(limited.setMaxBytesPerSecond(1))
            #expect(queue.pauseAll() == 2)
            #expect(queue.statuses().map(\.state) == [.paused, .paused])
            // The running one stops (its place in the order at once, its slot once its run has wound down); nothing
            // else starts while both are paused.
            try await eventually("first stopped") { first.status.position == 0 && queue.runningCount == 0 }
            #expect(queue.waitingCount == 2)
            server.openGate("g")
            #expect(queue.resumeAll() == 2)
            _ = try await first.result
            try await eventually("the limited one runs") { limited.status.progress.bytesWritten > 0 }
            #expect(limited.status.progress.bytesWritten < 300_000 && limited.outcome == nil)
            limited.setMaxBytesPerSecond(nil)
            try await eventually("finished once the limit is lifted", within: .seconds(30)) { limited.outcome != nil }
            _ = try await limited.result
            #expect(server.stats.requests(toPath: "/bytes/first") == 2)
        }
    }

    @Test("pause all stops the running one and starts none of the waiting ones, however many wait")
    func pauseAllAtOnce() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: .nio)
            let first = queue.add(DownloadRequest(url: server.held("first"), destination: .directory(dir.url)))
            // Paused one by one, the running one could stop while the others still wait to be paused, and its slot
            // start one of them: the more wait, the likelier.
            let waiting = queue.add(
                (0..<2_000).map {
                    DownloadRequest(url: server.url(path: "/bytes/w\($0)"), destination: .directory(dir.url))
                })
            try await eventually("first held") { server.heldCount(at: "g") == 1 }
            #expect(queue.pauseAll() == 2_001)
            try await eventually("first stopped") { queue.runningCount == 0 && first.status.position != nil }
            #expect(server.stats.requestCount == 1)
            #expect(queue.statuses().map(\.id) == [first.id] + waiting.map(\.id))
            #expect(queue.statuses().allSatisfy { $0.state == .paused })
            queue.cancelAll()
            server.openGate("g")
            await queue.waitUntilIdle()
        }
    }

    @Test("a pause tells whether it stopped the download while it ran; pause all tells which it stopped so")
    func pauseTellsRunning() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 2), transport: .nio)
            let running = queue.add(
                ["a", "b"].map { DownloadRequest(url: server.held($0), destination: .directory(dir.url)) })
            let waiting = queue.add(DownloadRequest(url: server.held("c"), destination: .directory(dir.url)))
            let paused = queue.add(
                DownloadRequest(url: server.held("d"), destination: .directory(dir.url)), paused: true)
            try await eventually("both held") { server.heldCount(at: "g") == 2 }
            #expect(queue.pauseTellingRunning(waiting.id) == false)
            #expect(queue.pauseTellingRunning(running[0].id) == true)
            #expect(queue.pauseTellingRunning(running[0].id) == false, "paused already")
            #expect(paused.status.state == .paused)
            let all = queue.pauseAllTellingRunning()
            #expect(all.count == 4)
            #expect(all.running == [running[1].id])
            queue.cancelAll()
            server.openGate("g")
            await queue.waitUntilIdle()
            #expect(queue.pauseTellingRunning(running[0].id) == nil, "no longer in the queue")
        }
    }

    @Test("a running download cancelled cannot be paused or resumed while its run ends: it ends cancelled, run once")
    func pauseAfterCancel() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: .nio)
            let handle = queue.add(DownloadRequest(url: server.held("a"), destination: .directory(dir.url)))
            try await eventually("held") { server.heldCount(at: "g") == 1 }
            handle.cancel()
            // Its run is still ending (or has ended already): either way no pause may put it back in the queue.
            #expect(queue.pauseTellingRunning(handle.id) == nil)
            #expect(queue.pauseAllTellingRunning().count == 0)
            #expect(!queue.resume(handle.id))
            #expect(queue.resumeAll() == 0)
            await #expect(throws: DownloadError.self) { try await handle.result }
            #expect(
                handle.outcome.map { if case .failure(let error) = $0 { error.isCancellation } else { false } } == true)
            server.openGate("g")
            await queue.waitUntilIdle()
            #expect(server.stats.requests(toPath: "/bytes/a") == 1)
            #expect(dir.contents().isEmpty)
        }
    }

    /// A download holding localhost's one slot (localhost is the same server at another origin), and one whose first
    /// source failed: it gave its slot back and waits for one at localhost, to go on from its mirror there (held at
    /// gate "m").
    private func movingToBusyMirror(
        _ server: TestServer, _ queue: DownloadQueue, into dir: TemporaryDirectory
    ) async throws -> (busy: DownloadHandle, moved: DownloadHandle) {
        let busy = queue.add(
            DownloadRequest(url: server.held("busy", host: "localhost"), destination: .directory(dir.url)))
        try await eventually("busy held") { server.heldCount(at: "g") == 1 }
        var request = DownloadRequest(
            url: server.url(path: "/bytes/moved", query: ["status": "404"]), destination: .file(dir.file("moved")))
        request.mirrors = [server.held("moved", gate: "m", host: "localhost")]
        let moved = queue.add(request)
        try await eventually("waiting for the mirror's host") {
            server.stats.requests(toPath: "/bytes/moved") == 1 && queue.runningCount == 1
        }
        return (busy, moved)
    }

    @Test("a download going on from a mirror at a busy host is listed as running while it waits for a slot there")
    func movedToMirrorListed() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 4, perHostLimit: 1), retries: 0, transport: .nio)
            let (busy, moved) = try await movingToBusyMirror(server, queue, into: dir)
            #expect(queue.runningStatuses().map(\.id) == [busy.id, moved.id])
            #expect(queue.statuses().map(\.id) == [busy.id, moved.id])
            #expect(queue.progress.runningFiles == 2)
            server.openGate("g")
            _ = try await busy.result
            try await eventually("the mirror held") { server.heldCount(at: "m") == 1 }
            #expect(queue.runningStatuses().map(\.id) == [moved.id])
            #expect(queue.statuses().map(\.id) == [moved.id])
            #expect(queue.progress.runningFiles == 1)
            server.openGate("m")
            _ = try await moved.result
        }
    }

    @Test("a queue paused while a download waits for a slot at its mirror's host lets it go on; no new one starts")
    func movedToMirrorWhilePaused() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 4, perHostLimit: 1), retries: 0, transport: .nio)
            let (busy, moved) = try await movingToBusyMirror(server, queue, into: dir)
            queue.pause()
            let held = queue.add(
                DownloadRequest(url: server.url(path: "/bytes/held"), destination: .directory(dir.url)))
            server.openGate("g")
            _ = try await busy.result
            // The running download takes the slot its mirror's host gives back, though the queue is paused.
            try await eventually("the mirror held") { server.heldCount(at: "m") == 1 }
            server.openGate("m")
            _ = try await moved.result
            #expect(server.stats.requests(toPath: "/bytes/held") == 0)
            #expect(queue.statuses().map(\.id) == [held.id])
            queue.resume()
            _ = try await held.result
        }
    }

    @Test("a download that failed part way tells how far it got: its status's bytes and total, its error's")
    func failedProgress() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1), retries: 0, transport: .nio)
            let url = server.url(path: "/bytes/cut.bin", query: ["size": "300000", "cutAfter": "100000"])
            let handle = queue.add(DownloadRequest(url: url, destination: .directory(dir.url)))
            let error = await #expect(throws: DownloadError.self) { try await handle.result }
            #expect(error?.totalBytes == 300_000 && error?.bytesReceived == 100_000)
            let status = handle.status
            #expect(status.state == .finished)
            #expect(status.progress.totalBytes == 300_000 && status.progress.bytesWritten == 100_000)
        }
    }

    @Test("a waiting download's request is replaced for one with its URL and destination; not once it runs")
    func replaceWaitingRequest() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: .nio)
            let url = server.url(path: "/bytes/replaced", query: ["size": "100"])
            let request = DownloadRequest(url: url, destination: .directory(dir.url), priority: 3)
            let handle = queue.add(request, paused: true)
            var settings = request
            settings.maxConnections = 4
            settings.priority = 0  // the queue's priority stays
            #expect(queue.replaceWaitingRequest(of: handle.id, with: settings))
            #expect(handle.status.request.maxConnections == 4 && handle.status.request.priority == 3)
            // Another file, another URL, another size: refused, the request kept.
            var elsewhere = settings
            elsewhere.destination = .file(dir.file("other.bin"))
            var otherURL = settings
            otherURL.url = server.url(path: "/bytes/other")
            var sized = settings
            sized.expectedSize = 100
            for refused in [elsewhere, otherURL, sized] {
                #expect(!queue.replaceWaitingRequest(of: handle.id, with: refused))
            }
            var kept = settings
            kept.priority = 3
            #expect(handle.status.request == kept)
            // Running (held by the server), it keeps its request.
            let held = queue.add(DownloadRequest(url: server.held("r"), destination: .directory(dir.url)))
            try await eventually("running") { server.heldCount(at: "g") == 1 }
            var changed = held.status.request
            changed.maxConnections = 2
            #expect(!queue.replaceWaitingRequest(of: held.id, with: changed))
            server.openGate("g")
            _ = try await held.result
            handle.cancel()
        }
    }

    @Test("a waiting download that holds no bytes moves to another file, and starts there; refused otherwise")
    func moveWaitingDownload() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: .nio, journal: journal)
            let url = server.url(path: "/bytes/moved", query: ["size": "100"])
            let request = DownloadRequest(url: url, destination: .directory(dir.url), priority: 3)
            let handle = queue.add(request, paused: true)
            #expect(journal.record(for: JournalKey(request))?.state == .requested)
            try FileManager.default.createDirectory(at: dir.file("sub"), withIntermediateDirectories: true)
            var moved = request
            moved.destination = .file(dir.file("sub/renamed.bin"))
            moved.maxConnections = 2
            moved.priority = 0  // the queue's priority stays
            try queue.moveWaitingDownload(handle.id, to: moved)
            #expect(handle.status.request.destination == moved.destination)
            #expect(handle.status.request.maxConnections == 2 && handle.status.request.priority == 3)
            // What the journal had of its request went with it.
            #expect(journal.record(for: JournalKey(request)) == nil)
            #expect(journal.record(for: JournalKey(moved))?.state == .requested)
            // Another URL or size is another download; the file of another download is that one's.
            var otherURL = moved
            otherURL.url = server.url(path: "/bytes/other")
            var sized = moved
            sized.expectedSize = 100
            for refused in [otherURL, sized] {
                #expect(throws: DownloadQueue.MoveRefusal.otherDownload) {
                    try queue.moveWaitingDownload(handle.id, to: refused)
                }
            }
            let other = queue.add(
                DownloadRequest(url: url, destination: .file(dir.file("taken.bin"))), paused: true)
            var taken = moved
            taken.destination = .file(dir.file("taken.bin"))
            #expect(throws: DownloadQueue.MoveRefusal.destinationTaken) {
                try queue.moveWaitingDownload(handle.id, to: taken)
            }
            // Its old place is free again: another download for it is a download of its own, not a join.
            let atOld = queue.add(request, paused: true)
            #expect(atOld.id != handle.id)
            #expect(handle.resume())
            let result = try await handle.result
            #expect(result.fileURL.path == dir.file("sub/renamed.bin").path)
            #expect(contentsOf(result.fileURL) == TestServer.expectedBytes(name: "moved", size: 100))
            #expect(!FileManager.default.fileExists(atPath: dir.file("moved").path))
            // Ended, it is no longer waiting.
            #expect(throws: DownloadQueue.MoveRefusal.notWaiting) {
                try queue.moveWaitingDownload(handle.id, to: taken)
            }
            other.cancel()
            atOld.cancel()
        }
    }

    @Test("a download paused with bytes of its file, or with a partial an earlier run recorded, does not move")
    func moveRefusedWithBytes() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: .nio, journal: journal)
            let size = 600_000  // above the size below which a partial is not kept
            let big = server.url(
                path: "/bytes/big", query: ["size": "\(size)", "stallAfter": "200000", "stall": "gate:s"])
            let request = DownloadRequest(url: big, destination: .directory(dir.url))
            let handle = queue.add(request)
            try await eventually("bytes written") { handle.status.progress.bytesWritten > 0 }
            #expect(handle.pause())
            try await eventually("back in the waiting order") { handle.status.position == 0 }
            var moved = request
            moved.destination = .file(dir.file("elsewhere.bin"))
            #expect(throws: DownloadQueue.MoveRefusal.holdsBytes) {
                try queue.moveWaitingDownload(handle.id, to: moved)
            }
            #expect(handle.status.request.destination == request.destination)
            server.openGate("s")
            handle.cancel()
            _ = try? await handle.result

            // A partial an earlier run left, recorded in the journal, belongs to the file it was for.
            let later = DownloadRequest(
                url: server.url(path: "/bytes/later", query: ["size": "100"]),
                destination: .directory(dir.url))
            journal.store(
                JournalRecord(
                    key: JournalKey(later), path: dir.file(".later.haul-partial").path,
                    state: .partial(validator: "\"v\"", totalBytes: 100, missingRanges: nil)))
            let waiting = queue.add(later, paused: true)
            var elsewhere = later
            elsewhere.destination = .file(dir.file("later-elsewhere.bin"))
            #expect(throws: DownloadQueue.MoveRefusal.holdsBytes) {
                try queue.moveWaitingDownload(waiting.id, to: elsewhere)
            }
            waiting.cancel()
        }
    }

    @Test("resume all admits in the waiting order, not in the order the downloads were added")
    func resumeAllInOrder() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: .nio)
            let early = queue.add(
                DownloadRequest(url: server.url(path: "/bytes/early"), destination: .directory(dir.url)), paused: true)
            let moved = queue.add(
                DownloadRequest(url: server.held("moved"), destination: .directory(dir.url)), paused: true)
            #expect(moved.move(toPosition: 0) == 0)
            #expect(queue.resumeAll() == 2)
            try await eventually("the download moved first runs") { server.heldCount(at: "g") == 1 }
            #expect(early.status.state == .waiting && early.status.position == 0)
            #expect(server.stats.requests(toPath: "/bytes/early") == 0)
            server.openGate("g")
            _ = try await moved.result
            _ = try await early.result
        }
    }

    /// Waits up to two seconds for `condition`, which may also never hold (what the waiting allows for is said where
    /// it is called).
    static func settle(_ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(2)
        while !condition(), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
    }
}
