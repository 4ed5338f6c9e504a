#if canImport(Combine)
public import Combine
#else
public import OpenCombine
#endif
public import Foundation
public import Haul
import HaulOperations

/// A publisher of one queued download: it adds the request to its `DownloadQueue` when the subscriber first
/// asks for a value, emits the `DownloadResult` once and finishes, or fails with the `DownloadError`.
/// Cancelling the subscription cancels the download (nothing is left at its destination). The value and the
/// completion arrive on a thread of the concurrency pool; use `receive(on:)` to move them.
///
/// ```swift
/// let cancellable = queue.publisher(for: request)
///     .sink { completion in print(completion) } receiveValue: { result in print(result.fileURL.path) }
/// ```
public struct DownloadPublisher: Publisher {
    /// The published value: the finished download.
    public typealias Output = DownloadResult
    /// Why the download failed.
    public typealias Failure = DownloadError

    /// The queue the download runs on.
    public let queue: DownloadQueue
    /// The download.
    public let request: DownloadRequest

    /// Creates a publisher that downloads `request` on `queue` once subscribed with demand.
    public init(queue: DownloadQueue, request: DownloadRequest) {
        self.queue = queue
        self.request = request
    }

    /// Attaches `subscriber`; nothing is downloaded until it requests a value.
    public func receive<S: Subscriber>(subscriber: S) where S.Input == Output, S.Failure == Failure {
        // Type-erased, so the subscription (which a Task carries) is not generic over a non-Sendable type.
        subscriber.receive(subscription: DownloadSubscription(subscriber: AnySubscriber(subscriber), publisher: self))
    }
}

/// Starts the download on the first positive demand and delivers its outcome at most once.
private final class DownloadSubscription: Subscription, @unchecked Sendable {
    typealias Downstream = AnySubscriber<DownloadResult, DownloadError>
    // unchecked Sendable: every mutable field is behind `state`; the subscriber is only called outside it.

    private struct State {
        var subscriber: Downstream?
        var handle: DownloadHandle?
        var started = false
        var cancelled = false
    }

    private let publisher: DownloadPublisher
    private let state: Locked<State>

    init(subscriber: Downstream, publisher: DownloadPublisher) {
        self.publisher = publisher
        state = Locked(State(subscriber: subscriber))
    }

    func request(_ demand: Subscribers.Demand) {
        guard demand > .none else { return }
        let starts = state.withLock { state -> Bool in
            guard state.subscriber != nil, !state.started else { return false }
            state.started = true
            return true
        }
        guard starts else { return }
        // Outside the lock: adding sends the queue's events on this thread, and what they run may cancel this.
        let handle = publisher.queue.add(publisher.request)
        let cancelledMeanwhile = state.withLock { state in
            state.handle = handle
            return state.cancelled
        }
        if cancelledMeanwhile { return handle.cancel() }
        Task { [self] in
            let completion: Subscribers.Completion<DownloadError>
            var value: DownloadResult?
            do throws(DownloadError) {
                value = try await handle.result
                completion = .finished
            } catch {
                completion = .failure(error)
            }
            // Taking the subscriber out makes delivery happen once; a cancel before it, or from inside the value's
            // delivery, stops what follows.
            guard
                let subscriber = state.withLock({ state in
                    defer { state.subscriber = nil }; return state.subscriber
                })
            else { return }
            if let value { _ = subscriber.receive(value) }
            guard !state.withLock({ $0.cancelled }) else { return }
            subscriber.receive(completion: completion)
        }
    }

    func cancel() {
        let handle = state.withLock { state in
            state.subscriber = nil
            state.cancelled = true
            return state.handle
        }
        handle?.cancel()
    }
}

extension DownloadQueue {
    /// A publisher of one download on this queue (see ``DownloadPublisher``).
    public func publisher(for request: DownloadRequest) -> DownloadPublisher {
        DownloadPublisher(queue: self, request: request)
    }

    /// Downloads `urls` into `directory`, at most `maxConcurrent` at once (within the queue's own limits),
    /// publishing each result as it finishes. Demand is honoured: it holds no more downloads (added, or finished and
    /// not yet delivered) than the subscriber has asked for, so nothing is added before the first request and a
    /// subscriber that stops asking stops the downloads. The first failure fails the publisher and cancels the downloads
    /// still running or waiting; to keep going, map each download's error into a value instead:
    ///
    /// ```swift
    /// urls.publisher
    ///     .flatMap(maxPublishers: .max(4)) { url in
    ///         queue.publisher(for: DownloadRequest(url: url, destination: .directory(dir)))
    ///             .map { Result.success($0) }
    ///             .catch { Just(Result.failure($0)) }
    ///     }
    /// ```
    /// Cancelling the subscription cancels every download it started.
    public func downloadsPublisher(
        for urls: [URL], into directory: URL, maxConcurrent: Int = 4, conflictPolicy: ConflictPolicy = .fail
    ) -> AnyPublisher<DownloadResult, DownloadError> {
        precondition(maxConcurrent >= 1, "maxConcurrent must be at least 1, not \(maxConcurrent)")
        let requests = urls.map {
            DownloadRequest(url: $0, destination: .directory(directory), conflictPolicy: conflictPolicy)
        }
        return DownloadsPublisher(queue: self, requests: requests, maxConcurrent: maxConcurrent).eraseToAnyPublisher()
    }
}
