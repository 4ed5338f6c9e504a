/// A value set once and awaited by any number of tasks: in Haul, the shared outcome of one queued download, which
/// several handles may await (joined duplicates, the Operation and Combine front ends); in tests, their gate.
package final class ResultBox<Value: Sendable>: Sendable {
    private enum State {
        case pending([Waiter])
        case resolved(Value)
    }

    /// A task waiting for the value, or code to run with it.
    package enum Waiter {
        case task(CheckedContinuation<Value, Never>)
        case callback(@Sendable (Value) -> Void)
    }

    private let state = Locked(State.pending([]))

    /// An unresolved box.
    package init() {}

    /// The value, if already set.
    package var value: Value? {
        state.withLock { state in
            if case .resolved(let value) = state { return value }
            return nil
        }
    }

    /// Waits until the value is set. Cancelling the waiting task does not end the wait (like `Task.value`).
    @discardableResult
    package func wait() async -> Value {
        await withCheckedContinuation { continuation in
            if let ready = enqueue(.task(continuation)) { continuation.resume(returning: ready) }
        }
    }

    /// Calls `body` with the value once it is set (at once, on this thread, if it is), never under a lock: a
    /// waiter that costs no task (``DownloadQueue/downloads(_:window:)`` watches every download it adds).
    package func whenResolved(_ body: @escaping @Sendable (Value) -> Void) {
        if let ready = enqueue(.callback(body)) { body(ready) }
    }

    /// Adds `waiter` unless the value is set already; then returns it, for the caller to hand over after the lock.
    private func enqueue(_ waiter: Waiter) -> Value? {
        state.withLock { state in
            switch state {
            case .resolved(let value):
                return value
            case .pending(var waiters):
                waiters.append(waiter)
                state = .pending(waiters)
                return nil
            }
        }
    }

    /// Sets the value and wakes every waiter; later calls are ignored. Returns `true` for the first call.
    @discardableResult
    package func resolve(_ value: Value) -> Bool {
        guard let wakeup = store(value) else { return false }
        wakeup.run()
        return true
    }

    /// Sets the value, leaving the waiters to ``Wakeup/run()``; `nil` when it was already set.
    ///
    /// The queue stores outcomes while it holds its own lock, so whoever then sees the queue idle also sees
    /// every outcome; waking the waiters is left for after that lock.
    package func store(_ value: Value) -> Wakeup? {
        let waiters = state.withLock { state -> [Waiter]? in
            guard case .pending(let waiters) = state else { return nil }
            state = .resolved(value)
            return waiters
        }
        return waiters.map { Wakeup(waiters: $0, value: value) }
    }

    /// The waiters of a value just stored, to wake.
    package struct Wakeup {
        package let waiters: [Waiter]
        package let value: Value

        package func run() {
            for waiter in waiters {
                switch waiter {
                case .task(let continuation): continuation.resume(returning: value)
                case .callback(let body): body(value)
                }
            }
        }
    }
}
