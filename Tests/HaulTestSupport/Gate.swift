import HaulOperations

/// A value a test sets once and any number of tasks await: a latch that parks work until the test opens it
/// (`Gate<Void>`), or the one outcome of something the test waits for (`Gate<String>`). Waiting blocks no thread;
/// waiters are woken after the gate's lock.
package final class Gate<Value: Sendable>: Sendable {
    private enum State {
        case closed([@Sendable (Value) -> Void])
        case open(Value)
    }

    private let state = Locked(State.closed([]))

    package init() {}

    /// The value, once the gate is open.
    package var value: Value? {
        state.withLock { state in
            if case .open(let value) = state { return value }
            return nil
        }
    }

    /// Opens the gate with `value` and wakes every waiter; opening again does nothing.
    package func open(with value: Value) {
        let waiting = state.withLock { state -> [@Sendable (Value) -> Void] in
            guard case .closed(let waiting) = state else { return [] }
            state = .open(value)
            return waiting
        }
        for body in waiting { body(value) }
    }

    /// Calls `body` with the value once the gate is open (at once, on this thread, if it is).
    package func whenOpen(_ body: @escaping @Sendable (Value) -> Void) {
        let ready = state.withLock { state -> Value? in
            switch state {
            case .open(let value):
                return value
            case .closed(var waiting):
                waiting.append(body)
                state = .closed(waiting)
                return nil
            }
        }
        if let ready { body(ready) }
    }

    /// Waits until the gate is open; returns its value.
    @discardableResult
    package func wait() async -> Value {
        await withCheckedContinuation { continuation in whenOpen { continuation.resume(returning: $0) } }
    }
}

extension Gate where Value == Void {
    /// Opens the gate.
    package func open() { open(with: ()) }
}
