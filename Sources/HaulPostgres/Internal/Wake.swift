import HaulOperations

/// A wake-up for one waiting task at a time: ``signal()`` ends the current wait, or the next one if nobody waits.
/// Used where a loop sleeps until something may have changed (a notification, a finished download) or its poll
/// interval passes.
final class Wake: Sendable {
    private struct State {
        var pending = false
        var waiter: CheckedContinuation<Void, Never>?
        /// Which wait a timer belongs to: a timer of an earlier wait must not end this one.
        var generation = 0
        /// The wait whose timer fired before it began to wait (it then does not wait at all).
        var expired = 0
    }

    private let state = Locked(State())

    /// Ends the current wait, or the next.
    func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.pending = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Waits for a signal, at most `duration`; returns at once when the task is cancelled.
    func wait(upTo duration: Duration) async {
        let generation = state.withLock { state in
            state.generation += 1
            return state.generation
        }
        let timer = Task { [weak self] in
            try? await Task.sleep(for: duration)
            if !Task.isCancelled { self?.expire(generation) }
        }
        defer { timer.cancel() }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = state.withLock { state in
                    if state.pending || state.expired == generation || Task.isCancelled {
                        state.pending = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        } onCancel: {
            signal()
        }
    }

    /// Ends wait number `generation` if it is still the one waiting.
    private func expire(_ generation: Int) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.generation == generation else { return nil }
            guard let waiter = state.waiter else {
                state.expired = generation
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }
}
