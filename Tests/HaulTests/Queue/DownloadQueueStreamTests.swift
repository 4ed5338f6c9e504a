import Foundation
import Haul
import HaulTestServer
import HaulTestSupport
import Testing

/// What ``CountedRequests`` throws.
struct ListBroken: Error {}

/// Requests read one at a time, counting how many were read; optionally throwing after some.
struct CountedRequests: AsyncSequence, Sendable {

    let requests: [DownloadRequest]
    let read = Locked(0)
    var throwsAfter: Int?

    struct AsyncIterator: AsyncIteratorProtocol {
        let sequence: CountedRequests
        var index = 0

        mutating func next() async throws -> DownloadRequest? {
            if let limit = sequence.throwsAfter, index == limit { throw ListBroken() }
            guard index < sequence.requests.count else { return nil }
            defer { index += 1 }
            sequence.read.withLock { $0 += 1 }
            return sequence.requests[index]
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(sequence: self) }
}

@Suite("DownloadQueue: streaming requests", .timeLimit(.minutes(2)))
struct DownloadQueueStreamTests {
    @Test("cancelling the streaming task cancels the downloads it holds at once: none of those waiting starts")
    func cancelledAtOnce() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1))
            let source = CountedRequests(
                requests: [DownloadRequest(url: server.held("first"), destination: .directory(dir.url))]
                    + (0..<2_000).map {
                        DownloadRequest(url: server.url(path: "/bytes/w\($0)"), destination: .directory(dir.url))
                    })
            let results = Locked<[Result<DownloadResult, DownloadError>]>([])
            let run = Task {
                try await queue.download(source, window: 2_001) { finished in
                    results.withLock { $0.append(finished.result) }
                }
            }
            try await eventually("first held") { server.heldCount(at: "g") == 1 && queue.waitingCount == 2_000 }
            run.cancel()
            await #expect(throws: CancellationError.self) { try await run.value }
            let all = results.withLock { $0 }
            #expect(all.count == 2_001)
            #expect(all.allSatisfy { if case .failure(let error) = $0 { error.isCancellation } else { false } })
            #expect(server.stats.requestCount == 1)
            #expect(dir.contents() == [])
            server.openGate("g")
        }
    }

    @Test("the sequence is read only as far as the window; the queue's limit holds; every result comes once")
    func backPressure() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 2))
            let source = CountedRequests(
                requests: (0..<30).map { DownloadRequest(url: server.held("f\($0)"), destination: .directory(dir.url)) }
            )
            let taken = Locked(0)
            let maxLead = Locked(0)
            let consumer = Task {
                var names: [String] = []
                for try await finished in queue.downloads(source, window: 5) {
                    // This result is taken: what is read beyond the results taken is held, at most the window.
                    taken.withLock { $0 += 1 }
                    let lead = source.read.withLock { $0 } - taken.withLock { $0 }
                    maxLead.withLock { $0 = max($0, lead) }
                    names.append(try finished.result.get().fileURL.lastPathComponent)
                    #expect(contentsOf(finished.request.plannedFileURL!) != nil)
                }
                return names
            }
            try await eventually("two requests held") { server.heldCount(at: "g") == 2 }
            try await eventually("three waiting") { queue.waitingCount == 3 }
            // Nothing taken yet: exactly the window was read, and no more while the downloads wait.
            try await Task.sleep(for: .milliseconds(100))
            #expect(source.read.withLock { $0 } == 5)
            server.openGate("g")
            let names = try await consumer.value
            #expect(Set(names) == Set((0..<30).map { "f\($0)" }) && names.count == 30)
            #expect(maxLead.withLock { $0 } <= 5)
            #expect(server.stats.maxInFlight == 2)
        }
    }

    @Test("one at a time runs in the sequence's order; per-host limits hold")
    func orderAndPerHost() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let serial = makeQueue(.init(maxConcurrentDownloads: 1))
            let names = (0..<12).map { "s\($0)" }
            let ordered = CountedRequests(
                requests: names.map {
                    DownloadRequest(
                        url: server.url(path: "/bytes/\($0)", query: ["size": "100"]), destination: .directory(dir.url))
                })
            var finished: [String] = []
            for try await result in serial.downloads(ordered, window: 3) {
                finished.append(try result.result.get().fileURL.lastPathComponent)
            }
            #expect(finished == names)
            #expect(server.stats.requests.map(\.path) == names.map { "/bytes/\($0)" })

            let perHost = makeQueue(.init(maxConcurrentDownloads: 6, perHostLimit: 2))
            let hosts = ["127.0.0.1", "localhost"]
            let mixed = CountedRequests(
                requests: (0..<24).map { index in
                    DownloadRequest(
                        url: server.url(
                            path: "/bytes/h\(index)", query: ["size": "1000", "delay": "20"], host: hosts[index % 2]),
                        destination: .directory(dir.url))
                })
            var count = 0
            for try await result in perHost.downloads(mixed, window: 8) {
                _ = try result.result.get()
                count += 1
            }
            #expect(count == 24)
            #expect(server.stats.maxInFlightByHost.values.allSatisfy { $0 <= 2 })
        }
    }

    @Test("one at a time: a result is handed over before the next download starts, however long its handler takes")
    func resultBeforeNextStarts() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let serial = makeQueue(.init(maxConcurrentDownloads: 1))
            let names = ["first", "second", "third"]
            let requests = CountedRequests(
                requests: names.map {
                    DownloadRequest(
                        url: server.url(path: "/bytes/\($0)", query: ["size": "100"]), destination: .directory(dir.url))
                })
            // The first handler takes long enough for the next (small) download to have ended meanwhile, had it
            // started.
            let handled = Locked<[String]>([])
            let requestsWhenHandled = Locked<[Int]>([])
            try await serial.download(requests, window: 3) { finished in
                let name = finished.request.url.lastPathComponent
                requestsWhenHandled.withLock { $0.append(server.stats.requestCount) }
                if name == "first" { Thread.sleep(forTimeInterval: 0.3) }
                handled.withLock { $0.append(name) }
            }
            #expect(handled.withLock { $0 } == names)
            // Each handler ran before the next download's request was sent.
            #expect(requestsWhenHandled.withLock { $0 } == [1, 2, 3])
        }
    }

    @Test("leaving the loop cancels the downloads held and reads no further; they can be added again")
    func leaveAndReAdd() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 4))
            func request(_ index: Int) -> DownloadRequest {
                let url =
                    index < 3
                    ? server.url(path: "/bytes/f\(index)", query: ["size": "1000"])
                    : server.held("f\(index)", size: 200_000)
                return DownloadRequest(url: url, destination: .directory(dir.url))
            }
            let source = CountedRequests(requests: (0..<20).map(request))
            var taken = 0
            for try await finished in queue.downloads(source, window: 6) {
                _ = try finished.result.get()
                taken += 1
                if taken == 3 { break }
            }
            try await eventually("the held downloads cancelled") { queue.runningCount == 0 && queue.waitingCount == 0 }
            #expect(source.read.withLock { $0 } <= 3 + 6)
            #expect(dir.contents().sorted() == ["f0", "f1", "f2"])  // no partial file, nothing half-written

            server.openGate("g")
            let again = CountedRequests(requests: (3..<20).map(request))
            var names: [String] = []
            for try await finished in queue.downloads(again) {
                names.append(try finished.result.get().fileURL.lastPathComponent)
            }
            #expect(Set(names) == Set((3..<20).map { "f\($0)" }))
            #expect(dir.contents().count == 20)
        }
    }

    @Test("a sequence that throws: the downloads read before it are delivered, then its error")
    func sourceThrows() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 2))
            var source = CountedRequests(
                requests: (0..<10).map {
                    DownloadRequest(
                        url: server.url(path: "/bytes/t\($0)", query: ["size": "100"]), destination: .directory(dir.url)
                    )
                })
            source.throwsAfter = 5
            var delivered = 0
            await #expect(throws: ListBroken.self) {
                for try await finished in queue.downloads(source, window: 10) {
                    _ = try finished.result.get()
                    delivered += 1
                }
            }
            #expect(delivered == 5)
            #expect(server.stats.requestCount == 5)
        }
    }

    @Test("cancelling the iterating task cancels what it holds and throws CancellationError")
    func cancelTask() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 3))
            let source = CountedRequests(
                requests: (0..<10).map { DownloadRequest(url: server.held("c\($0)"), destination: .directory(dir.url)) }
            )
            let consumer = Task {
                for try await _ in queue.downloads(source, window: 4) {}
            }
            try await eventually("three requests held") { server.heldCount(at: "g") == 3 }
            consumer.cancel()
            await #expect(throws: CancellationError.self) { try await consumer.value }
            try await eventually("nothing left in the queue") { queue.runningCount == 0 && queue.waitingCount == 0 }
            #expect(source.read.withLock { $0 } == 4)
            #expect(dir.contents().isEmpty)
        }
    }

    @Test("results handed to a callback: each download read gets one, a cancelled one too; the call waits for them")
    func callback() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 3))
            let quick = CountedRequests(
                requests: (0..<40).map {
                    DownloadRequest(
                        url: server.url(path: "/bytes/q\($0)", query: ["size": "500"]), destination: .directory(dir.url)
                    )
                })
            let names = Locked<[String]>([])
            try await queue.download(quick, window: 4) { finished in
                if case .success(let result) = finished.result {
                    names.withLock { $0.append(result.fileURL.lastPathComponent) }
                }
            }
            #expect(names.withLock { $0.sorted() } == (0..<40).map { "q\($0)" }.sorted())
            #expect(server.stats.maxInFlight <= 3)

            let held = CountedRequests(
                requests: (0..<10).map { DownloadRequest(url: server.held("h\($0)"), destination: .directory(dir.url)) }
            )
            let outcomes = Locked<[Bool]>([])
            let caller = Task {
                try await queue.download(held, window: 5) { finished in
                    outcomes.withLock { $0.append((try? finished.result.get()) != nil) }
                }
            }
            try await eventually("three requests held") { server.heldCount(at: "g") == 3 }
            caller.cancel()
            await #expect(throws: CancellationError.self) { try await caller.value }
            // Returned only once every download read had ended, each with its (cancelled) result.
            #expect(held.read.withLock { $0 } == 5)
            #expect(outcomes.withLock { $0 } == Array(repeating: false, count: 5))
            #expect(queue.runningCount == 0 && queue.waitingCount == 0)
        }
    }
}
