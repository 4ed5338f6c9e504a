import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulNIO
import HTTPTypes
import HaulOperations
import HaulTestServer
import HaulTestSupport
import HaulURLSession
import Testing

/// A queue with test settings (no real backoff sleeps, or the waits of `clock`), on the AsyncHTTPClient transport
/// unless told, its downloader keeping `journal` if one is given.
func makeQueue(
    _ configuration: DownloadQueue.Configuration = .init(), retries: Int = 3,
    transport: TransportKind = .asyncHTTPClient, journal: (any Journal)? = nil,
    clock: any BackoffClock = RecordingClock()
) -> DownloadQueue {
    var engine = transport.configuration(clock: clock, retries: retries)
    engine.journal = journal
    let queue = DownloadQueue(
        downloader: Downloader(transport: transport.makeTransport(), configuration: engine),
        configuration: configuration)
    // A test that waits on a download that never ends would wait for ever: awaiting a handle's result ignores the
    // test's cancellation (as `Task.value` does), so a suite's time limit marks it failed but cannot end it. Past
    // every suite's limit, what is still running is cancelled, so the run goes on and names the test.
    Task { [weak queue] in
        try? await Task.sleep(for: .seconds(200))
        guard let queue, queue.runningCount + queue.waitingCount > 0 else { return }
        queue.cancelAll()
    }
    return queue
}

extension TestServer {
    /// `/bytes/NAME?size=SIZE` held at `gate` until the test opens it.
    func held(_ name: String, size: Int = 1000, gate: String = "g", host: String? = nil) -> URL {
        url(path: "/bytes/\(name)", query: ["size": "\(size)", "hold": gate], host: host)
    }
}

@Suite("DownloadQueue", .timeLimit(.minutes(2)))
struct DownloadQueueTests {
    // 8 on URLSession: its sessions allow 6 connections per host unless told otherwise, which capped width 8.
    @Test(
        "the highest number in flight is exactly the global limit, on each transport",
        arguments: TransportKind.allCases, [1, 3, 8])
    func globalLimit(transport: TransportKind, limit: Int) async throws {
        try await TestServer.withRunning(transport.server()) { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: limit), transport: transport)
            let handles = queue.add(
                (0..<(limit + 4)).map { DownloadRequest(url: server.held("f\($0)"), destination: .directory(dir.url)) })
            try await eventually("\(limit) requests held") { server.heldCount(at: "g") == limit }
            #expect(queue.runningCount == limit && queue.waitingCount == 4)
            server.openGate("g")
            for (index, handle) in handles.enumerated() {
                let result = try await handle.result
                #expect(contentsOf(result.fileURL) == TestServer.expectedBytes(name: "f\(index)", size: 1000))
            }
            #expect(server.stats.maxInFlight == limit)
            if limit == 1 {  // one at a time is also in submission order
                #expect(server.stats.requests.map(\.path) == (0..<5).map { "/bytes/f\($0)" })
            }
        }
    }

    @Test("the per-host limit holds with two hosts (127.0.0.1 and localhost)")
    func perHostLimit() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 10, perHostLimit: 2))
            var requests: [DownloadRequest] = []
            for index in 0..<4 {
                for host in ["127.0.0.1", "localhost"] {
                    requests.append(
                        DownloadRequest(
                            url: server.held("\(host)-\(index)", host: host), destination: .directory(dir.url)))
                }
            }
            let handles = queue.add(requests)
            try await eventually("two requests held per host") { server.heldCount(at: "g") == 4 }
            #expect(queue.runningCount == 4 && queue.waitingCount == 4)
            server.openGate("g")
            for handle in handles { _ = try await handle.result }
            #expect(server.stats.maxInFlightByHost.count == 2)
            #expect(server.stats.maxInFlightByHost.values.allSatisfy { $0 == 2 })
            #expect(dir.contents().count == 8)
        }
    }

    @Test("higher priority starts first, FIFO within a priority; a waiting download's priority can change")
    func priorityOrder() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1))
            func request(_ name: String, priority: Int = 0) -> DownloadRequest {
                DownloadRequest(
                    url: server.url(path: "/bytes/\(name)", query: ["size": "10", "hold": "g"]),
                    destination: .directory(dir.url), priority: priority)
            }
            let first = queue.add(request("first"))
            try await eventually("the first request held") { server.heldCount(at: "g") == 1 }
            let low = queue.add(request("low", priority: -1))
            let normal1 = queue.add(request("normal1"))
            let high = queue.add(request("high", priority: 10))
            let normal2 = queue.add(request("normal2"))
            let promoted = queue.add(request("promoted"))
            #expect(promoted.setPriority(5))
            #expect(!first.setPriority(5))  // running: no longer waiting
            server.openGate("g")
            for handle in [first, low, normal1, high, normal2, promoted] { _ = try await handle.result }
            #expect(
                server.stats.requests.map(\.path)
                    == ["first", "high", "promoted", "normal1", "normal2", "low"].map { "/bytes/\($0)" })
        }
    }

    @Test("pause holds admission; resume and a raised limit start waiting downloads")
    func pauseAndLimits() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1))
            queue.pause()
            let handles = queue.add(
                (0..<4).map { DownloadRequest(url: server.held("p\($0)"), destination: .directory(dir.url)) })
            #expect(queue.isPaused && queue.runningCount == 0 && queue.waitingCount == 4)
            #expect(server.stats.requestCount == 0)
            queue.resume()
            try await eventually("one request held") { server.heldCount(at: "g") == 1 }
            queue.maxConcurrentDownloads = 3
            try await eventually("three requests held") { server.heldCount(at: "g") == 3 }
            #expect(queue.runningCount == 3 && queue.waitingCount == 1)
            server.openGate("g")
            for handle in handles { _ = try await handle.result }
            #expect(server.stats.maxInFlight == 3)
        }
    }

    @Test(
        "a raised limit is the transport's too: a transport made with a lower cap opens as many connections",
        arguments: [TransportKind.asyncHTTPClient, .urlSession])
    func raisedLimitRaisesTransportCap(kind: TransportKind) async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let client = AsyncHTTPClientTransport(maximumConnectionsPerHost: 2)
            let session = URLSessionTransport(maximumConnectionsPerHost: 2)
            let queue = DownloadQueue(
                downloader: Downloader(
                    transport: kind == .urlSession ? session : client,
                    configuration: kind.configuration(clock: RecordingClock(), retries: 0)),
                configuration: .init(maxConcurrentDownloads: 2))
            let handles = queue.add(
                (0..<6).map { DownloadRequest(url: server.held("r\($0)"), destination: .directory(dir.url)) })
            try await eventually("two requests held") { server.heldCount(at: "g") == 2 }
            queue.maxConcurrentDownloads = 5
            #expect((kind == .urlSession ? session.connectionsPerHost : client.connectionsPerHost) == 5)
            try await eventually("five requests held") { server.heldCount(at: "g") == 5 }
            server.openGate("g")
            for handle in handles { _ = try await handle.result }
            #expect(server.stats.maxInFlight == 5)
            try await client.shutdown()

            // A queue wider than the cap raises it when made, through NIOTransport to its fallback too.
            let fallback = AsyncHTTPClientTransport(maximumConnectionsPerHost: 2)
            _ = DownloadQueue(
                downloader: Downloader(transport: NIOTransport(fallback: fallback)),
                configuration: .init(maxConcurrentDownloads: 3))
            #expect((fallback.connectionsPerHost ?? 0) >= 3)
            try await fallback.shutdown()
        }
    }

    @Test("cancelling a host's first waiting download while paused: the next one of that host still runs")
    func cancelFirstWaitingOfHost() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1))
            queue.pause()
            let handles = queue.add(
                ["one", "two"].map {
                    DownloadRequest(
                        url: server.url(path: "/bytes/\($0)", query: ["size": "10"]), destination: .directory(dir.url))
                })
            handles[0].cancel()
            queue.resume()
            let outcome = try await handles[1].result
            #expect(outcome.size == 10)
            await queue.waitUntilIdle()
            #expect(queue.runningCount == 0 && queue.waitingCount == 0)
            #expect(dir.contents() == ["two"])
        }
    }

    @Test("cancel all: waiting and running downloads end as cancelled, nothing left in the directory")
    func cancelAll() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 2))
            let handles = queue.add(
                (0..<5).map {
                    DownloadRequest(url: server.held("c\($0)", size: 100_000), destination: .directory(dir.url))
                })
            try await eventually("two requests held") { server.heldCount(at: "g") == 2 }
            queue.cancelAll()
            for handle in handles {
                let error = await #expect(throws: DownloadError.self) { try await handle.result }
                #expect(error?.code == .cancelled)
            }
            await queue.waitUntilIdle()
            #expect(dir.contents() == [])
            #expect(server.stats.requestCount == 2)  // the waiting three never started
            #expect(queue.progress.cancelledFiles == 5)
        }
    }

    @Test("cancelling downloadAll's task cancels its downloads at once: none of those waiting starts")
    func downloadAllCancelledAtOnce() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1))
            // Cancelled one at a time, the running one could end before the others are cancelled, and its slot
            // start one of them: the more wait, the likelier.
            let requests =
                [DownloadRequest(url: server.held("first"), destination: .directory(dir.url))]
                + (0..<2_000).map {
                    DownloadRequest(url: server.url(path: "/bytes/w\($0)"), destination: .directory(dir.url))
                }
            let all = Task { await queue.downloadAll(requests) }
            try await eventually("first held") { server.heldCount(at: "g") == 1 && queue.waitingCount == 2_000 }
            all.cancel()
            let results = await all.value
            #expect(results.count == 2_001)
            #expect(results.allSatisfy { if case .failure(let error) = $0 { error.isCancellation } else { false } })
            #expect(server.stats.requestCount == 1)
            #expect(dir.contents() == [])
            server.openGate("g")
        }
    }

    // `haul get` reads every handle's outcome right after waitUntilIdle; once, a handle still had none: the
    // outcomes were set after the lock that made the queue idle, behind the journal write of the cancellation.
    // The journal here holds that write until the test has looked, which makes the window certain.
    @Test("when waitUntilIdle returns, every handle already has its outcome")
    func outcomesBeforeIdle() async throws {
        let dir = try TemporaryDirectory()
        let journal = HeldRemovalJournal()
        var configuration = testConfiguration()
        configuration.journal = journal
        let queue = DownloadQueue(
            downloader: Downloader(
                transport: TransportKind.asyncHTTPClient.makeTransport(), configuration: configuration))
        queue.pause()
        let handles = queue.add(
            (0..<4).map {
                DownloadRequest(url: URL(string: "http://127.0.0.1:9/w\($0)")!, destination: .directory(dir.url))
            })
        Thread { queue.cancelAll() }.start()
        try await onOwnThread { journal.removalStarted.wait() }
        await queue.waitUntilIdle()
        #expect(handles.filter { $0.outcome == nil }.count == 0)
        journal.proceed.signal()
    }

    @Test("cancelling one handle cancels only that download")
    func cancelOne() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 2))
            let kept = queue.add(DownloadRequest(url: server.held("kept"), destination: .directory(dir.url)))
            let dropped = queue.add(DownloadRequest(url: server.held("dropped"), destination: .directory(dir.url)))
            try await eventually("both held") { server.heldCount(at: "g") == 2 }
            dropped.cancel()
            let error = await #expect(throws: DownloadError.self) { try await dropped.result }
            #expect(error?.code == .cancelled)
            server.openGate("g")
            _ = try await kept.result
            #expect(dir.contents() == ["kept"])
        }
    }

    @Test("cancel(where:) cancels only the matching downloads")
    func cancelMatching() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 4))
            let handles = queue.add(
                ["keep-1", "drop-1", "keep-2", "drop-2"].map {
                    DownloadRequest(url: server.held($0), destination: .directory(dir.url))
                })
            try await eventually("four held") { server.heldCount(at: "g") == 4 }
            queue.cancel { $0.url.lastPathComponent.hasPrefix("drop") }
            server.openGate("g")
            let outcomes = [await handles[0].finalOutcomeForTest(), await handles[2].finalOutcomeForTest()]
            #expect(outcomes.allSatisfy { (try? $0.get()) != nil })
            for dropped in [handles[1], handles[3]] {
                let error = await #expect(throws: DownloadError.self) { try await dropped.result }
                #expect(error?.code == .cancelled)
            }
            #expect(dir.contents() == ["keep-1", "keep-2"])
        }
    }

    @Test("a handle's events: from subscription to .finished; at once for a download that has ended")
    func handleEvents() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue()
            let handle = queue.add(
                DownloadRequest(url: server.held("ev", size: 50_000), destination: .directory(dir.url)))
            let events = handle.events  // subscribed while the request is held: nothing has finished yet
            try await eventually("held") { server.heldCount(at: "g") == 1 }
            server.openGate("g")
            var seen: [String] = []
            for await event in events {
                switch event {
                case .progress: if seen.last != "progress" { seen.append("progress") }
                case .finished(let result): seen.append("finished \(result.size)")
                case .failed(let error): seen.append("failed \(error.code)")
                default: break
                }
            }
            #expect(seen.last == "finished 50000")
            #expect(!seen.contains { $0.hasPrefix("failed") })
            var late: [String] = []
            for await event in handle.events {
                if case .finished = event { late.append("finished") } else { late.append("other") }
            }
            #expect(late == ["finished"])
        }
    }

    @Test("stop at the first failure: the rest are cancelled; continue: the rest finish")
    func failurePolicies() async throws {
        try await TestServer.withRunning { server in
            for policy in [FailurePolicy.cancelOthers, .continueOthers] {
                let dir = try TemporaryDirectory()
                server.closeGate("g")
                let queue = makeQueue(.init(maxConcurrentDownloads: 2, failurePolicy: policy))
                let held = queue.add(
                    DownloadRequest(url: server.held("held-\(policy)"), destination: .directory(dir.url)))
                try await eventually("one request held") { server.heldCount(at: "g") == 1 }
                let missing = queue.add(
                    DownloadRequest(
                        url: server.url(path: "/nothing-\(policy)", query: ["status": "404"]),
                        destination: .directory(dir.url)))
                let later = queue.add(
                    DownloadRequest(url: server.held("later-\(policy)"), destination: .directory(dir.url)))
                let failure = await #expect(throws: DownloadError.self) { try await missing.result }
                #expect(failure?.status == 404)
                server.openGate("g")
                let outcomes = [await held.finalOutcomeForTest(), await later.finalOutcomeForTest()]
                if policy == .cancelOthers {
                    #expect(outcomes.allSatisfy { (try? $0.get()) == nil })
                    #expect(dir.contents() == [])
                } else {
                    #expect(outcomes.allSatisfy { (try? $0.get()) != nil })
                    #expect(dir.contents().count == 2)
                }
            }
        }
    }

    @Test("the batch's progress counts how its downloads ended: finished (skipped included), failed, cancelled")
    func batchCounts() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            try Data("here".utf8).write(to: dir.file("there.bin"))
            server.closeGate("g")
            let queue = makeQueue(.init(maxConcurrentDownloads: 1))
            let handles = queue.add([
                DownloadRequest(
                    url: server.url(path: "/bytes/a.bin", query: ["size": "100"]), destination: .directory(dir.url)),
                DownloadRequest(
                    url: server.url(path: "/bytes/there.bin", query: ["size": "7"]), destination: .directory(dir.url),
                    conflictPolicy: .skip),
                DownloadRequest(
                    url: server.url(path: "/missing", query: ["status": "404"]), destination: .directory(dir.url)),
                DownloadRequest(url: server.held("held", size: 50), destination: .directory(dir.url)),
                DownloadRequest(
                    url: server.url(path: "/bytes/never.bin", query: ["size": "9"]), destination: .directory(dir.url)),
            ])
            try await eventually("held") { server.heldCount(at: "g") == 1 }
            queue.cancelAll()
            server.openGate("g")
            for handle in handles { _ = await handle.finalOutcomeForTest() }
            let progress = queue.progress
            let counts: [Int] = [
                progress.totalFiles, progress.finishedFiles, progress.failedFiles, progress.cancelledFiles,
            ]
            #expect(counts == [5, 2, 1, 2])
            #expect(progress.bytesWritten == 104)
        }
    }

    @Test("an identical URL and destination in flight is joined, not fetched twice")
    func joinsDuplicates() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue()
            let request = DownloadRequest(url: server.held("dup"), destination: .directory(dir.url))
            let first = queue.add(request)
            let second = queue.add(request)
            #expect(first.id == second.id)
            try await eventually("held") { server.heldCount(at: "g") == 1 }
            first.cancel()  // the other handle still wants it: the transfer goes on
            server.openGate("g")
            let result = try await second.result
            #expect(try await first.result == result)
            #expect(server.stats.requests(toPath: "/bytes/dup") == 1)
        }
    }

    @Test("batch progress: totals equal the bytes on disk; per-download events arrive in order")
    func progressTotals() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 2, progressInterval: .milliseconds(1)))
            let events = queue.events
            let collector = Task {
                var last: BatchProgress?
                var terminalByID: [DownloadID: Int] = [:]
                for await event in events {
                    switch event {
                    case .batchProgress(let batch):
                        last = batch
                        if batch.completedFiles == 4 && batch.runningFiles == 0 { return (last, terminalByID) }
                    case .download(let id, .finished), .download(let id, .failed):
                        terminalByID[id, default: 0] += 1
                    default:
                        break
                    }
                }
                return (last, terminalByID)
            }
            let sizes = [100, 70_000, 250_000, 1]
            let requests = sizes.enumerated().map { index, size in
                DownloadRequest(
                    url: server.url(path: "/bytes/s\(index)", query: ["size": "\(size)", "rate": "2000000"]),
                    destination: .directory(dir.url))
            }
            let results = await queue.downloadAll(requests)
            let (lastBatch, terminalByID) = await collector.value
            let batch = try #require(lastBatch)
            let onDisk = try dir.contents().reduce(Int64(0)) { total, name in
                total
                    + Int64(try FileManager.default.attributesOfItem(atPath: dir.file(name).path)[.size] as? Int ?? -1)
            }
            #expect(results.allSatisfy { (try? $0.get()) != nil })
            #expect(batch.finishedFiles == 4 && batch.totalFiles == 4 && batch.failedFiles == 0)
            #expect(batch.bytesWritten == onDisk && onDisk == Int64(sizes.reduce(0, +)))
            #expect(batch.totalBytes == onDisk)
            #expect(terminalByID.count == 4 && terminalByID.values.allSatisfy { $0 == 1 })
        }
    }

    @Test("a subscription takes only the kinds it asked for; finishEvents ends every stream after its buffered events")
    func eventKinds() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 2, progressInterval: .milliseconds(1)), retries: 0)
            func collect(_ stream: AsyncStream<QueueEvent>) -> Task<[QueueEvent.Kind], Never> {
                Task { await stream.reduce(into: []) { $0.append($1.kind) } }
            }
            let outcomes = collect(queue.events(including: QueueEvent.Kind.outcomes))
            let failures = collect(queue.events(including: [.failed]))
            let everything = collect(queue.events)
            let requests = [("a", "200"), ("b", "404"), ("c", "200")].map { name, status in
                DownloadRequest(
                    url: server.url(
                        path: "/bytes/\(name)", query: ["size": "300000", "rate": "3000000", "status": status]),
                    destination: .directory(dir.url))
            }
            _ = await queue.downloadAll(requests)
            await queue.waitUntilIdle()
            queue.finishEvents()  // without it the collectors would wait forever
            let (outcomeKinds, failureKinds, allKinds) = await (outcomes.value, failures.value, everything.value)
            #expect(outcomeKinds.sorted { "\($0)" < "\($1)" } == [.failed, .finished, .finished])
            #expect(failureKinds == [.failed])
            #expect(Set(allKinds).isSuperset(of: [.queued, .started, .progress, .finished, .failed, .batchProgress]))
            #expect(allKinds.filter(QueueEvent.Kind.outcomes.contains) == outcomeKinds)  // one order for all
        }
    }

    @Test("an observer hears its kinds in the order a sequence does, off the lock, may call the queue, and stops")
    func observer() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 2), retries: 0)
            func request(_ name: String, status: String = "200") -> DownloadRequest {
                DownloadRequest(
                    url: server.url(path: "/bytes/\(name)", query: ["size": "3000", "status": status]),
                    destination: .directory(dir.url))
            }
            let events = queue.events
            let streamed = Task { await events.reduce(into: [QueueEvent]()) { $0.append($1) } }
            let observed = Locked<[QueueEvent]>([])
            let added = Locked<DownloadHandle?>(nil)
            let late = request("d")
            let observation = queue.observe(including: [.queued, .started, .finished, .failed]) { event in
                // Reading and changing the queue from here would deadlock if this ran under its lock.
                _ = queue.runningCount
                let first = observed.withLock { events in
                    events.append(event)
                    return events.count == 1
                }
                // Added from inside a call: its events come after this one's, to every subscriber alike.
                if first { added.withLock { $0 = queue.add(late) } }
            }
            let results = await queue.downloadAll([request("a"), request("b", status: "404"), request("c")])
            _ = try await #require(added.withLock { $0 }).result
            // Another thread may still be sending the last outcome when the results are in: wait until it is heard.
            try await eventually("four outcomes heard") {
                observed.withLock { $0.filter { QueueEvent.Kind.outcomes.contains($0.kind) }.count } == 4
            }
            await queue.waitUntilIdle()
            observation.cancel()
            let heard = observed.withLock { $0 }
            _ = try await queue.add(request("e")).result
            queue.finishEvents()
            let all = await streamed.value
            #expect(results.map { (try? $0.get()) != nil } == [true, false, true])
            #expect(heard.filter { $0.kind == .queued }.count == 4)
            #expect(heard.filter { $0.kind == .started }.count == 4)
            #expect(heard.filter { QueueEvent.Kind.outcomes.contains($0.kind) }.count == 4)
            #expect(!heard.contains { $0.kind == .progress || $0.kind == .batchProgress })
            // The stream saw the same events in the same order, then the fifth download the observer did not hear.
            let kinds: Set<QueueEvent.Kind> = [.queued, .started, .finished, .failed]
            let sequence = all.filter { kinds.contains($0.kind) }.map { "\($0)" }
            #expect(Array(sequence.prefix(heard.count)) == heard.map { "\($0)" })
            #expect(sequence.count == heard.count + 3)
            #expect(observed.withLock { $0.count } == heard.count)
        }
    }

    @Test("async: results in input order; cancelling the awaiting task cancels the download")
    func asyncFrontEnd() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 3))
            let urls = [500_000, 10, 20_000].enumerated().map { index, size in
                server.url(path: "/bytes/o\(index)", query: ["size": "\(size)"])
            }
            let results = await queue.download(urls, into: dir.url)
            #expect(try results.map { try $0.get().fileURL.lastPathComponent } == ["o0", "o1", "o2"])

            let task = Task {
                try await queue.download(DownloadRequest(url: server.held("awaited"), destination: .directory(dir.url)))
            }
            try await eventually("held") { server.heldCount(at: "g") == 1 }
            task.cancel()
            let error = await #expect(throws: DownloadError.self) { try await task.value }
            #expect(error?.code == .cancelled)
            await queue.waitUntilIdle()
            #expect(!dir.contents().contains("awaited"))
        }
    }

    @Test("data requests: GET into memory under the queue's limits, capped by a max size")
    func dataRequests() async throws {
        try await TestServer.withRunning { server in
            let queue = makeQueue(.init(maxConcurrentDownloads: 1))
            let data = try await queue.data(
                from: server.url(path: "/bytes/json", query: ["size": "5000", "fail": "1"]))
            #expect([UInt8](data) == TestServer.expectedBytes(name: "json", size: 5000))  // after one 503, retried
            let tooBig = await #expect(throws: DownloadError.self) {
                try await queue.data(from: server.url(path: "/bytes/big", query: ["size": "5000"]), maxSize: 4999)
            }
            #expect(tooBig?.code == .sizeLimitExceeded)
            let missing = await #expect(throws: DownloadError.self) {
                try await queue.data(from: server.url(path: "/missing", query: ["status": "404"]))
            }
            #expect(missing?.status == 404)
        }
    }

    @Test("DownloadOperation through a queue: dependencies and a completion operation after all")
    func operationFrontEnd() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 4))
            let first = DownloadOperation(
                DownloadRequest(
                    url: server.url(path: "/bytes/op1", query: ["size": "100"]), destination: .directory(dir.url)),
                queue: queue)
            let rest = queue.operations(
                for: (2...3).map {
                    DownloadRequest(
                        url: server.url(path: "/bytes/op\($0)", query: ["size": "100"]),
                        destination: .directory(dir.url))
                })
            for operation in rest { operation.addDependency(first) }
            let group = OperationGroup([first] + rest)
            let lines = Locked<[String]>([])
            group.onMemberFinished = { done, total in
                lines.withLock { $0.append("\(done) / \(total) files downloaded") }
            }
            let operations = OperationQueue()
            operations.addOperations([first] + rest + [group.completionOperation {}])
            try await group.finished()
            #expect(server.stats.requests.first?.path == "/bytes/op1")
            #expect(
                lines.withLock { $0 } == ["1 / 3 files downloaded", "2 / 3 files downloaded", "3 / 3 files downloaded"])
            #expect(dir.contents() == ["op1", "op2", "op3"])
        }
    }
}

extension DownloadHandle {
    /// The outcome as a value, for tests that compare success and failure alike.
    func finalOutcomeForTest() async -> Result<DownloadResult, DownloadError> {
        do {
            return .success(try await result)
        } catch {
            return .failure(error)
        }
    }
}

/// The real AsyncHTTPClient transport plus a cancellation handler that calls back into the queue, as a user's
/// transport might (to log, say). Task.cancel() runs such handlers synchronously.
final class QueueReadingTransport: HTTPTransport {
    let inner = TransportKind.asyncHTTPClient.makeTransport()
    let queue = Locked<DownloadQueue?>(nil)
    let seenRunning = Locked<[Int]>([])

    func send(_ request: HTTPRequest, options: TransportOptions) async throws -> TransportResponse {
        try await withTaskCancellationHandler {
            try await inner.send(request, options: options)
        } onCancel: {
            if let queue = queue.withLock({ $0 }) { seenRunning.withLock { $0.append(queue.runningCount) } }
        }
    }
}

@Suite("DownloadQueue side effects", .timeLimit(.minutes(1)))
struct DownloadQueueSideEffectTests {
    @Test("cancelling runs transports' cancellation handlers after the queue's lock is released (no deadlock)")
    func cancelOutsideLock() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let transport = QueueReadingTransport()
            let queue = DownloadQueue(
                downloader: Downloader(transport: transport, configuration: testConfiguration()),
                configuration: .init(maxConcurrentDownloads: 2))
            transport.queue.withLock { $0 = queue }
            let handles = queue.add(
                (0..<3).map { DownloadRequest(url: server.held("x\($0)"), destination: .directory(dir.url)) })
            try await eventually("two held") { server.heldCount(at: "g") == 2 }
            queue.cancelAll()
            for handle in handles { _ = try? await handle.result }
            #expect(transport.seenRunning.withLock { $0.count } == 2)
            #expect(dir.contents() == [])
        }
    }
}

/// A journal in memory whose first removal waits for ``proceed``, having signalled ``removalStarted``.
final class HeldRemovalJournal: Journal {
    let removalStarted = DispatchSemaphore(value: 0)
    let proceed = DispatchSemaphore(value: 0)
    private let memory = MemoryJournal()
    private let held = Locked(false)

    func record(for key: JournalKey) -> JournalRecord? { memory.record(for: key) }
    func store(_ record: JournalRecord) { memory.store(record) }
    func allRecords() -> [JournalRecord] { memory.allRecords() }
    func remove(_ key: JournalKey) {
        let first = held.withLock { held in
            defer { held = true }
            return !held
        }
        if first {
            removalStarted.signal()
            proceed.wait()
        }
        memory.remove(key)
    }
}
