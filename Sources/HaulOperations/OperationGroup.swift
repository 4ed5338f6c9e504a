public import Foundation

/// What a group does when one of its members fails.
public enum FailurePolicy: Sendable, Hashable {
    /// Let the other members run to the end (the default).
    case continueOthers
    /// Cancel every other member at the first failure (a cancellation is not a failure).
    case cancelOthers
}

/// A set of operations treated as one: a completion operation after all of them, a count of finished
/// members, awaiting them from async code, and a failure policy.
///
/// ```swift
/// let group = OperationGroup(downloads, failurePolicy: .cancelOthers)
/// group.onMemberFinished = { done, total in print("\(done) / \(total) files downloaded") }
/// let allDone = group.completionOperation { print("all finished") }
/// queue.addOperations(downloads + [allDone], waitUntilFinished: false)
/// try await group.finished()
/// ```
///
/// Failures are seen on members that are ``ResultOperation``s; other `Operation`s count as finished members.
public final class OperationGroup: Sendable {
    /// The members, in the order given.
    public let operations: [Operation]
    /// What happens to the other members when one fails.
    public let failurePolicy: FailurePolicy

    private struct State {
        var finishedCount = 0
        var onMemberFinished: (@Sendable (_ finished: Int, _ total: Int) -> Void)?
        var firstFailure: (any Error)?
        /// Counts not yet handed to `onMemberFinished`, oldest first.
        var undelivered: [Int] = []
        /// A thread is draining `undelivered`; others only append.
        var isDelivering = false
    }

    private let state = Locked(State())
    /// Resolved once the last member's finish has been reported; any number of ``finished()`` calls wait for it.
    private let allFinished = ResultBox<Void>()
    /// Finishes once the last member's finish has been reported (``onMemberFinished``). Completion operations depend
    /// on it, so none of them occupies a queue's thread while that report runs.
    private let lastReported = EventOperation(name: "HaulOperations.OperationGroup.lastReported")

    /// Creates a group over `operations`; it starts watching them at once (add them to a queue as usual).
    public init(_ operations: [Operation], failurePolicy: FailurePolicy = .continueOthers) {
        self.operations = operations
        self.failurePolicy = failurePolicy
        lastReported.start()
        if operations.isEmpty {
            allFinished.resolve(())
            lastReported.finish()
        }
        for operation in operations {
            FinishNotifier.whenAllFinished([operation]) { [self] in memberFinished(operation) }
        }
    }

    /// Called after each member finishes, with the number finished so far and the total, on the finishing
    /// member's thread. Set it before the members start to see every step.
    public var onMemberFinished: (@Sendable (_ finished: Int, _ total: Int) -> Void)? {
        get { state.withLock { $0.onMemberFinished } }
        set { state.withLock { $0.onMemberFinished = newValue } }
    }

    /// How many members have finished.
    public var finishedCount: Int { state.withLock { $0.finishedCount } }

    /// The first member failure seen (not counting cancellations), if any.
    public var firstFailure: (any Error)? { state.withLock { $0.firstFailure } }

    /// An operation that runs `block` after every member has finished and ``onMemberFinished`` has been called
    /// for the last one (the "completion operation" of the classic OperationQueue recipes). Add it to any queue,
    /// with or after the members.
    public func completionOperation(_ block: @escaping @Sendable () -> Void) -> BlockOperation {
        // A member's dependents may start as soon as it is marked finished, a moment before its finish is counted
        // and reported on the member's thread: the completion also depends on the end of that report.
        let completion = BlockOperation(block: block)
        for operation in operations { completion.addDependency(operation) }
        completion.addDependency(lastReported)
        return completion
    }

    /// Cancels every member, those not running first: none of them starts in a place a running one frees.
    public func cancelAll() {
        Self.cancel(operations)
    }

    /// Cancels `members`, those not running first: cancelled in order, a running one could finish before the others
    /// are cancelled, and its queue start one of them.
    private static func cancel(_ members: [Operation]) {
        for operation in members where !operation.isExecuting { operation.cancel() }
        for operation in members where !operation.isCancelled { operation.cancel() }
    }

    /// Waits, without blocking a thread, until every member has finished.
    ///
    /// If the awaiting task is cancelled, the members are cancelled, and this still waits for those that started to
    /// finish (so no member's work outlives the call) before throwing `CancellationError`. A member cancelled before
    /// it started never runs; it is not waited for (its queue may be suspended, or busy, for as long as it likes).
    public func finished() async throws {
        let ended = OneShot<Void>()
        allFinished.whenResolved { _ in ended.resolve(()) }
        await withTaskCancellationHandler {
            await ended.wait()
        } onCancel: {
            cancelAll()
            // Once cancelled, an AsyncOperation still pending never executes: `start()` reads the cancellation in
            // the critical section that ends `isPending`. Other operations are waited for until they finish.
            let started = operations.filter { !$0.isFinished && ($0 as? AsyncOperation)?.isPending != true }
            if started.isEmpty {
                ended.resolve(())
            } else {
                FinishNotifier.whenAllFinished(started) { ended.resolve(()) }
            }
        }
        try Task.checkCancellation()
    }

    private func memberFinished(_ operation: Operation) {
        var failure: (any Error)?
        if case .failure(let error)? = (operation as? any ResultReporting)?.failureIfAny,
            !OperationError.reportsCancellation(error)
        {
            failure = error
        }
        let (cancelOthers, drains) = state.withLock { state in
            state.finishedCount += 1
            state.undelivered.append(state.finishedCount)
            var cancelOthers = false
            if let failure, state.firstFailure == nil {
                state.firstFailure = failure
                cancelOthers = failurePolicy == .cancelOthers
            }
            let drains = !state.isDelivering
            state.isDelivering = true
            return (cancelOthers, drains)
        }
        if cancelOthers {
            Self.cancel(operations.filter { $0 !== operation })
        }
        if drains { deliverCounts() }
    }

    /// Hands the pending counts to `onMemberFinished` strictly in order. Members finish on many threads; the
    /// callback must never see "3 / 10" before "2 / 10", and no lock is held while it runs (it may cancel
    /// the group, finishing members re-entrantly on this very thread: those counts join the queue).
    private func deliverCounts() {
        while true {
            let (counts, callback) = state.withLock { state in
                let counts = state.undelivered
                state.undelivered.removeAll()
                if counts.isEmpty { state.isDelivering = false }
                return (counts, state.onMemberFinished)
            }
            if counts.isEmpty { return }
            for count in counts {
                callback?(count, operations.count)
                // Resolved after the last count is delivered, so `finished()` returns after the final callback.
                if count == operations.count {
                    allFinished.resolve(())
                    lastReported.finish()
                }
            }
        }
    }
}

/// Lets a group read a member's failure without knowing its output type.
protocol ResultReporting {
    var failureIfAny: Result<Void, any Error>? { get }
}

extension ResultOperation: ResultReporting {
    var failureIfAny: Result<Void, any Error>? {
        result.map { $0.map { _ in () } }
    }
}

/// An operation that executes from the moment it is started until ``AsyncOperation/finish()`` is called: a
/// dependency that holds its dependents back until an event, without holding a thread.
final class EventOperation: AsyncOperation, @unchecked Sendable {
    // unchecked Sendable: no state of its own.
    override func execute() {}
}
