/// The lifecycle of one ``AsyncOperation`` as a value type: every transition is decided here, under the
/// owner's lock, and returns what the owner must do *after* releasing the lock (KVO notifications, running
/// the work, calling back). Keeping the decisions free of side effects makes "finishes exactly once"
/// checkable without threads, and keeps KVO notifications out of the critical section (on Darwin an
/// observer may read the operation's properties synchronously from inside `didChangeValue`).
struct OperationLifecycle {
    enum Phase: Equatable {
        /// Not started yet (waiting in a queue, or never added to one).
        case pending
        /// `start()` has claimed the operation and is announcing `isExecuting`.
        case starting
        case executing
        case finished
    }

    enum StartAction: Equatable {
        /// Announce `isExecuting`, then call ``enteredExecuting()``.
        case beginExecuting
        /// Cancelled (or finished) before it ran: announce `isFinished` without running the work.
        case finishWithoutExecuting
        /// `start()` was called a second time: do nothing.
        case ignore
    }

    enum EnteredAction: Equatable {
        /// Run the work.
        case execute
        /// `finish()` arrived while `start()` was announcing `isExecuting`: finish now, skip the work.
        case finish
    }

    enum FinishAction: Equatable {
        /// This call won the right to finish: announce `isExecuting = false`, `isFinished = true`.
        case announceFinished
        /// Already finished, already being finished, or deferred until `start()`: nothing to do.
        case ignore
    }

    private(set) var phase: Phase = .pending
    /// Set once some caller has won the finish transition; later callers are ignored.
    private var finishClaimed = false
    /// `finish()` was called before the work started; `start()` will finish without executing.
    private var finishRequestedEarly = false

    var isExecuting: Bool { phase == .executing }
    var isFinished: Bool { phase == .finished }

    mutating func start(isCancelled: Bool) -> StartAction {
        guard phase == .pending, !finishClaimed else { return .ignore }
        if isCancelled || finishRequestedEarly {
            finishClaimed = true
            return .finishWithoutExecuting
        }
        phase = .starting
        return .beginExecuting
    }

    mutating func enteredExecuting() -> EnteredAction {
        precondition(phase == .starting, "enteredExecuting() outside start()")
        phase = .executing
        if finishRequestedEarly {
            finishClaimed = true
            return .finish
        }
        return .execute
    }

    mutating func finish() -> FinishAction {
        if finishClaimed { return .ignore }
        switch phase {
        case .pending, .starting:
            finishRequestedEarly = true
            return .ignore
        case .executing:
            finishClaimed = true
            return .announceFinished
        case .finished:
            return .ignore
        }
    }

    /// Called by the winner of a finish transition once it has announced `willChange`.
    mutating func markFinished() {
        precondition(finishClaimed, "markFinished() without a claimed finish")
        phase = .finished
    }
}
