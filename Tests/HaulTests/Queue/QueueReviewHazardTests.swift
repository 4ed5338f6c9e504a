import Foundation
import Haul
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

@Suite("Queue review hazards", .timeLimit(.minutes(1)))
struct QueueReviewHazardTests {
    /// OperationGroup promises "a cancellation is not a failure" under `.cancelOthers`; a DownloadOperation cancelled
    /// while it runs finishes with `DownloadError(.cancelled)`, which is a cancellation (`CancellationReporting`).
    @Test("cancelling one DownloadOperation of a cancelOthers group does not cancel the others")
    func cancelledDownloadOperationIsNotAGroupFailure() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let downloads = makeQueue(.init(maxConcurrentDownloads: 4))
            let first = DownloadOperation(
                DownloadRequest(url: server.held("a", gate: "a"), destination: .directory(dir.url)), queue: downloads)
            let second = DownloadOperation(
                DownloadRequest(url: server.held("b", gate: "b"), destination: .directory(dir.url)), queue: downloads)
            let group = OperationGroup([first, second], failurePolicy: .cancelOthers)
            let operations = OperationQueue()
            operations.addOperations([first, second])
            try await eventually("both requests held") {
                server.heldCount(at: "a") == 1 && server.heldCount(at: "b") == 1
            }
            first.cancel()
            try await [first].allFinished()
            server.openGate("b")
            try await group.finished()
            #expect(group.firstFailure == nil, "a cancellation was recorded as the group's failure")
            #expect(!second.isCancelled, "cancelOthers cancelled a member because another was cancelled")
            #expect((try? second.result?.get()) != nil)
        }
    }

    /// ResultOperation.outputForConsumer: a cancelled dependency is `.dependencyCancelled`, a DownloadOperation
    /// cancelled while it runs too.
    @Test("a consumer of a cancelled DownloadOperation sees dependencyCancelled")
    func consumerOfCancelledDownloadOperation() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let downloads = makeQueue(.init(maxConcurrentDownloads: 4))
            let fetch = DownloadOperation(
                DownloadRequest(url: server.held("a", gate: "a"), destination: .directory(dir.url)), queue: downloads)
            let consume = AsyncBlockOperation(name: "consume", consuming: fetch) { $0.size }
            OperationQueue().addOperations([fetch, consume])
            try await eventually("request held") { server.heldCount(at: "a") == 1 }
            fetch.cancel()
            let error = try await #require(throws: OperationError.self) { try await consume.value }
            #expect(error.code == .dependencyCancelled, "got \(error.code)")
        }
    }

    /// DownloadOperation: "it stays executing until the file is published (or the download failed), so a queue of
    /// width 1 downloads strictly one file after another". Made with a DownloadQueue and cancelled, it finishes once
    /// its download has left the queue, before the next operation starts.
    @Test("a cancelled queue DownloadOperation finishes only once its download has left the queue")
    func cancelledQueueOperationFinishesAfterItsDownload() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let downloads = makeQueue(.init(maxConcurrentDownloads: 4))
            let fetch = DownloadOperation(
                DownloadRequest(url: server.held("a", size: 200_000, gate: "a"), destination: .directory(dir.url)),
                queue: downloads)
            let runningWhenNextStarted = Locked<Int?>(nil)
            let next = BlockOperation { runningWhenNextStarted.withLock { $0 = downloads.runningCount } }
            let operations = OperationQueue()
            operations.maxConcurrentOperationCount = 1
            operations.addOperations([fetch, next])
            try await eventually("request held") { server.heldCount(at: "a") == 1 }
            fetch.cancel()
            try await [fetch, next].allFinished()
            #expect(
                runningWhenNextStarted.withLock { $0 } == 0,
                "the next operation of a width-1 queue started while the cancelled download still ran")
            await downloads.waitUntilIdle()
        }
    }

    /// `setPriority` changes a waiting download's priority; once that download has run and is paused, it goes back to
    /// the waiting order with that priority, not the one it was added with.
    @Test("a re-prioritised download paused while it runs keeps its new priority")
    func priorityKeptAcrossPauseWhileRunning() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let downloads = makeQueue(.init(maxConcurrentDownloads: 1))
            downloads.pause()
            var lowRequest = DownloadRequest(url: server.held("a", gate: "a"), destination: .directory(dir.url))
            lowRequest.priority = 0
            let raised = downloads.add(lowRequest)
            #expect(raised.setPriority(10))
            var middleRequest = DownloadRequest(
                url: server.url(path: "/bytes/b", query: ["size": "100"]), destination: .directory(dir.url))
            middleRequest.priority = 5
            let middle = downloads.add(middleRequest)
            downloads.resume()
            try await eventually("the raised download runs") { server.heldCount(at: "a") == 1 }
            downloads.pause()  // nothing is admitted from here on
            #expect(raised.pause())
            try await eventually("its run stopped") { downloads.runningCount == 0 }
            #expect(raised.resume())
            let order = downloads.waitingStatuses(0..<10).map(\.id)
            #expect(order == [raised.id, middle.id], "priority 10 went behind priority 5 after a pause")
            downloads.cancelAll()
            server.openGate("a")
            await downloads.waitUntilIdle()
        }
    }

    /// `download(_:)`: "Throws: DownloadError; nothing of this download is left at its destination." A task cancelled
    /// once the download has been published (its `.finished` sent, its waiters not yet woken) gets the result, not a
    /// cancellation with the file left at its destination.
    @Test("download(_:) cancelled after its file is published does not report a cancellation with the file left")
    func cancelAfterPublishReportsTheOutcome() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let downloads = makeQueue()
            let caller = Locked<Task<Result<DownloadResult, DownloadError>, Never>?>(nil)
            // Called on the completing thread, after the outcome is stored and before the waiters are woken.
            let observation = downloads.observe(including: [.finished]) { _ in caller.withLock { $0 }?.cancel() }
            let request = DownloadRequest(url: server.held("a", size: 100, gate: "a"), destination: .directory(dir.url))
            let task = Task { () -> Result<DownloadResult, DownloadError> in
                do throws(DownloadError) { return .success(try await downloads.download(request)) } catch {
                    return .failure(error)
                }
            }
            caller.withLock { $0 = task }
            try await eventually("request held") { server.heldCount(at: "a") == 1 }
            server.openGate("a")
            let outcome = await task.value
            observation.cancel()
            if case .failure(let error) = outcome {
                #expect(
                    dir.contents().isEmpty,
                    "download(_:) threw \(error.code) but left \(dir.contents()) at its destination")
            }
        }
    }

    /// `data(from:)` streams through a private directory "removed before this returns", a call cancelled mid-body
    /// too (its run still holds a partial there when the cancel comes).
    @Test("data(from:) cancelled mid-body leaves no private temporary directory behind")
    func cancelledDataLeavesNoDirectory() async throws {
        try await TestServer.withRunning { server in
            let downloads = makeQueue()
            // Its own directory, named by the queue's event (other tests' directories sit beside it).
            let directory = Locked<String?>(nil)
            let observation = downloads.observe(including: [.queued]) { event in
                if case .queued(_, let request) = event, case .file(let file) = request.destination {
                    directory.withLock { $0 = file.deletingLastPathComponent().path }
                }
            }
            defer { observation.cancel() }
            let url = server.url(
                path: "/bytes/body", query: ["size": "100000", "stallAfter": "1000", "stall": "gate:s"])
            let task = Task { () -> Bool in
                do throws(DownloadError) {
                    _ = try await downloads.data(from: url)
                    return true
                } catch { return false }
            }
            try await eventually("the body's first bytes are in a partial") {
                guard let path = directory.withLock({ $0 }) else { return false }
                return !((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).isEmpty
            }
            task.cancel()
            #expect(await task.value == false)
            await downloads.waitUntilIdle()
            server.openGate("s")
            let path = try #require(directory.withLock { $0 })
            #expect(!FileManager.default.fileExists(atPath: path), "left behind: \(path)")
            try? FileManager.default.removeItem(atPath: path)
        }
    }
}
