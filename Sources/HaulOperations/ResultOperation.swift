import Foundation

/// An ``AsyncOperation`` that produces a typed result, which dependent operations and async code can read.
///
/// Subclass it, do the work in ``AsyncOperation/execute()`` and end with ``finish(with:)`` (or
/// ``finish(returning:)`` / ``finish(throwing:)``). Cancelled before it runs, its result is
/// ``OperationError/Code/cancelled``. Read the result with ``result`` once finished, with ``value`` from async
/// code, or hand it to the next operation with ``AsyncBlockOperation/init(name:consuming:_:)``.
open class ResultOperation<Output: Sendable>: AsyncOperation, @unchecked Sendable {
    // unchecked Sendable: the only state added here is `storage`, a Locked.

    private let storage = Locked<Result<Output, any Error>?>(nil)

    /// The outcome, or `nil` while the operation has not finished.
    ///
    /// Set exactly once: the first of ``finish(with:)``, a cancellation before start, or a plain
    /// ``AsyncOperation/finish()`` (which records ``OperationError/Code/missingResult``) wins.
    public var result: Result<Output, any Error>? {
        // Stored before the finish is announced (``finish(with:)`` before `start()` stores it long before): seen
        // only once it is.
        guard isFinished else { return nil }
        return storage.withLock { $0 }
    }

    /// Finishes the operation with `result`; ignored if the operation already has one, or was cancelled before it
    /// started (its result is then ``OperationError/Code/cancelled``).
    public final func finish(with result: Result<Output, any Error>) {
        // Cancelled while pending, the operation will finish without executing, cancelled: that outcome came first.
        // `start()` reads `isCancelled` in the critical section that ends `isPending`, so it sees this cancellation.
        if !(isCancelled && isPending) {
            storage.withLock { stored in
                if stored == nil { stored = result }
            }
        }
        finish()
    }

    /// Finishes the operation successfully with `value`.
    public final func finish(returning value: Output) {
        finish(with: .success(value))
    }

    /// Finishes the operation with `error`.
    public final func finish(throwing error: any Error) {
        finish(with: .failure(error))
    }

    /// A plain ``AsyncOperation/finish()`` records its missing result at once: a ``finish(with:)`` after it, before
    /// the finish is announced (or before `start()`), comes second and is ignored. Cancelled while pending, the
    /// operation finishes cancelled, as ``finish(with:)`` leaves it.
    override func finishRequested() {
        if !(isCancelled && isPending) { recordMissingResult() }
    }

    override func prepareToFinish(executed: Bool) {
        recordMissingResult()
    }

    /// Stores the result of a finish without one (cancelled, or missing), unless there is one already.
    private func recordMissingResult() {
        let missing: any Error =
            isCancelled
            ? OperationError(.cancelled, operationName: name)
            : OperationError(.missingResult, operationName: name)
        storage.withLock { stored in
            if stored == nil { stored = .failure(missing) }
        }
    }

    /// The output of this operation, as a consumer reads it: the value on success, otherwise an
    /// ``OperationError`` saying this dependency failed (``OperationError/Code/dependencyFailed``, wrapping
    /// its error), was cancelled, or has not finished (``OperationError/Code/missingResult``).
    public func outputForConsumer() throws(OperationError) -> Output {
        switch result {
        case .success(let value):
            return value
        case .failure(let error) where OperationError.reportsCancellation(error):
            throw OperationError(.dependencyCancelled, operationName: name, underlying: error)
        case .failure(let error):
            throw OperationError(.dependencyFailed, operationName: name, underlying: error)
        case nil:
            throw OperationError(.missingResult, operationName: name)
        }
    }

    /// Waits, without blocking a thread, until the operation has finished, and returns its value or throws
    /// its error.
    ///
    /// Cancellation travels both ways: if the awaiting task is cancelled, the operation is cancelled and this
    /// throws ``OperationError/Code/cancelled`` at once (unless the work had completed), without waiting for a
    /// busy or suspended queue to reach the operation; if the operation is cancelled, this throws. The operation
    /// must be in a queue (or started) for this to return otherwise.
    public var value: Output {
        get async throws {
            let finished = OneShot<Bool>()
            addFinishObserver { finished.resolve(true) }
            // Cancelled before it started, it finishes only when a queue starts it: never, in a suspended queue or
            // none. Its outcome is a cancellation either way, so it is thrown now.
            onCancel { [weak self] in
                if self?.isExecuting != true { finished.resolve(false) }
            }
            let ended = await withTaskCancellationHandler {
                await finished.wait()
            } onCancel: {
                self.cancel()
                finished.resolve(false)
            }
            if !ended, !isFinished { throw OperationError(.cancelled, operationName: name) }
            guard let result else { throw OperationError(.missingResult, operationName: name) }
            return try result.get()
        }
    }
}
