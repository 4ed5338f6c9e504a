/// A continuation that may be resumed from several racing places (completion, cancellation); only the
/// first resume counts, and one that comes before the continuation is installed is kept for it.
final class OneShot<Value: Sendable>: Sendable {
    private enum State {
        case idle
        case waiting(CheckedContinuation<Value, Never>)
        case resolved(Value)
        case done
    }

    private let state = Locked(State.idle)

    /// Waits for the first ``resolve(_:)``.
    func wait() async -> Value {
        await withCheckedContinuation { continuation in
            let early = state.withLock { state -> Value? in
                if case .resolved(let value) = state {
                    state = .done
                    return value
                }
                state = .waiting(continuation)
                return nil
            }
            if let early { continuation.resume(returning: early) }
        }
    }

    /// Resolves with `value` unless already resolved. Returns `true` if this call was the first.
    @discardableResult
    func resolve(_ value: Value) -> Bool {
        let (continuation, first) = state.withLock { state -> (CheckedContinuation<Value, Never>?, Bool) in
            switch state {
            case .idle:
                state = .resolved(value)
                return (nil, true)
            case .waiting(let continuation):
                state = .done
                return (continuation, true)
            case .resolved, .done:
                return (nil, false)
            }
        }
        continuation?.resume(returning: value)
        return first
    }
}
