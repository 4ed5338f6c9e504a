import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulCombine
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Combine)
import Combine
#else
import OpenCombine
#endif

@Suite("Combine publishers", .timeLimit(.minutes(2)))
struct DownloadPublisherTests {
    func makeQueue(maxConcurrent: Int = 10) -> DownloadQueue {
        var configuration = Downloader.Configuration()
        configuration.retryPolicy = RetryPolicy(maxRetries: 0)
        return DownloadQueue(
            downloader: Downloader(transport: AsyncHTTPClientTransport.shared, configuration: configuration),
            configuration: .init(maxConcurrentDownloads: maxConcurrent))
    }

    @Test("one download: the result, then finished")
    func singleDownload() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue()
            let recorder = Recorder<DownloadResult>()
            let request = DownloadRequest(
                url: server.url(path: "/bytes/one", query: ["size": "3000"]), destination: .directory(dir.url))
            let cancellable = queue.publisher(for: request).sink(
                receiveCompletion: recorder.complete, receiveValue: recorder.receive)
            let completion = await recorder.completion.wait()
            #expect(completion == "finished")
            #expect(recorder.values.map(\.fileURL.lastPathComponent) == ["one"])
            #expect(
                try Data(contentsOf: dir.url.appendingPathComponent("one"))
                    == Data(TestServer.expectedBytes(name: "one", size: 3000)))
            cancellable.cancel()
        }
    }

    @Test("demand is honoured: nothing is fetched until the subscriber asks")
    func demand() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue()
            let subscriber = ManualSubscriber()
            let request = DownloadRequest(
                url: server.url(path: "/bytes/lazy", query: ["size": "10"]), destination: .directory(dir.url))
            queue.publisher(for: request).subscribe(subscriber)
            #expect(subscriber.hasSubscription)
            #expect(queue.waitingCount + queue.runningCount == 0)
            subscriber.demand(.max(1))
            #expect(await subscriber.completion.wait() == "finished")
            #expect(subscriber.values == 1)
            #expect(server.stats.requests(toPath: "/bytes/lazy") == 1)
        }
    }

    @Test("cancelling the subscription cancels the transfer and leaves nothing")
    func cancelSubscription() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue()
            let recorder = Recorder<DownloadResult>()
            let request = DownloadRequest(
                url: server.url(path: "/bytes/held", query: ["size": "100000", "hold": "g"]),
                destination: .directory(dir.url))
            let cancellable = queue.publisher(for: request).sink(
                receiveCompletion: recorder.complete, receiveValue: recorder.receive)
            try await eventually("the request held") { server.heldCount(at: "g") == 1 }
            cancellable.cancel()
            await queue.waitUntilIdle()
            #expect(queue.progress.cancelledFiles == 1)
            server.openGate("g")
            #expect(dir.contents() == [])
            #expect(recorder.values.isEmpty && recorder.completion.value == nil)  // nothing after a cancel
        }
    }

    @Test("downloadsPublisher: at most maxConcurrent in flight, every file published")
    func maxConcurrent() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue()
            let urls = (0..<6).map { server.url(path: "/bytes/m\($0)", query: ["size": "2000", "hold": "g"]) }
            let recorder = Recorder<DownloadResult>()
            let cancellable = queue.downloadsPublisher(for: urls, into: dir.url, maxConcurrent: 2)
                .sink(receiveCompletion: recorder.complete, receiveValue: recorder.receive)
            try await eventually("two requests held") { server.heldCount(at: "g") == 2 }
            #expect(queue.runningCount == 2 && queue.waitingCount == 0)  // the publisher, not the queue, held them
            server.openGate("g")
            #expect(await recorder.completion.wait() == "finished")
            #expect(Set(recorder.values.map(\.fileURL.lastPathComponent)) == Set((0..<6).map { "m\($0)" }))
            #expect(server.stats.maxInFlight == 2)
            cancellable.cancel()
        }
    }

    @Test("the first failure fails the publisher and cancels the rest; mapping errors to values keeps going")
    func failures() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue()
            var urls = (0..<3).map { server.url(path: "/bytes/f\($0)", query: ["size": "2000", "hold": "g"]) }
            urls.insert(server.url(path: "/missing", query: ["status": "404"]), at: 1)
            let stopping = Recorder<DownloadResult>()
            let first = queue.downloadsPublisher(for: urls, into: dir.url, maxConcurrent: 4)
                .sink(receiveCompletion: stopping.complete, receiveValue: stopping.receive)
            #expect(await stopping.completion.wait() == "failure(404)")
            await queue.waitUntilIdle()
            #expect(stopping.values.isEmpty && dir.contents() == [])
            first.cancel()

            server.openGate("g")
            let keepGoing = Recorder<Result<DownloadResult, DownloadError>>()
            let second = urls.publisher
                .flatMap(maxPublishers: .max(2)) { url in
                    queue.publisher(for: DownloadRequest(url: url, destination: .directory(dir.url)))
                        .map { Result<DownloadResult, DownloadError>.success($0) }
                        .catch { Just(Result<DownloadResult, DownloadError>.failure($0)) }
                }
                .sink(receiveCompletion: keepGoing.complete, receiveValue: keepGoing.receive)
            #expect(await keepGoing.completion.wait() == "finished")
            #expect(keepGoing.values.count == 4)
            #expect(keepGoing.values.filter { (try? $0.get()) == nil }.count == 1)
            #expect(dir.contents().sorted() == ["f0", "f1", "f2"])
            second.cancel()
        }
    }
}
