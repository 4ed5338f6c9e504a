import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

@testable import Haul

/// Bandwidth limits, a third look: a rate changed while a debt is paid, and a download whose limit is set again and
/// again while it runs.
@Suite("Bandwidth, a third look", .timeLimit(.minutes(2)))
struct BandwidthThirdReviewTests {
    let start = ContinuousClock.now

    @Test("a change of rate keeps the time already waited: only what is still owed is paid at the new rate")
    func changeKeepsTimeWaited() {
        let bucket = TokenBucket(bytesPerSecond: 1000, now: start)
        // 64 000 bytes taken at once (a big chunk): 64 s to pay at 1000 B/s.
        #expect(bucket.take(64_000, now: start) == .seconds(64))
        // 60 s later 4000 bytes are still owed; raised to 2000 B/s they take 2 s, not the 32 s the whole debt would.
        bucket.setRate(2000, now: start + .seconds(60))
        #expect(bucket.remainingDelay(now: start + .seconds(60)) == .seconds(2))
        // Lowered instead, what is left is paid at the lower rate.
        let lowered = TokenBucket(bytesPerSecond: 1000, now: start)
        _ = lowered.take(10_000, now: start)
        lowered.setRate(500, now: start + .seconds(8))
        #expect(lowered.remainingDelay(now: start + .seconds(8)) == .seconds(4))
    }

    @Test("the same rate set again and again while a debt is paid: the debt is paid on time")
    func sameRateSetRepeatedly() {
        let bucket = TokenBucket(bytesPerSecond: 1000, now: start)
        #expect(bucket.take(2000, now: start) == .seconds(2))
        // An owner that sends the limit it shows every 100 ms (a UI, a script polling changeOption).
        for tenth in 1...30 { bucket.setRate(1000, now: start + .milliseconds(100 * tenth)) }
        #expect(bucket.remainingDelay(now: start + .seconds(3)) == .zero)
    }

    @Test(
        "a download whose limit is set again and again to the same rate still moves at about that rate",
        arguments: TransportKind.allCases)
    func repeatedLimitKeepsMoving(transport: TransportKind) async throws {
        try await TestServer.withRunning(transport.server()) { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: transport)
            let rate: Int64 = 40_000
            var request = DownloadRequest(
                url: server.url(path: "/bytes/again", query: ["size": "2000000"]), destination: .directory(dir.url))
            request.maxBytesPerSecond = rate
            let handle = queue.add(request)
            try await eventually("bytes written") { handle.status.progress.bytesWritten > 0 }
            let before = handle.status.progress.bytesWritten
            let began = ContinuousClock.now
            // Set again every 10 ms for 4 s, always to the same rate.
            while ContinuousClock.now - began < .seconds(4) {
                #expect(handle.setMaxBytesPerSecond(rate))
                try await Task.sleep(for: .milliseconds(10))
            }
            let moved = handle.status.progress.bytesWritten - before
            handle.cancel()
            _ = try? await handle.result
            // 160 000 bytes at the rate; a quarter of that is a loose floor on a busy machine. A setting that starts
            // the wait over each time holds the download at its first chunk.
            #expect(moved >= 40_000, "\(moved) bytes in 4 s at \(rate) B/s")
            #expect(moved <= 4 * rate + 2 * Int64(Downloader.receiveWindow(forRate: rate)) + 64 << 10)
        }
    }

    @Test("a request's own limit of 0 or below is refused, naming it, not run at 1 byte a second", arguments: [0, -5])
    func nonPositiveOwnLimitRefused(limit: Int64) async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(transport: .nio)
            var request = DownloadRequest(
                url: server.url(path: "/bytes/zero", query: ["size": "100000"]), destination: .directory(dir.url))
            request.maxBytesPerSecond = limit
            request.timeLimit = .seconds(5)  // at 1 byte a second it would take over a day
            let error = await #expect(throws: DownloadError.self) { try await queue.downloader.download(request) }
            #expect(error?.code == .invalidRequest)
            #expect(error?.message.contains("maxBytesPerSecond") == true && error?.message.contains("\(limit)") == true)
            #expect(server.stats.requestCount == 0)
        }
    }

    /// A downloader made with a shared limit below 1 ran every download at 1 byte a second, without a word.
    @Test("a downloader configured with a shared limit of 0 refuses each download, naming it, until a limit is set")
    func nonPositiveSharedLimitRefused() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            var configuration = TransportKind.nio.configuration(retries: 0)
            configuration.maxBytesPerSecond = 0
            let downloader = Downloader(transport: TransportKind.nio.makeTransport(), configuration: configuration)
            var request = DownloadRequest(
                url: server.url(path: "/bytes/shared", query: ["size": "100000"]), destination: .directory(dir.url))
            request.timeLimit = .seconds(5)  // at 1 byte a second it would take over a day
            let error = await #expect(throws: DownloadError.self) { try await downloader.download(request) }
            #expect(error?.code == .invalidRequest)
            #expect(error?.message.contains("maxBytesPerSecond") == true && error?.message.contains("not 0") == true)
            #expect(server.stats.requestCount == 0)
            downloader.setMaxBytesPerSecond(nil)
            let result = try await downloader.download(request)
            #expect(result.size == 100_000)
        }
    }
}
