#if canImport(Combine)
import Combine
#else
import OpenCombine
#endif
import Haul
import HaulOperations

/// The publisher of ``Haul/DownloadQueue/downloadsPublisher(for:into:maxConcurrent:conflictPolicy:)``.
struct DownloadsPublisher: Publisher {
    typealias Output = DownloadResult
    typealias Failure = DownloadError

    let queue: DownloadQueue
    let requests: [DownloadRequest]
    let maxConcurrent: Int

    func receive<S: Subscriber>(subscriber: S) where S.Input == Output, S.Failure == Failure {
        // Type-erased, so the subscription (which Tasks carry) is not generic over a non-Sendable type.
        let subscription = DownloadsSubscription(subscriber: AnySubscriber(subscriber), publisher: self)
        subscriber.receive(subscription: subscription)
        // An empty list finishes at once, as a sequence's publisher does, demand or not.
        if requests.isEmpty { subscription.finishIfEmpty() }
    }
}

/// Holds at most `maxConcurrent` downloads, and no more than the subscriber's outstanding demand: a download is held
/// from its add until its result is delivered. Results go out in the order the downloads end, one call at a time.
private final class DownloadsSubscription: Subscription, @unchecked Sendable {
    typealias Downstream = AnySubscriber<DownloadResult, DownloadError>
    // unchecked Sendable: every mutable field is behind `state`; the subscriber and the queue are only called
    // outside it.

    private struct State {
        /// `nil` once cancelled or completed.
        var subscriber: Downstream?
        /// Demand not yet met by a delivered result.
        var demand = Subscribers.Demand.none
        /// The index of the next request to add.
        var next = 0
        /// Downloads added (or being added) whose result is not delivered yet.
        var held = 0
        var handles: [Int: DownloadHandle] = [:]
        /// Results not delivered yet, in the order their downloads ended.
        var ready: [DownloadResult] = []
        var failure: DownloadError?
        /// One caller at a time runs `work()`, so the subscriber is never called concurrently.
        var working = false
    }

    private enum Step {
        case idle
        case deliver(Downstream, DownloadResult)
        case complete(Downstream, Subscribers.Completion<DownloadError>, cancelling: [DownloadHandle])
        case add(Range<Int>)
    }

    private let publisher: DownloadsPublisher
    private let state: Locked<State>

    init(subscriber: Downstream, publisher: DownloadsPublisher) {
        self.publisher = publisher
        state = Locked(State(subscriber: subscriber))
    }

    func request(_ demand: Subscribers.Demand) {
        guard demand > .none else { return }
        state.withLock { $0.demand += demand }
        work()
    }

    /// Finishes a subscription to no downloads (a completion needs no demand).
    func finishIfEmpty() { work() }

    func cancel() {
        let handles = state.withLock { state in
            state.subscriber = nil
            defer { state.handles = [:] }
            return Array(state.handles.values)
        }
        for handle in handles { handle.cancel() }
    }

    /// Delivers, completes and adds until nothing is left to do; returns at once when another caller is at it (which
    /// then sees what this caller changed, since it decides each step under the lock).
    private func work() {
        let starts = state.withLock { state in
            defer { state.working = true }
            return !state.working
        }
        guard starts else { return }
        let requests = publisher.requests.count
        let maxConcurrent = publisher.maxConcurrent
        while true {
            switch state.withLock({ Self.nextStep(&$0, requests: requests, max: maxConcurrent) }) {
            case .idle:
                return
            case .deliver(let subscriber, let result):
                // Outside the lock: the subscriber may request or cancel from inside.
                let more = subscriber.receive(result)
                if more > .none { state.withLock { $0.demand += more } }
            case .complete(let subscriber, let completion, let cancelling):
                for handle in cancelling { handle.cancel() }
                subscriber.receive(completion: completion)
            case .add(let indices):
                for index in indices { add(index) }
            }
        }
    }

    private static func nextStep(_ state: inout State, requests: Int, max: Int) -> Step {
        guard let subscriber = state.subscriber else {
            state.working = false
            return .idle
        }
        if let failure = state.failure {
            state.subscriber = nil
            defer { state.handles = [:] }
            return .complete(subscriber, .failure(failure), cancelling: Array(state.handles.values))
        }
        if state.demand > .none, !state.ready.isEmpty {
            state.demand -= 1
            state.held -= 1
            return .deliver(subscriber, state.ready.removeFirst())
        }
        if state.next == requests, state.held == 0 {
            state.subscriber = nil
            return .complete(subscriber, .finished, cancelling: [])
        }
        let allowed = state.demand.max.map { Swift.min($0, max) } ?? max
        let room = Swift.min(allowed - state.held, requests - state.next)
        guard room > 0 else {
            state.working = false
            return .idle
        }
        defer {
            state.next += room
            state.held += room
        }
        return .add(state.next..<state.next + room)
    }

    /// Adds request `index`, outside the lock: adding sends the queue's events on this thread, and what they run may
    /// cancel this subscription.
    private func add(_ index: Int) {
        let handle = publisher.queue.add(publisher.requests[index])
        let cancelled = state.withLock { state in
            guard state.subscriber != nil else { return true }
            state.handles[index] = handle
            return false
        }
        if cancelled { return handle.cancel() }
        Task { [self] in
            do throws(DownloadError) {
                let result = try await handle.result
                state.withLock { state in
                    state.handles[index] = nil
                    state.ready.append(result)
                }
            } catch {
                state.withLock { state in
                    state.handles[index] = nil
                    if state.failure == nil { state.failure = error }
                }
            }
            work()
        }
    }
}
