import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulCombine
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Combine)
import Combine
#else
import OpenCombine
#endif

/// A subscriber that keeps its subscription so that anyone can request or cancel through it.
private final class HoldingSubscriber: Subscriber, @unchecked Sendable {
    // unchecked Sendable: mutable state is behind locks.
    typealias Input = DownloadResult
    typealias Failure = DownloadError

    private let subscription = Locked<(any Subscription)?>(nil)
    let completion = Gate<String>()

    func demand(_ demand: Subscribers.Demand) { subscription.withLock { $0 }?.request(demand) }
    func cancel() { subscription.withLock { $0 }?.cancel() }

    func receive(subscription: any Subscription) { self.subscription.withLock { $0 = subscription } }
    func receive(_ input: DownloadResult) -> Subscribers.Demand { .none }
    func receive(completion: Subscribers.Completion<DownloadError>) {
        self.completion.open(with: "\(completion)")
    }
}

/// Cancels its subscription from inside `receive(_:)` and records what arrives after that.
private final class CancelOnValue: Subscriber, @unchecked Sendable {
    // unchecked Sendable: mutable state is behind locks.
    typealias Input = DownloadResult
    typealias Failure = DownloadError

    private let subscription = Locked<(any Subscription)?>(nil)
    let afterCancel = Locked<[String]>([])
    let cancelled = Locked(false)
    let gotValue = Gate<Void>()

    func receive(subscription: any Subscription) {
        self.subscription.withLock { $0 = subscription }
        subscription.request(.max(1))
    }
    func receive(_ input: DownloadResult) -> Subscribers.Demand {
        subscription.withLock { $0 }?.cancel()
        cancelled.withLock { $0 = true }
        gotValue.open()
        return .none
    }
    func receive(completion: Subscribers.Completion<DownloadError>) {
        if cancelled.withLock({ $0 }) { afterCancel.withLock { $0.append("completion \(completion)") } }
    }
}

@Suite("Combine publishers: review hazards", .serialized, .timeLimit(.minutes(1)))
struct CombineReviewHazardTests {
    func makeQueue() -> DownloadQueue {
        var configuration = Downloader.Configuration()
        configuration.retryPolicy = RetryPolicy(maxRetries: 0)
        return DownloadQueue(
            downloader: Downloader(transport: AsyncHTTPClientTransport.shared, configuration: configuration),
            configuration: .init(maxConcurrentDownloads: 4))
    }

    /// `queue.add` sends the queue's events on the calling thread (observers run synchronously there): a callback
    /// reached from an event of `DownloadSubscription.request`'s add that cancels the subscription (a UI reacting to
    /// `.queued`) must not find the subscription's lock held.
    @Test("request(_:) does not hold the subscription's lock while the queue sends events")
    func cancelFromEventDuringRequest() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue()
            let subscriber = HoldingSubscriber()
            let request = DownloadRequest(
                url: server.url(path: "/bytes/observed", query: ["size": "100", "hold": "g"]),
                destination: .directory(dir.url))
            queue.publisher(for: request).subscribe(subscriber)
            let observation = queue.observe(including: [.queued]) { _ in subscriber.cancel() }
            let returned = Gate<Void>()
            // On a thread of its own: a deadlock there must not take one of the cooperative pool's two threads.
            let thread = Thread {
                subscriber.demand(.max(1))
                returned.open()
            }
            thread.start()
            let deadline = ContinuousClock.now + .seconds(5)
            while returned.value == nil, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(
                returned.value != nil, "request(.max(1)) never returned: the subscription's lock is held across add")
            observation.cancel()
            queue.cancelAll()
            server.openGate("g")
        }
    }

    /// PublishersAndCancellation.md: "it delivers at most once, and never after a cancellation": a subscriber that
    /// cancels on the value gets no completion after it.
    @Test("nothing is delivered after a cancel made from inside receiveValue")
    func cancelInsideReceiveValue() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue()
            let subscriber = CancelOnValue()
            let request = DownloadRequest(
                url: server.url(path: "/bytes/v", query: ["size": "100"]), destination: .directory(dir.url))
            queue.publisher(for: request).subscribe(subscriber)
            await subscriber.gotValue.wait()
            await queue.waitUntilIdle()
            // The completion, if sent, follows the value on the same thread at once: a second covers it.
            let deadline = ContinuousClock.now + .seconds(1)
            while subscriber.afterCancel.withLock({ $0.isEmpty }), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(subscriber.afterCancel.withLock { $0 } == [], "delivered after the cancel")
        }
    }

    /// HaulCombine.md: "Nothing is downloaded until a subscriber asks for a value; demand is honoured." A subscriber
    /// of `downloadsPublisher` that asks for one result and never more gets one download, and nothing is added
    /// before it asks; the results it asks for later all arrive.
    @Test("downloadsPublisher adds nothing before demand and no more downloads than the demand")
    func downloadsHonourDemand() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue()
            let urls = (0..<4).map { server.url(path: "/bytes/d\($0)", query: ["size": "100"]) }
            let subscriber = ManualSubscriber()
            queue.downloadsPublisher(for: urls, into: dir.url, maxConcurrent: 2).subscribe(subscriber)
            #expect(queue.waitingCount + queue.runningCount == 0, "added before any demand")
            subscriber.demand(.max(1))
            try await eventually("the first result") { subscriber.values == 1 }
            await queue.waitUntilIdle()
            #expect(queue.progress.completedFiles == 1, "downloaded more than the demand")
            #expect(dir.contents().count == 1)
            subscriber.demand(.max(3))
            #expect(await subscriber.completion.wait() == "finished")
            #expect(subscriber.values == 4)
            #expect(dir.contents().sorted() == ["d0", "d1", "d2", "d3"])
        }
    }

    @Test("downloadsPublisher of no URLs finishes at once, before any demand, as a sequence's publisher does")
    func noDownloadsFinishAtOnce() async throws {
        let dir = try TemporaryDirectory()
        let queue = makeQueue()
        let subscriber = ManualSubscriber()
        queue.downloadsPublisher(for: [], into: dir.url).subscribe(subscriber)
        #expect(await subscriber.completion.wait() == "finished")
        #expect(subscriber.values == 0)
    }
}
