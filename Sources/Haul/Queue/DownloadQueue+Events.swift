import Foundation
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

    /// Adds a subscriber whose sequence ends its subscription when its consumer stops iterating.
    private func subscribe(
        _ continuation: AsyncStream<QueueEvent>.Continuation, to kinds: Set<QueueEvent.Kind>, in state: inout State
    ) {
        state.nextSubscriber += 1
        let key = state.nextSubscriber
        state.subscribers[key] = Subscriber(continuation: continuation, kinds: kinds)
        interestBits.store(state.updateInterest(), ordering: .releasing)
        // Runs on the consumer's cancellation too (under its task's own lock), which is why nothing is ever yielded
        // or resumed under the queue's lock (see State).
        continuation.onTermination = { [weak self] _ in
            self?.locked { state in
                state.subscribers.removeValue(forKey: key)
                self?.interestBits.store(state.updateInterest(), ordering: .releasing)
            }
        }
    }

    /// Ends every event sequence subscribed so far: each delivers the events it has buffered, then ends. For a
    /// program done with the queue: after ``waitUntilIdle()`` every event of the batch is buffered, so a consumer
    /// can finish without counting the events it expects.
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
