import Testing

@testable import HaulOperations

@Suite("OperationLifecycle state machine")
struct OperationLifecycleTests {
    @Test("ready -> executing -> finished, finishing once")
    func happyPath() {
        var lifecycle = OperationLifecycle()
        #expect(lifecycle.start(isCancelled: false) == .beginExecuting)
        #expect(!lifecycle.isExecuting)
        #expect(lifecycle.enteredExecuting() == .execute)
        #expect(lifecycle.isExecuting)
        #expect(lifecycle.finish() == .announceFinished)
        #expect(lifecycle.finish() == .ignore)
        lifecycle.markFinished()
        #expect(lifecycle.isFinished && !lifecycle.isExecuting)
        #expect(lifecycle.finish() == .ignore)
        #expect(lifecycle.start(isCancelled: false) == .ignore)
    }

    @Test("cancelled before start finishes without executing")
    func cancelledBeforeStart() {
        var lifecycle = OperationLifecycle()
        #expect(lifecycle.start(isCancelled: true) == .finishWithoutExecuting)
        #expect(lifecycle.finish() == .ignore)
        lifecycle.markFinished()
        #expect(lifecycle.isFinished)
    }

    @Test("finish before start is deferred to start")
    func finishBeforeStart() {
        var lifecycle = OperationLifecycle()
        #expect(lifecycle.finish() == .ignore)
        #expect(!lifecycle.isFinished)
        #expect(lifecycle.start(isCancelled: false) == .finishWithoutExecuting)
    }

    @Test("finish while start announces isExecuting skips the work")
    func finishDuringStart() {
        var lifecycle = OperationLifecycle()
        #expect(lifecycle.start(isCancelled: false) == .beginExecuting)
        #expect(lifecycle.finish() == .ignore)
        #expect(lifecycle.enteredExecuting() == .finish)
        #expect(lifecycle.finish() == .ignore)
        lifecycle.markFinished()
        #expect(lifecycle.isFinished)
    }
}
