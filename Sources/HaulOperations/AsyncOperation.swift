public import Foundation

/// An `Operation` that is finished only when its work says so.
///
/// A plain `Operation` (or `BlockOperation`) is finished as soon as `main()` returns, so a URLSession task
/// started inside it is still running when the queue starts the next one. Subclass `AsyncOperation`
/// instead, start the work in ``execute()`` and call ``finish()`` when it is really done:
///
/// ```swift
/// final class Countdown: AsyncOperation, @unchecked Sendable {  // unchecked: all state is in the base class
///     override func execute() {
///         DispatchQueue.global().asyncAfter(deadline: .now() + 1) { self.finish() }
///     }
/// }
/// let queue = OperationQueue()
/// queue.maxConcurrentOperationCount = 1  // one at a time, in order
/// queue.addOperations([Countdown(), Countdown()], waitUntilFinished: false)
/// ```
///
/// Guarantees, on Linux and Apple platforms alike:
/// - the state moves `ready -> executing -> finished` under a lock, and every change is announced with
///   `willChangeValue`/`didChangeValue(forKey:)` for `isExecuting` and `isFinished`, which is what makes an
///   `OperationQueue` move on (on Linux the queue advances *only* on `didChangeValue(forKey: "isFinished")`);
/// - it finishes exactly once: further ``finish()`` calls, from any thread, are ignored;
/// - cancelled before it starts, it finishes without calling ``execute()``;
/// - cancelled while executing, the handlers registered with ``onCancel(_:)`` run once, so the work can stop;
/// - `isReady` keeps `Operation`'s meaning: all dependencies finished (or the operation was cancelled).
open class AsyncOperation: Operation, @unchecked Sendable {
    // unchecked Sendable: Operation is @unchecked Sendable; all mutable state here is inside `state`.

    private struct State {
        var lifecycle = OperationLifecycle()
        var cancelHandlers: [@Sendable () -> Void] = []
        var cancelHandled = false
        var finishObservers: [@Sendable () -> Void] = []
    }

    private let state = Locked(State())

    /// Creates an operation; give it a `name` to make errors and logs say which one it was.
    public init(name: String? = nil) {
        super.init()
        self.name = name
    }

    /// Always `true`: the work outlives `start()`.
    open override var isAsynchronous: Bool { true }

    /// `true` from the moment the work starts until ``finish()``.
    open override var isExecuting: Bool { state.withLock { $0.lifecycle.isExecuting } }

    /// `true` once the operation has finished (or was cancelled before it started and has been started).
    open override var isFinished: Bool { state.withLock { $0.lifecycle.isFinished } }

    /// Starts the operation; called by an `OperationQueue`. Do not override: override ``execute()``.
    public final override func start() {
        let action = state.withLock { $0.lifecycle.start(isCancelled: isCancelled) }
        switch action {
        case .ignore:
            return
        case .finishWithoutExecuting:
            announceFinish(wasExecuting: false)
        case .beginExecuting:
            willChangeValue(forKey: "isExecuting")
            let entered = state.withLock { $0.lifecycle.enteredExecuting() }
            didChangeValue(forKey: "isExecuting")
            switch entered {
            case .execute: execute()
            case .finish: announceFinish(wasExecuting: true)
            }
        }
    }

    /// The work of the operation. Start it here and call ``finish()`` when it is done, on any thread.
    ///
    /// Called at most once, on the queue's thread; not called at all if the operation was cancelled first.
    /// The default implementation finishes immediately.
    open func execute() {
        finish()
    }

    /// Marks the operation finished so that its queue and dependents move on.
    ///
    /// Safe to call from any thread, any number of times: only the first call counts. Called before the
    /// operation has started, it makes `start()` finish without calling ``execute()``.
    public final func finish() {
        finishRequested()
        let action = state.withLock { $0.lifecycle.finish() }
        if action == .announceFinished {
            announceFinish(wasExecuting: true)
        }
    }

    /// Cancels the operation: before it starts, it will finish without executing; while it executes, the
    /// handlers registered with ``onCancel(_:)`` run (once, on the cancelling thread).
    open override func cancel() {
        super.cancel()
        let handlers = state.withLock { state -> [@Sendable () -> Void] in
            guard !state.cancelHandled, !state.lifecycle.isFinished else { return [] }
            state.cancelHandled = true
            defer { state.cancelHandlers = [] }
            return state.cancelHandlers
        }
        for handler in handlers { handler() }
    }

    /// Registers work to run when the operation is cancelled, e.g. cancelling the request it started.
    ///
    /// Runs immediately (on the calling thread) if the operation was already cancelled; never runs once the
    /// operation has finished.
    public final func onCancel(_ handler: @escaping @Sendable () -> Void) {
        let runNow = state.withLock { state -> Bool in
            if state.lifecycle.isFinished { return false }
            if state.cancelHandled { return true }
            state.cancelHandlers.append(handler)
            return false
        }
        if runNow { handler() }
    }

    /// `true` until `start()` has begun executing the operation or it has finished: cancelled while pending, it
    /// will never execute.
    var isPending: Bool { state.withLock { $0.lifecycle.phase == .pending } }

    /// Runs `observer` once the operation has finished (immediately if it already has), on the finishing
    /// thread, after `isFinished` has been announced.
    func addFinishObserver(_ observer: @escaping @Sendable () -> Void) {
        let runNow = state.withLock { state -> Bool in
            if state.lifecycle.isFinished { return true }
            state.finishObservers.append(observer)
            return false
        }
        if runNow { observer() }
    }

    /// Called at the start of every ``finish()`` call, before the lifecycle decides who finishes. Subclasses in this
    /// module record there what a plain `finish()` means, so that the first call's outcome is the one kept.
    func finishRequested() {}

    /// Called once, by the caller that won the finish transition, before `isFinished` becomes true.
    /// Subclasses in this module use it to make sure a result exists before anyone can observe the finish.
    func prepareToFinish(executed: Bool) {}

    private func announceFinish(wasExecuting: Bool) {
        prepareToFinish(executed: wasExecuting)
        if wasExecuting { willChangeValue(forKey: "isExecuting") }
        willChangeValue(forKey: "isFinished")
        let observers = state.withLock { state -> [@Sendable () -> Void] in
            state.lifecycle.markFinished()
            // Handlers and observers may capture the work's resources; drop them with the finish.
            state.cancelHandlers = []
            defer { state.finishObservers = [] }
            return state.finishObservers
        }
        if wasExecuting { didChangeValue(forKey: "isExecuting") }
        didChangeValue(forKey: "isFinished")
        for observer in observers { observer() }
    }
}
