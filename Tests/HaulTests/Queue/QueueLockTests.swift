import Foundation
import Haul
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// The queue as an app uses it, attacked: consumers torn down mid-iteration, subscriptions racing completions,
/// user code that reads the queue from inside a callback. Every wait has a limit that names what was stuck.
@Suite("DownloadQueue under attack", .timeLimit(.minutes(2)))
struct QueueLockTests {
    /// Waits for `body` at most `limit`; records what was stuck and returns `nil` when it does not end. The body
    /// runs in a task of its own, left behind if it never ends (a task group would wait for it).
    static func within<Value: Sendable>(
        _ limit: Duration, _ what: String, _ body: @escaping @Sendable () async -> Value,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async -> Value? {
        let result: Value? = await withCheckedContinuation { continuation in
            let resumed = Locked(false)
            let finish: @Sendable (Value?) -> Void = { value in
                let first = resumed.withLock { resumed in
                    defer { resumed = true }
                    return !resumed
                }
                if first { continuation.resume(returning: value) }
            }
            Task { finish(await body()) }
            Task {
                try? await Task.sleep(for: limit)
                finish(nil)
            }
        }
        if result == nil { Issue.record("stuck for \(limit): \(what)", sourceLocation: sourceLocation) }
        return result
    }

    @Test("consumers of queue.events cancelled mid-iteration while downloads publish: the queue never locks up")
    func cancelConsumersWhilePublishing() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 2, progressInterval: .milliseconds(1)))
            let handles = queue.add(
                (0..<2).map {
                    DownloadRequest(
                        url: server.url(path: "/bytes/busy\($0)", query: ["size": "3000000", "rate": "3000000"]),
                        destination: .directory(dir.url))
                })
            for cycle in 0..<300 {
                let reader = Task {
                    var seen = 0
                    for await _ in queue.events { seen += 1 }
                    return seen
                }
                await Task.yield()
                reader.cancel()
                guard
                    await Self.within(.seconds(10), "cycle \(cycle): the cancelled reader ends", { await reader.value })
                        != nil,
                    await Self.within(.seconds(10), "cycle \(cycle): runningCount", { queue.runningCount }) != nil
                else { return }
            }
            queue.cancelAll()
            for handle in handles {
                _ = await Self.within(.seconds(10), "a download ends") { await handle.finalOutcomeForTest() }
            }
        }
    }

    @Test("handle.events subscribed at any moment, even as the download ends, ends with the outcome")
    func handleEventsAlwaysEnd() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 4))
            for round in 0..<100 {
                let handle = queue.add(
                    DownloadRequest(
                        url: server.url(path: "/bytes/quick\(round)", query: ["size": "10"]),
                        destination: .directory(dir.url)))
                if round.isMultiple(of: 2) { await Task.yield() }
                let last = await Self.within(.seconds(10), "round \(round): handle.events ends") {
                    var last: DownloadEvent?
                    for await event in handle.events { last = event }
                    return last
                }
                guard let last else { return }
                #expect(last?.isTerminal == true, "round \(round): \(String(describing: last))")
            }
        }
    }

    @Test("cancel(where:) runs the predicate outside the queue's lock: a predicate may read the queue")
    func predicateReadsTheQueue() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1))
            queue.pause()
            let handles = queue.add(
                (0..<3).map {
                    DownloadRequest(
                        url: server.url(path: "/bytes/p\($0)", query: ["size": "10"]), destination: .directory(dir.url))
                })
            let cancelled = await Self.within(.seconds(10), "cancel(where:) with a predicate reading the queue") {
                queue.cancel { request in
                    queue.isPaused && queue.runningCount == 0 && queue.progress.totalFiles == 3
                        && request.url.path.hasSuffix("p1")
                }
                return true
            }
            #expect(cancelled == true)
            #expect(
                handles[1].outcome.map { if case .failure(let error) = $0 { error.isCancellation } else { false } }
                    == true)
            queue.resume()
            await queue.waitUntilIdle()
            #expect(dir.contents() == ["p0", "p2"])
        }
    }
}

extension QueueLockTests {
    @Test("a request added again right after it was cancelled is a fresh download, not the dying one")
    func reAddAfterCancel() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 2))
            let request = DownloadRequest(url: server.held("again", size: 400_000), destination: .directory(dir.url))
            let first = queue.add(request)
            try await eventually("the first is held") { server.heldCount(at: "g") == 1 }
            first.cancel()
            let second = queue.add(request)
            #expect(second.id != first.id)
            server.openGate("g")
            let firstOutcome = await Self.within(.seconds(20), "the cancelled one ends") {
                await first.finalOutcomeForTest()
            }
            let secondOutcome = await Self.within(.seconds(20), "the fresh one ends") {
                await second.finalOutcomeForTest()
            }
            #expect(
                firstOutcome.map { if case .failure(let error) = $0 { error.isCancellation } else { false } } == true)
            let result = try #require(try secondOutcome?.get())
            #expect(
                { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "again", size: 400_000) }(),
                "not the server's bytes")
            #expect(dir.contents() == ["again"])
        }
    }

    @Test("a cancelled queue.download() that shares its download returns cancelled at once; the other caller's goes on")
    func cancelOneOfTwoCallers() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 2))
            let request = DownloadRequest(url: server.held("shared", size: 1000), destination: .directory(dir.url))
            let leaving = Task { () async throws(DownloadError) -> DownloadResult in try await queue.download(request) }
            let staying = Task { () async throws(DownloadError) -> DownloadResult in try await queue.download(request) }
            try await eventually("one shared request held") { server.heldCount(at: "g") == 1 }
            leaving.cancel()
            let left = await Self.within(.seconds(10), "the cancelled caller returns while the download is held") {
                await leaving.result
            }
            let leftCode: DownloadError.Code? =
                if case .failure(let error) = left { (error as? DownloadError)?.code } else { nil }
            #expect(leftCode == .cancelled, "\(String(describing: left))")
            server.openGate("g")
            let stayed = await Self.within(.seconds(10), "the other caller's download ends") { await staying.result }
            let result = try #require(try stayed?.get())
            #expect(contentsOf(result.fileURL) == TestServer.expectedBytes(name: "shared", size: 1000))
            #expect(server.stats.requestCount == 1)
        }
    }
}

extension QueueLockTests {
    @Test(
        "a storm of adds, joins, cancels, re-adds, limit and priority changes, pauses: the queue drains, files whole",
        arguments: 0..<3)
    func storm(seed: UInt64) async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 3, perHostLimit: 2))
            var state = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            func next(_ bound: Int) -> Int {
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                return Int((state >> 33) % UInt64(bound))
            }
            func request(_ index: Int) -> DownloadRequest {
                var query = ["size": "\(20_000 + index * 7_000)"]
                if index.isMultiple(of: 3) { query["rate"] = "2000000" }
                return DownloadRequest(
                    url: server.url(path: "/bytes/s\(index)", query: query), destination: .directory(dir.url),
                    conflictPolicy: .skip, priority: index % 3)
            }
            var handles: [DownloadHandle] = []
            for step in 0..<300 {
                switch next(9) {
                case 0, 1, 2: handles.append(queue.add(request(next(12))))
                case 3: if !handles.isEmpty { handles[next(handles.count)].cancel() }
                case 4: queue.maxConcurrentDownloads = 1 + next(4)
                case 5: queue.perHostLimit = next(3) == 0 ? nil : 1 + next(3)
                case 6: if !handles.isEmpty { handles[next(handles.count)].setPriority(next(5) - 2) }
                case 7: if next(2) == 0 { queue.pause() } else { queue.resume() }
                default:
                    let doomed = "s\(next(12))"
                    queue.cancel { $0.url.lastPathComponent == doomed }
                }
                if step.isMultiple(of: 20) { try await Task.sleep(for: .milliseconds(5)) }
            }
            queue.resume()
            let drained = await Self.within(.seconds(60), "seed \(seed): the queue drains") {
                await queue.waitUntilIdle()
                return true
            }
            guard drained == true else { return }
            #expect(queue.runningCount == 0 && queue.waitingCount == 0)
            for (index, handle) in handles.enumerated() {
                #expect(handle.outcome != nil, "seed \(seed): handle \(index) has no outcome")
            }
            for name in dir.contents() {
                #expect(!name.hasPrefix("."), "seed \(seed): \(name) left behind")
                guard let index = Int(name.dropFirst()) else { continue }
                #expect(
                    contentsOf(dir.file(name)) == TestServer.expectedBytes(name: name, size: 20_000 + index * 7_000),
                    "seed \(seed): \(name)")
            }
        }
    }
}

/// A journal whose `allRecords()` reads its records, then waits for ``proceed`` before returning them: a scan that
/// reads a download's record just before the download ends.
final class SlowScanJournal: Journal {
    let scanned = DispatchSemaphore(value: 0)
    let proceed = DispatchSemaphore(value: 0)
    private let memory = MemoryJournal()

    func record(for key: JournalKey) -> JournalRecord? { memory.record(for: key) }
    func store(_ record: JournalRecord) { memory.store(record) }
    func remove(_ key: JournalKey) { memory.remove(key) }
    func allRecords() -> [JournalRecord] {
        let records = memory.allRecords()
        scanned.signal()
        proceed.wait()
        return records
    }
}

extension QueueLockTests {
    @Test("resumeUnfinished() while a download cancelled through the queue still ends does not bring it back")
    func resumeWhileCancelledEnds() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let clock = GatedClock()
            let queue = makeQueue(
                .init(maxConcurrentDownloads: 1), retries: 1, transport: .nio, journal: MemoryJournal(), clock: clock)
            // Its first attempt fails (503): its run waits before the next, and ends only when the clock lets it.
            let handle = queue.add(
                DownloadRequest(
                    url: server.url(path: "/bytes/c", query: ["status": "503"]), destination: .directory(dir.url)))
            await clock.entered.wait()
            handle.cancel()
            // Its record still reads as unfinished, but the caller gave up on it.
            #expect(queue.resumeUnfinished().isEmpty)
            clock.release.open()
            await queue.waitUntilIdle()
            #expect(server.stats.requests(toPath: "/bytes/c") == 1)
        }
    }

    @Test("resumeUnfinished() concurrent with a download that fails meanwhile does not fetch it a second time")
    func resumeRacingAFailure() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = SlowScanJournal()
            var configuration = testConfiguration(retries: 0)
            configuration.journal = journal
            let queue = DownloadQueue(
                downloader: Downloader(
                    transport: TransportKind.asyncHTTPClient.makeTransport(), configuration: configuration))
            let failing = queue.add(
                DownloadRequest(
                    url: server.url(path: "/gone", query: ["status": "404", "hold": "g"]),
                    destination: .directory(dir.url)
                ))
            try await eventually("the request is held") { server.heldCount(at: "g") == 1 }
            // The scan reads the record as requested (unfinished), then the download fails before the scan returns.
            let resumed = Task { try await onOwnThread { queue.resumeUnfinished().count } }
            try await onOwnThread { journal.scanned.wait() }
            server.openGate("g")
            _ = await failing.finalOutcomeForTest()
            journal.proceed.signal()
            #expect(try await resumed.value == 0)
            await queue.waitUntilIdle()
            #expect(server.stats.requests(toPath: "/gone") == 1)
        }
    }
}

extension QueueLockTests {
    // The server runs on one event loop thread: it then handles the close of an old connection before a request
    // that arrived after it, so its count is the order of events on the wire, not the luck of two server threads.
    // NIOTransport only: AsyncHTTPClient and URLSession close a cancelled request's connection on their own
    // threads after reporting the cancellation and say nothing when they have, so through them the server does
    // count one more now and then (measured: 2 and 4 runs of 15) — documented on both transports.
    // With `.powerLoss` downloads run on Swift's global executor, not on their connection's event loop: the close
    // is then another thread's job, which the freed slot could overtake.
    @Test(
        "a cancelled download's connection is closed before its slot goes to the next: the server never counts more",
        arguments: [Downloader.Durability.processCrash, .powerLoss])
    func cancelledConnectionClosedBeforeSlotIsFreed(durability: Downloader.Durability) async throws {
        try await TestServer.withRunning(.init(eventLoopThreads: 1)) { server in
            let dir = try TemporaryDirectory()
            let limit = 2
            let total = 80
            var configuration = testConfiguration()
            configuration.durability = durability
            let queue = DownloadQueue(
                downloader: Downloader(transport: TransportKind.nio.makeTransport(), configuration: configuration),
                configuration: .init(maxConcurrentDownloads: limit))
            let handles = queue.add(
                (0..<total).map { DownloadRequest(url: server.held("c\($0)"), destination: .directory(dir.url)) })
            // Downloads start in order: in cycle c, c..<c+limit run and the server has had c+limit requests.
            for cycle in 0..<(total - limit) {
                try await eventually("cycle \(cycle): request \(cycle + limit) arrives") {
                    server.stats.requestCount >= cycle + limit
                }
                handles[cycle].cancel()
            }
            server.openGate("g")
            for handle in handles {
                _ = await Self.within(.seconds(10), "a download ends") { await handle.finalOutcomeForTest() }
            }
            #expect(server.stats.maxInFlight == limit)
            #expect(server.stats.requestCount == total)
        }
    }
}
