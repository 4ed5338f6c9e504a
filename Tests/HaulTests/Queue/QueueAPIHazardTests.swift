import Foundation
import Haul
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// Whether `stream` ends within `limit` (a hang shows as `false`, not as a stuck test).
private func ends(_ stream: AsyncStream<QueueEvent>, within limit: Duration) async -> Bool {
    await withTaskGroup(of: Bool.self) { group in
        group.addTask {
            for await _ in stream {}
            return true
        }
        group.addTask {
            try? await Task.sleep(for: limit)
            return false
        }
        let first = await group.next() ?? false
        group.cancelAll()
        return first
    }
}

/// The queue's API used the way apps misuse it: a queue released under a loop over its events, a position of
/// Int.min, a pause as a download starts, a cancelled loop over a list one of whose downloads the app also holds.
@Suite("Queue API against apps that misuse it", .serialized, .timeLimit(.minutes(1)))
struct QueueAPIHazardTests {
    @Test("an events sequence ends once its queue is gone, as documented")
    func eventsEndWhenQueueIsGone() async {
        var queue: DownloadQueue? = makeQueue()
        weak let probe = queue
        let events = queue!.events
        queue = nil
        #expect(probe == nil, "the queue was not released")
        #expect(await ends(events, within: .seconds(5)), "`for await event in queue.events` hangs for ever")
    }

    @Test("move(toPosition: Int.min) puts a download first among its priority instead of trapping")
    func moveToIntMin() {
        // In process: the overflow this checks was a trap, which fails the run as surely as an expectation.
        let queue = makeQueue()
        queue.pause()  // nothing starts: every download waits
        let dir = URL(fileURLWithPath: NSTemporaryDirectory())
        queue.add(
            DownloadRequest(url: URL(string: "http://127.0.0.1:9/high")!, destination: .directory(dir), priority: 1))
        queue.add(DownloadRequest(url: URL(string: "http://127.0.0.1:9/low1")!, destination: .directory(dir)))
        let last = queue.add(
            DownloadRequest(url: URL(string: "http://127.0.0.1:9/low2")!, destination: .directory(dir)))
        #expect(last.move(toPosition: Int.min) == 1, "after the higher priority, first among its own")
        queue.cancelAll()
    }

    @Test("a download paused before its run began publishes no `.started` after `.paused`")
    func noStartedAfterPaused() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let atPublish = Gate<Void>()
            let release = Gate<Void>()
            var configuration = testConfiguration()
            configuration.hooks.beforePublish = {
                atPublish.open()
                await release.wait()  // ignores cancellation: the first download stays "ending"
            }
            let queue = DownloadQueue(
                downloader: Downloader(
                    transport: TransportKind.asyncHTTPClient.makeTransport(), configuration: configuration))
            let request = DownloadRequest(
                url: server.url(path: "/bytes/p", query: ["size": "1000"]), destination: .directory(dir.url))
            let first = queue.add(request)
            await atPublish.wait()
            let events = queue.events
            first.cancel()  // ending: stuck before publishing
            let second = queue.add(request)  // a fresh download, admitted, waiting for the first to end
            #expect(second.id != first.id)
            #expect(queue.pause(second.id))
            release.open()
            try await eventually("the second's run has stopped for its pause") {
                queue.runningCount == 0 && queue.status(of: second.id)?.state == .paused
            }
            queue.finishEvents()
            var mine: [String] = []
            for await event in events {
                switch event {
                case .paused(second.id): mine.append("paused")
                case .resumed(second.id): mine.append("resumed")
                case .download(second.id, let event): mine.append("\(event)".prefix { $0 != "(" }.description)
                default: break
                }
            }
            #expect(mine.last == "paused", "events of the paused download: \(mine)")
            second.cancel()
        }
    }

    @Test("cancelling a downloads(_:) loop ends it even when a download it read is shared with a paused one")
    func cancelledLoopWithSharedPausedDownload() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue()
            let request = DownloadRequest(
                url: server.url(path: "/bytes/shared", query: ["size": "1000"]), destination: .directory(dir.url))
            let mine = queue.add(request, paused: true)  // the app's own download of this file, paused in its UI
            let askedForMore = Gate<Void>()
            let requests = OneThenWait(request: request, askedForMore: askedForMore)
            let loop = Task {
                for try await _ in queue.downloads(requests, window: 2) {}
            }
            await askedForMore.wait()  // the first request is added (joined) and tracked before the next is asked for
            loop.cancel()
            #expect(
                await ends(loop, within: .seconds(5)),
                "the cancelled loop waits for a download it did not cancel (paused by someone else)")
            mine.cancel()
            #expect(mine.outcome != nil && queue.waitingCount == 0, "the shared download is gone")
            #expect(await ends(loop, within: .seconds(5)), "the loop still runs once that download was cancelled too")
            queue.cancelAll()
        }
    }
}
