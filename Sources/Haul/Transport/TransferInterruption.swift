import HaulOperations

/// The engine's way to end one exchange of an ``InterruptibleHTTPTransport`` early (when the transfer stalls),
/// without cancelling the task that runs it. One per attempt; once interrupted it stays interrupted.
///
/// A transport registers what ends its exchange with ``onInterrupt(_:)``; the engine calls ``interrupt()``.
public final class TransferInterruption: Sendable {
    private struct State {
        var interrupted = false
        var handler: (@Sendable () -> Void)?
    }

    private let state = Locked(State())

    /// Creates an interruption that has not happened.
    public init() {}

    /// Whether ``interrupt()`` was called.
    public var isInterrupted: Bool { state.withLock { $0.interrupted } }

    /// Makes `handler` what ends the current exchange (replacing the one registered before). It runs at most once:
    /// on the thread that interrupts, or right here if the interruption already happened.
    public func onInterrupt(_ handler: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            if state.interrupted { return true }
            state.handler = handler
            return false
        }
        if now { handler() }
    }

    /// Interrupts: runs the registered handler, and any registered later. Idempotent.
    public func interrupt() {
        let handler = state.withLock { state -> (@Sendable () -> Void)? in
            guard !state.interrupted else { return nil }
            state.interrupted = true
            defer { state.handler = nil }
            return state.handler
        }
        handler?()
    }
}
