import HaulOperations

/// Runs an operation with a time limit that holds even when the operation ignores cancellation: a statement on a
/// connection whose peer went silent waits for its answer until TCP gives up (hours), and postgres-nio's
/// queries do not stop when their task is cancelled. The operation runs in a task of its own, which is cancelled and
/// left to end by itself when the time is up.
enum Deadline {
    /// The operation took longer than `duration`.
    struct Expired: Error {
        let duration: Duration
    }

    /// The first result, and the continuation waiting for it: whichever comes second completes the pair.
    private enum Slot<Value: Sendable> {
        case empty
        case waiting(CheckedContinuation<Value, any Error>)
        case done(Result<Value, any Error>)
        case delivered
    }

    static func run<Value: Sendable>(
        within duration: Duration, _ operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        let slot = Locked(Slot<Value>.empty)
        // The continuation is resumed after the lock is released.
        @Sendable func finish(_ result: Result<Value, any Error>) {
            let waiting: CheckedContinuation<Value, any Error>? = slot.withLock { slot in
                switch slot {
                case .empty:
                    slot = .done(result)
                    return nil
                case .waiting(let continuation):
                    slot = .delivered
                    return continuation
                case .done, .delivered:
                    return nil
                }
            }
            waiting?.resume(with: result)
        }
        let running = Task {
            do { finish(.success(try await operation())) } catch { finish(.failure(error)) }
        }
        let timer = Task {
            try? await Task.sleep(for: duration)
            guard !Task.isCancelled else { return }
            finish(.failure(Expired(duration: duration)))
            running.cancel()
        }
        defer { timer.cancel() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
                let early: Result<Value, any Error>? = slot.withLock { slot in
                    if case .done(let result) = slot {
                        slot = .delivered
                        return result
                    }
                    slot = .waiting(continuation)
                    return nil
                }
                if let early { continuation.resume(with: early) }
            }
        } onCancel: {
            running.cancel()
        }
    }
}
