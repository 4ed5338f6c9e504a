import Foundation
import HaulOperations
import Synchronization

extension DownloadQueue {
    /// Every event from now on, in one order for all subscribers. Each access makes a new subscription, which
    /// ends when the sequence's consumer stops iterating (or the queue is gone). Events are buffered until
    /// read, so a slow reader misses nothing.
    ///
    /// ```swift
    /// for await event in queue.events {
    ///     switch event {
    ///     case .download(let id, .progress(let progress)): draw(id, progress)
    ///     case .batchProgress(let batch): drawTotals(batch)
    ///     default: break
    ///     }
    /// }
    /// ```
    public var events: AsyncStream<QueueEvent> { events(including: QueueEvent.Kind.all) }

    /// The events of the given kinds from now on, like ``events``. Events of kinds no subscriber takes are not
    /// made at all, which matters for large batches of small files: a display that draws no bars wants
    /// neither ``QueueEvent/Kind/progress`` nor ``QueueEvent/Kind/batchProgress``.
    ///
    /// ```swift
    /// for await case .download(let id, .failed(let error)) in queue.events(including: [.failed]) {
    ///     print("\(id) failed: \(error)")
    /// }
    /// ```
    public func events(including kinds: Set<QueueEvent.Kind>) -> AsyncStream<QueueEvent> {
        let (stream, continuation) = AsyncStream<QueueEvent>.makeStream(bufferingPolicy: .unbounded)
        locked { state in subscribe(continuation, to: kinds, in: &state) }
        return stream
    }

    /// Calls `observer` with each event of `kinds` from now on, in the one order every subscriber sees, until the
    /// observation is cancelled (an event sent as it is cancelled may still arrive). For the package's services that
    /// keep their own account of the queue (the daemon, metrics): a sequence wakes its consumer's task for every
    /// event, which for thousands of small files a second costs more than the account itself.
    ///
    /// It is called on the thread that sends the queue's events, one event at a time and never under the queue's
    /// lock, so it may call the queue; it must return quickly, since the events behind it wait for it. It must not
    /// call the queue while holding a lock of its own that the observer also takes.
    package func observe(
        including kinds: Set<QueueEvent.Kind>, _ observer: @escaping @Sendable (QueueEvent) -> Void
    ) -> EventObservation {
        let key = locked { state in addSubscriber(.observer(observer), to: kinds, in: &state) }
        return EventObservation { [weak self] in self?.unsubscribe(key) }
    }

    /// Adds a subscriber whose sequence ends its subscription when its consumer stops iterating.
    private func subscribe(
        _ continuation: AsyncStream<QueueEvent>.Continuation, to kinds: Set<QueueEvent.Kind>, in state: inout State
    ) {
        let key = addSubscriber(.stream(continuation), to: kinds, in: &state)
        // Runs on the consumer's cancellation too (under its task's own lock), which is why nothing is ever yielded
        // or resumed under the queue's lock (see State).
        continuation.onTermination = { [weak self] _ in self?.unsubscribe(key) }
    }

    private func addSubscriber(
        _ sink: Subscriber.Sink, to kinds: Set<QueueEvent.Kind>, in state: inout State
    ) -> UInt64 {
        state.nextSubscriber += 1
        let key = state.nextSubscriber
        state.subscribers[key] = Subscriber(sink: sink, kinds: kinds)
        interestBits.store(state.updateInterest(), ordering: .releasing)
        return key
    }

    private func unsubscribe(_ key: UInt64) {
        locked { state in
            state.subscribers.removeValue(forKey: key)
            interestBits.store(state.updateInterest(), ordering: .releasing)
        }
    }

    /// Waits until every event published so far has been sent to its subscribers: an observer has returned from each
    /// (``observe(including:_:)``). ``waitUntilIdle()`` may return before the last events are sent, when another thread
    /// is sending the ones before them.
    package func eventsSent() async {
        let box = ResultBox<Void>()
        mutate { state in state.outbox.append(.mark(box)) }
        await box.wait()
    }

    /// Ends every event sequence subscribed so far: each delivers the events it has buffered, then ends (an observer
    /// hears no more). For a program done with the queue: after ``waitUntilIdle()`` every event of the batch is
    /// buffered, so a consumer can finish without counting the events it expects.
    public func finishEvents() {
        mutate { state in
            // After every event published so far, in the outbox's order.
            state.outbox.append(.finish(state.subscriberList))
            state.subscribers = [:]
            interestBits.store(state.updateInterest(), ordering: .releasing)
        }
    }

    /// The events of one download, ending with its `.finished` or `.failed`. Subscribes now: events before
    /// this call are not repeated, but the sequence ends at once, with the outcome, if the download has already
    /// ended (its entry leaves the queue in the same hold of the lock that publishes its last event).
    func events(of id: DownloadID, box: ResultBox<Outcome>) -> AsyncStream<DownloadEvent> {
        AsyncStream { continuation in
            let (all, allContinuation) = AsyncStream<QueueEvent>.makeStream(bufferingPolicy: .unbounded)
            let running = locked { state in
                guard state.entries[id.rawValue] != nil else { return false }
                subscribe(
                    allContinuation, to: QueueEvent.Kind.all.subtracting([.queued, .batchProgress]), in: &state)
                return true
            }
            guard running, box.value == nil else {
                allContinuation.finish()
                if let outcome = box.value { continuation.yield(outcome.terminalEvent) }
                continuation.finish()
                return
            }
            let forwarder = Task {
                for await event in all {
                    guard case .download(id, let downloadEvent) = event else { continue }
                    continuation.yield(downloadEvent)
                    if downloadEvent.isTerminal { break }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in forwarder.cancel() }
        }
    }
}

extension Result where Success == DownloadResult, Failure == DownloadError {
    var terminalEvent: DownloadEvent {
        switch self {
        case .success(let result): .finished(result)
        case .failure(let error): .failed(error)
        }
    }
}

extension DownloadEvent {
    /// `.finished` or `.failed`: nothing follows it.
    package var isTerminal: Bool {
        switch self {
        case .finished, .failed: true
        default: false
        }
    }
}

/// An observer of a queue's events (``DownloadQueue/observe(including:_:)``), called until ``cancel()``.
package final class EventObservation: Sendable {
    private let end: Locked<(@Sendable () -> Void)?>

    init(_ end: @escaping @Sendable () -> Void) { self.end = Locked(end) }

    /// Stops the calls (one being sent may still arrive); the second and later calls do nothing.
    package func cancel() {
        let end = end.withLock { end in
            defer { end = nil }
            return end
        }
        end?()
    }

    deinit { cancel() }
}
