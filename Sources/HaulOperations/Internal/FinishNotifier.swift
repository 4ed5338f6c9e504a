import Foundation

/// Calls back when `Operation`s finish, without KVO (which `Operation` lacks on Linux) and without taking
/// the operation's `completionBlock`, which belongs to the user.
enum FinishNotifier {
    /// Waiter operations live here: each depends on the operations it waits for, so Foundation's own
    /// dependency tracking tells us when they finish. Unbounded width: a waiter occupies no slot until ready.
    private static let waiters: OperationQueue = {
        let queue = OperationQueue()
        queue.name = "HaulOperations.FinishNotifier"
        return queue
    }()

    /// Runs `body` once every operation in `operations` has finished. Returns a function that stops `body`
    /// from running if it has not run yet (a waiter then finishes at once instead of holding on).
    @discardableResult
    static func whenAllFinished(
        _ operations: [Operation],
        _ body: @escaping @Sendable () -> Void
    ) -> @Sendable () -> Void {
        // An AsyncOperation tells us directly: no hop through the waiter queue.
        if operations.count == 1, let operation = operations[0] as? AsyncOperation {
            let stopped = Locked(false)
            operation.addFinishObserver {
                if !stopped.withLock({ $0 }) { body() }
            }
            return { stopped.withLock { $0 = true } }
        }
        let waiter = BlockOperation(block: body)
        for operation in operations { waiter.addDependency(operation) }
        waiters.addOperation(waiter)
        // A cancelled BlockOperation becomes ready at once and finishes without running its block.
        return { waiter.cancel() }
    }
}
