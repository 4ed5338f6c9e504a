import Foundation
import Haul
import HaulNIO
import HaulTestServer
import HaulTestSupport
import NIOCore
import NIOPosix
import Testing

/// Runs `body` with a queue on NIO's transport over an event loop of its own: the callbacks these tests block run
/// there (a download's task runs on its transport's loop), and hold up no other test's transfers on the shared loops
/// (tests run side by side; a shared thread blocked for a second made their stall timeouts fire).
private func withOwnLoopQueue(_ body: (DownloadQueue) async throws -> Void) async throws {
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    let queue = DownloadQueue(
        downloader: Downloader(
            transport: NIOTransport(eventLoopGroup: group), configuration: TransportKind.nio.configuration(retries: 3)),
        configuration: .init())
    let outcome: Result<Void, any Error>
    do {
        try await body(queue)
        outcome = .success(())
    } catch {
        outcome = .failure(error)
    }
    queue.cancelAll()
    await queue.waitUntilIdle()
    try await group.shutdownGracefully()
    try outcome.get()
}

@Suite("Stream front end: review hazards", .serialized, .timeLimit(.minutes(1)))
struct StreamReviewHazardTests {
    /// `download(_:window:onResult:)` promises "Every download read gets its result, a cancelled one too" and that
    /// it "returns once every download read has ended and its result was handed over". A download read from the
    /// sequence that the app also holds (it added the same file itself) goes on for the app after the cancel; the
    /// call hands `onResult` a cancellation for it before it returns.
    @Test("download(onResult:) cancelled: a download read that the app also holds still gets its result")
    func callbackResultForSharedDownload() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue()
            let request = DownloadRequest(url: server.held("shared"), destination: .directory(dir.url))
            let mine = queue.add(request)  // the app's own download of the same file
            try await eventually("the app's download held by the server") { server.heldCount(at: "g") == 1 }
            let asked = Gate<Void>()
            let results = Locked<[FinishedDownload]>([])
            let call = Task {
                try await queue.download(OneThenWait(request: request, askedForMore: asked), window: 2) {
                    finished in results.withLock { $0.append(finished) }
                }
            }
            await asked.wait()  // the request was read, added (joined) and tracked
            call.cancel()
            #expect(await ends(call, within: .seconds(10)), "the cancelled call never returned")
            let atReturn = results.withLock { $0.count }
            #expect(atReturn == 1, "download(onResult:) returned with \(atReturn) results for the 1 download it read")

            // Even once the shared download has ended, the read one never gets a result.
            server.openGate("g")
            _ = try? await mine.result
            try await eventually("the shared download's result reaches onResult", within: .seconds(3)) {
                results.withLock { $0.count } == 1
            }
            queue.cancelAll()
        }
    }

    /// A download that ends just as the run is cancelled: the queue stores its outcome and removes its entry under its
    /// lock, and runs the `whenEnded` callbacks only after the lock, once its events are sent. A cancel in between
    /// finds the entry gone; the download has ended, not gone on for another holder, and its result is handed over.
    @Test("download(onResult:) cancelled after a download ended but before its result was handed over")
    func callbackResultLostWhenCancelledAsItEnds() async throws {
        try await TestServer.withRunning { server in
            try await withOwnLoopQueue { queue in
                let dir = try TemporaryDirectory()
                let request = DownloadRequest(url: server.held("ending"), destination: .directory(dir.url))
                let inObserver = Gate<Void>()
                let release = DispatchSemaphore(value: 0)
                // Holds the thread that ends the download between the queue's lock and the wake-up of its waiters.
                let observation = queue.observe(including: [.finished]) { _ in
                    inObserver.open()
                    _ = release.wait(timeout: .now() + 10)
                }
                let asked = Gate<Void>()
                let results = Locked<[FinishedDownload]>([])
                let call = Task {
                    try await queue.download(OneThenWait(request: request, askedForMore: asked), window: 2) {
                        finished in results.withLock { $0.append(finished) }
                    }
                }
                await asked.wait()
                server.openGate("g")
                await inObserver.wait()  // finished: outcome stored, entry gone, callbacks not yet run
                call.cancel()  // runs StreamRun.cancel() here and now
                release.signal()
                #expect(await ends(call, within: .seconds(10)))
                observation.cancel()
                let got = results.withLock { $0.count }
                #expect({ got == 1 }(), "a download read and finished got \(got) results")
            }
        }
    }

    /// "Returns once every download read has ended and its result was handed over": a cancel while `onResult` runs
    /// for an ended download waits for that call.
    @Test("download(onResult:) does not return while an onResult call is still running")
    func returnsOnlyAfterCallbacks() async throws {
        try await TestServer.withRunning { server in
            try await withOwnLoopQueue { queue in
                let dir = try TemporaryDirectory()
                let request = DownloadRequest(url: server.held("slowcallback"), destination: .directory(dir.url))
                let inCallback = Gate<Void>()
                let release = DispatchSemaphore(value: 0)
                let callbackReturned = Locked(false)
                let asked = Gate<Void>()
                let call = Task {
                    try await queue.download(OneThenWait(request: request, askedForMore: asked), window: 2) { _ in
                        inCallback.open()
                        _ = release.wait(timeout: .now() + 10)
                        callbackReturned.withLock { $0 = true }
                    }
                }
                await asked.wait()
                server.openGate("g")
                await inCallback.wait()
                call.cancel()
                let returnedEarly = await ends(call, within: .seconds(1))
                #expect(!returnedEarly, "download(onResult:) returned while onResult was still running")
                release.signal()
                #expect(await ends(call, within: .seconds(10)))
                #expect(callbackReturned.withLock { $0 })
            }
        }
    }
}
