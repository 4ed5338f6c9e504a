package import HaulOperations

/// A value a test sets once and any number of tasks await: a latch that parks work until the test opens it
/// (`Gate<Void>`), or the one outcome of something the test waits for (`Gate<String>`). It is the queue's own
/// one-shot value (waiting blocks no thread; waiters are woken after its lock).
package typealias Gate<Value: Sendable> = ResultBox<Value>

extension ResultBox {
    /// Opens the gate with `value` and wakes every waiter; opening again does nothing.
    package func open(with value: Value) { resolve(value) }

    /// Calls `body` with the value once the gate is open (at once, on this thread, if it is).
    package func whenOpen(_ body: @escaping @Sendable (Value) -> Void) { whenResolved(body) }
}

extension ResultBox where Value == Void {
    /// Opens the gate.
    package func open() { resolve(()) }
}
