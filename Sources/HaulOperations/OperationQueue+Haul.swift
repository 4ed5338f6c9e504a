public import Foundation

extension OperationQueue {
    /// Adds `operations` without waiting for them: the form of `addOperations(_:waitUntilFinished:)` that
    /// async code may call (Foundation marks that method unavailable from asynchronous contexts, even with
    /// `waitUntilFinished: false`). Await them with ``Swift/Sequence/allFinished()`` or an ``OperationGroup``.
    public func addOperations(_ operations: [Operation]) {
        addOperations(operations, waitUntilFinished: false)
    }

    /// Runs `body` as an operation on this queue — waiting for a slot under `maxConcurrentOperationCount`,
    /// like any other operation — and returns its value.
    ///
    /// Cancelling the awaiting task cancels the operation (and the task running `body`).
    ///
    /// ```swift
    /// let queue = OperationQueue()
    /// queue.maxConcurrentOperationCount = 2
    /// let pages = try await withThrowingTaskGroup(of: Data.self) { group in
    ///     for url in urls { group.addTask { try await queue.run { try await fetch(url) } } }  // 2 at a time
    ///     return try await group.reduce(into: []) { $0.append($1) }
    /// }
    /// ```
    public func run<Output: Sendable>(
        name: String? = nil,
        priority: Operation.QueuePriority = .normal,
        _ body: @escaping @Sendable () async throws -> Output
    ) async throws -> Output {
        let operation = AsyncBlockOperation(name: name, body)
        operation.queuePriority = priority
        addOperation(operation)
        return try await operation.value
    }

    /// Waits, without blocking a thread, until every operation that is in the queue at the time of the call
    /// has finished. Operations added later are not waited for (unlike `waitUntilAllOperationsAreFinished`,
    /// this never blocks a thread and never stalls the queue with a barrier).
    ///
    /// - Throws: `CancellationError` if the awaiting task is cancelled; the queue's operations are left alone.
    public func allOperationsFinished() async throws {
        try await operations.allFinished()
    }
}

extension Sequence where Element: Operation {
    /// Waits, without blocking a thread, until every operation in the sequence has finished.
    ///
    /// - Throws: `CancellationError` if the awaiting task is cancelled; the operations are left alone (use
    ///   ``OperationGroup/finished()`` to cancel them with the wait).
    public func allFinished() async throws {
        let operations = Array(self)
        if operations.isEmpty { return }
        let done = OneShot<Bool>()
        let stop = FinishNotifier.whenAllFinished(operations) { done.resolve(true) }
        let finished = await withTaskCancellationHandler {
            await done.wait()
        } onCancel: {
            if done.resolve(false) { stop() }
        }
        if !finished { throw CancellationError() }
    }
}
