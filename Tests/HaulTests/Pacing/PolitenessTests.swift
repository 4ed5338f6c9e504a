import Foundation
import Haul
import HaulNIO
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// Limits servers ask for and deadlines, measured where they matter: the bandwidth and the request times at the
/// server, the time a download may take at the caller. Bounds are generous where real time is involved; the rules
/// themselves are tested on an injected clock (`ThrottleTests`).
@Suite("Politeness and time limits", .serialized, .timeLimit(.minutes(2)))
struct PolitenessTests {
    func downloader(
        retries: Int = 0, clock: any BackoffClock = RecordingClock(), _ change: (inout Downloader.Configuration) -> Void
    ) -> Downloader {
        var configuration = TransportKind.nio.configuration(clock: clock, retries: retries)
        change(&configuration)
        return Downloader(transport: NIOTransport(), configuration: configuration)
    }

    @Test("downloads sharing a bandwidth limit stay within 5% of it over every 2 s window, measured at the server")
    func bandwidthLimitAtTheServer() async throws {
        // The server's timeline records what it hands to its kernel: a fixed send buffer (the kernel doubles it) bounds
        // how far that runs ahead of what reached the client, and is allowed for below. Large enough for the rate:
        // a small one waits for acknowledgements.
        let sendBuffer = 256 << 10
        let configuration = TestServer.Configuration(sendBufferSize: sendBuffer, recordsBodyTimeline: true)
        try await TestServer.withRunning(configuration) { server in
            let dir = try TemporaryDirectory()
            let rate: Int64 = 8 << 20
            let size = 24 << 20  // two of them: 48 MiB, 6 s at the rate
            let downloader = downloader { $0.maxBytesPerSecond = rate }
            try await withThrowingTaskGroup(of: DownloadResult.self) { group in
                for index in 0..<2 {
                    let request = DownloadRequest(
                        url: server.url(path: "/bytes/limited\(index)", query: ["size": "\(size)"]),
                        destination: .directory(dir.url))
                    group.addTask { try await downloader.download(request) }
                }
                for try await result in group { #expect(result.size == Int64(size)) }
            }
            let timeline = server.stats.bodyTimeline
            let total = timeline.reduce(0) { $0 + $1.bytes }
            #expect(total == 2 * size)
            // The kernel buffers between the server and the limiter (the server's send buffers, the client's receive
            // buffers, which Linux grows on its own) fill in the first instant: bytes the limiter has not let through
            // yet. Windows start once they are full, half a second in; from then on the server writes only as fast as
            // the limiter reads, and what the buffers hold changes by at most the server's part, allowed for below.
            let first = try #require(timeline.first).time
            let last = try #require(timeline.last).time
            let settled = try #require(timeline.firstIndex { $0.time - first >= .milliseconds(500) })
            let settledBytes = timeline[settled...].reduce(0) { $0 + $1.bytes }
            let average = Double(settledBytes) / (last - timeline[settled].time).seconds
            #expect(average <= Double(rate) * 1.05 && average >= Double(rate) * 0.7, "average \(average) B/s")
            // Every 2 s window that starts at a write from then on: at most 5% over the rate.
            var end = settled
            var inWindow = 0
            var worst = 0
            for start in timeline.indices.dropFirst(settled) {
                while end < timeline.count, timeline[end].time - timeline[start].time <= .seconds(2) {
                    inWindow += timeline[end].bytes
                    end += 1
                }
                worst = max(worst, inWindow)
                inWindow -= timeline[start].bytes
            }
            let serverBuffers = 2 * (2 * sendBuffer)
            #expect(Double(worst - serverBuffers) <= Double(rate) * 2 * 1.05, "\(worst) bytes in a 2 s window")
        }
    }

    @Test("a request's own bandwidth limit holds it alone")
    func ownLimit() async throws {
        let configuration = TestServer.Configuration(sendBufferSize: 64 << 10, recordsBodyTimeline: true)
        try await TestServer.withRunning(configuration) { server in
            let dir = try TemporaryDirectory()
            var slow = DownloadRequest(
                url: server.url(path: "/bytes/own-slow", query: ["size": "1000000"]), destination: .directory(dir.url))
            slow.maxBytesPerSecond = 400_000
            let fast = DownloadRequest(
                url: server.url(path: "/bytes/own-fast", query: ["size": "1000000"]), destination: .directory(dir.url))
            let downloader = downloader { _ in }
            async let slowDone = downloader.download(slow)
            _ = try await downloader.download(fast)
            let fastEnd = ContinuousClock.now
            _ = try await slowDone
            let slowEnd = ContinuousClock.now
            let writes = server.stats.bodyTimeline.filter { $0.path == "/bytes/own-slow" }
            let span = try #require(writes.last).time - #require(writes.first).time
            #expect(span >= .milliseconds(1800), "\(span)")  // 1 MB at 400 kB/s, less a window sent ahead
            #expect(slowEnd - fastEnd >= .milliseconds(500))
        }
    }

    @Test("a request rate spaces the request starts the server sees, for all downloads together")
    func requestRate() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = DownloadQueue(
                downloader: downloader { $0.pacing.rate = RequestRate(count: 5, per: .seconds(1)) },
                configuration: .init(maxConcurrentDownloads: 6))
            let requests = (0..<6).map {
                DownloadRequest(
                    url: server.url(path: "/bytes/r\($0)", query: ["size": "100"]), destination: .directory(dir.url))
            }
            for result in await queue.downloadAll(requests) { _ = try result.get() }
            // The client spaces the starts 200 ms apart; what a busy machine adds between a start and its arrival at
            // the server is allowed for in each gap, and cannot shorten the whole.
            let times = server.stats.requests.map(\.receivedAt)
            #expect(times.count == 6)
            for index in 1..<times.count {
                #expect(times[index] - times[index - 1] >= .milliseconds(100), "request \(index)")
            }
            #expect(times[5] - times[0] >= .milliseconds(950))
        }
    }

    @Test("a wait between requests to one host holds back that host's requests, not another host's")
    func perHostWait() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = DownloadQueue(
                downloader: downloader { $0.pacing.perHostWait = .milliseconds(400) },
                configuration: .init(maxConcurrentDownloads: 6))
            var requests: [DownloadRequest] = []
            for index in 0..<3 {
                for host in ["127.0.0.1", "localhost"] {
                    requests.append(
                        DownloadRequest(
                            url: server.url(path: "/bytes/w\(index)", query: ["size": "100"], host: host),
                            destination: .directory(dir.url.appendingPathComponent(host))))
                }
            }
            for host in ["127.0.0.1", "localhost"] {
                try FileManager.default.createDirectory(
                    at: dir.url.appendingPathComponent(host), withIntermediateDirectories: true)
            }
            for result in await queue.downloadAll(requests) { _ = try result.get() }
            let byHost = Dictionary(grouping: server.stats.requests) { $0.host?.hasPrefix("localhost") == true }
            for (_, requests) in byHost {
                let times = requests.map(\.receivedAt).sorted()
                #expect(times.count == 3)
                for index in 1..<times.count { #expect(times[index] - times[index - 1] >= .milliseconds(250)) }
                #expect(times[2] - times[0] >= .milliseconds(750))
            }
            // The two hosts' first requests did not wait for each other.
            let firsts = byHost.values.compactMap { $0.map(\.receivedAt).min() }
            #expect(firsts.count == 2)
            #expect(abs((firsts[0] - firsts[1]).seconds) < 0.3)
        }
    }

    @Test("Retry-After on a 503 holds the host for every download, not only the one that got it")
    func retryAfterHoldsTheHost() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let downloader = downloader(retries: 2) { _ in }
            let busy = DownloadRequest(
                url: server.url(path: "/bytes/busy", query: ["size": "100", "fail": "1", "retryAfter": "1"]),
                destination: .directory(dir.url))
            let other = DownloadRequest(
                url: server.url(path: "/bytes/other", query: ["size": "100"]), destination: .directory(dir.url))
            let otherEvents = EventLog()
            let refused = Gate<Void>()
            async let first = downloader.download(busy) { event in
                if case .retrying = event { refused.open() }
            }
            await refused.wait()
            let second = try await downloader.download(other, onEvent: otherEvents.record)
            _ = try await first
            #expect(!second.skipped)
            let requests = server.stats.requests
            let busyFirst = try #require(requests.first { $0.path == "/bytes/busy" }).receivedAt
            let otherAt = try #require(requests.first { $0.path == "/bytes/other" }).receivedAt
            #expect(otherAt - busyFirst >= .milliseconds(900), "\(otherAt - busyFirst)")
            #expect(
                otherEvents.all.contains {
                    if case .throttled(reason: .retryAfter, _) = $0 { true } else { false }
                })
        }
    }

    @Test("a time limit ends a download that retries forever, and one whose transfer stalls, as timedOut")
    func timeLimit() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let forever = DownloadRequest(
                url: server.url(path: "/bytes/never", query: ["status": "503"]), destination: .directory(dir.url))
            let retrying = downloader(retries: 1_000_000, clock: ContinuousBackoffClock()) {
                $0.retryPolicy.initialDelay = .milliseconds(50)
                $0.retryPolicy.maxDelay = .milliseconds(100)
                $0.timeLimit = .seconds(1)
            }
            for (downloader, request) in [
                (retrying, forever),
                (
                    downloader { $0.timeLimit = .seconds(1) },
                    DownloadRequest(
                        url: server.url(path: "/bytes/stuck", query: ["size": "100000", "stallAfter": "1000"]),
                        destination: .directory(dir.url))
                ),
            ] {
                let started = ContinuousClock.now
                let error = try await #require(throws: DownloadError.self) { try await downloader.download(request) }
                let elapsed = ContinuousClock.now - started
                #expect(error.code == .timedOut, "\(error)")
                #expect(elapsed >= .milliseconds(800) && elapsed < .seconds(10), "\(elapsed)")
            }
            #expect(server.stats.requests(toPath: "/bytes/never") >= 1)

            // A request's own limit wins over the configuration's.
            var own = forever
            own.timeLimit = .milliseconds(300)
            let started = ContinuousClock.now
            let error = try await #require(throws: DownloadError.self) { try await retrying.download(own) }
            #expect(error.code == .timedOut)
            #expect(ContinuousClock.now - started < .milliseconds(900))
        }
    }

    @Test("a transfer slower than the minimum speed is stopped as tooSlow, retried, and resumed where it was")
    func minimumSpeed() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 200_000
            // The first request drips 2,000 bytes a second: never a stall, far below the minimum.
            let request = DownloadRequest(
                url: server.url(path: "/bytes/drip", query: ["size": "\(size)", "rate": "2000", "rateTimes": "1"]),
                destination: .directory(dir.url))
            let events = EventLog()
            let result = try await downloader(retries: 2) {
                $0.minimumSpeed = MinimumSpeed(bytesPerSecond: 20_000, for: .seconds(1))
            }.download(request, onEvent: events.record)
            #expect(
                { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "drip", size: size) }(),
                "not the server's bytes")
            let retried = events.all.compactMap { if case .retrying(_, _, let error) = $0 { error } else { nil } }
            #expect(retried.map(\.code) == [.tooSlow])
            let requests = server.stats.requests
            #expect(requests.count == 2)
            let range = try #require(requests.last?.range)
            let from = try #require(Int(range.dropFirst("bytes=".count).dropLast()))
            #expect(from > 0 && from < 20_000, "\(range)")
        }
    }

    @Test(
        "the queue's events carry waits and revalidations to a subscriber that asks for them alone; an Operation honours a time limit"
    )
    func frontEnds() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = DownloadQueue(
                downloader: downloader { $0.pacing.perHostWait = .milliseconds(200) },
                configuration: .init(maxConcurrentDownloads: 3))
            let events = queue.events(including: [.throttled])
            let collected = Task {
                var kinds: [QueueEvent.Kind] = []
                for await event in events { kinds.append(event.kind) }
                return kinds
            }
            let requests = (0..<3).map {
                DownloadRequest(
                    url: server.url(path: "/bytes/q\($0)", query: ["size": "100"]), destination: .directory(dir.url))
            }
            for result in await queue.downloadAll(requests) { _ = try result.get() }
            await queue.waitUntilIdle()
            queue.finishEvents()
            let kinds = await collected.value
            #expect(kinds.count == 2 && kinds.allSatisfy { $0 == .throttled }, "\(kinds)")

            var slow = DownloadRequest(
                url: server.url(path: "/bytes/op", query: ["size": "100000", "stallAfter": "10"]),
                destination: .directory(dir.url))
            slow.timeLimit = .milliseconds(500)
            let operation = DownloadOperation(slow, downloader: downloader { _ in })
            let operations = OperationQueue()
            operations.addOperation(operation)
            try await [operation].allFinished()
            #expect(throws: DownloadError.self) { try operation.result?.get() }
            if case .failure(let error) = operation.result { #expect((error as? DownloadError)?.code == .timedOut) }
        }
    }
}
