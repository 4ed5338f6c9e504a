import Foundation
import Haul
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

@Suite("DownloadOperation", .timeLimit(.minutes(2)))
struct DownloadOperationTests {
    @Test(
        "a width-1 OperationQueue downloads strictly one after another; the completion runs after all",
        arguments: TransportKind.allCases)
    func sequentialQueue(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration())
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = 1
            // Throttled so that each transfer takes a while: overlapping ones would show in the server's count.
            let operations = (0..<5).map { index in
                DownloadOperation(
                    DownloadRequest(
                        url: server.url(path: "/bytes/file\(index)", query: ["size": "20000", "rate": "400000"]),
                        destination: .directory(dir.url)),
                    downloader: downloader)
            }
            let group = OperationGroup(operations)
            let progressLines = Locked<[String]>([])
            group.onMemberFinished = { done, total in progressLines.withLock { $0.append("\(done) / \(total)") } }
            let completionSawAllFiles = Locked(false)
            let completion = group.completionOperation {
                completionSawAllFiles.withLock { $0 = dir.contents().count == 5 }
            }
            queue.addOperations(operations + [completion])
            try await [completion].allFinished()

            #expect(server.stats.maxInFlight == 1)
            #expect(server.stats.requests.map(\.path) == (0..<5).map { "/bytes/file\($0)" })
            #expect(completionSawAllFiles.withLock { $0 })
            #expect(progressLines.withLock { $0 }.last == "5 / 5")
            for (index, operation) in operations.enumerated() {
                let result = try #require(try operation.result?.get())
                #expect(contentsOf(result.fileURL) == TestServer.expectedBytes(name: "file\(index)", size: 20000))
            }
        }
    }

    @Test("cancelling a DownloadOperation cancels its transfer and leaves nothing")
    func cancelOperation() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(
                transport: TransportKind.asyncHTTPClient.makeTransport(),
                configuration: testConfiguration())
            let operation = DownloadOperation(
                DownloadRequest(
                    url: server.url(path: "/bytes/held", query: ["size": "10", "hold": "g"]),
                    destination: .directory(dir.url)),
                downloader: downloader)
            OperationQueue().addOperation(operation)
            try await eventually("request held") { server.heldCount(at: "g") == 1 }
            operation.cancel()
            let error = try await #require(throws: DownloadError.self) { try await operation.value }
            #expect(error.code == .cancelled)
            #expect(dir.contents().isEmpty)
        }
    }

    @Test(
        "a queue's DownloadOperation hands out its download: paused, the operation keeps executing; resumed, it ends",
        arguments: TransportKind.allCases)
    func pauseThroughOperation(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let downloads = makeQueue(.init(maxConcurrentDownloads: 1), transport: kind)
            let blocker = downloads.add(DownloadRequest(url: server.held("first"), destination: .directory(dir.url)))
            let operation = DownloadOperation(
                DownloadRequest(
                    url: server.url(path: "/bytes/op", query: ["size": "5000"]), destination: .directory(dir.url)),
                queue: downloads)
            #expect(operation.handle == nil)
            OperationQueue().addOperation(operation)
            try await eventually("the operation added its download") { operation.handle != nil }
            let handle = try #require(operation.handle)
            #expect(handle.pause() && handle.status.state == .paused)
            server.openGate("g")
            _ = try await blocker.result
            // Nothing else holds its slot, and it does not start: the operation is still executing.
            #expect(downloads.runningCount == 0 && operation.isExecuting && !operation.isFinished)
            #expect(server.stats.requests(toPath: "/bytes/op") == 0)
            handle.resume()
            let result = try await operation.value
            #expect(contentsOf(result.fileURL) == TestServer.expectedBytes(name: "op", size: 5000))
        }
    }
}
