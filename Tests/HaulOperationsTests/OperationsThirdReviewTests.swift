import Foundation
import HaulTestSupport
import Testing

@testable import HaulOperations

/// A ResultOperation whose work never finishes by itself: the test finishes it.
private final class PendingResultOperation: ResultOperation<Int>, @unchecked Sendable {
    // unchecked Sendable: no state of its own.
    override func execute() {}
}

@Suite("Operations third review", .timeLimit(.minutes(1)))
struct OperationsThirdReviewTests {
    /// Polls `ended` until it is set or `seconds` have passed; returns its value.
    private static func outcome(of ended: Locked<Bool?>, within seconds: Int) async throws -> Bool? {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while ended.withLock({ $0 }) == nil, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        return ended.withLock { $0 }
    }

    /// OperationGroup.finished(): "Waits ... until every member has finished." Nothing says it may be awaited once
    /// only: a second wait, after the group has finished or from a second task meanwhile, returns as the first.
    @Test("a finished group can be awaited again, and by two tasks at once")
    func groupAwaitedTwice() async throws {
        let member = AsyncBlockOperation(name: "one") { 1 }
        let group = OperationGroup([member])
        let first = Locked<Bool?>(nil)
        let second = Locked<Bool?>(nil)
        let waiters = [first, second].map { ended in
            Task {
                do {
                    try await group.finished()
                    ended.withLock { $0 = true }
                } catch { ended.withLock { $0 = false } }
            }
        }
        OperationQueue().addOperation(member)
        let firstEnded = try await Self.outcome(of: first, within: 3)
        let secondEnded = try await Self.outcome(of: second, within: 3)
        #expect(firstEnded == true && secondEnded == true, "one of two tasks awaiting the same group never returned")

        let again = Locked<Bool?>(nil)
        let late = Task {
            try await group.finished()
            again.withLock { $0 = true }
        }
        let lateEnded = try await Self.outcome(of: again, within: 3)
        #expect(lateEnded == true, "finished() hangs on a group that finished")
        // A hung waiter is cancelled so that the test ends; it still never returns, so it is not awaited.
        for waiter in waiters { waiter.cancel() }
        late.cancel()
    }

    /// OperationGroup.finished(): "If the awaiting task is cancelled, the members are cancelled, and this still waits
    /// for them to finish (so no member's work outlives the call)". A member cancelled before it started has no work
    /// to outlive the call, and finishes only once a queue starts it: never while its queue is suspended. `value`
    /// throws at once in that case; the group's wait must end too.
    @Test("cancelling a task awaiting a group ends the wait though a member's queue is suspended")
    func groupWaitCancelledInSuspendedQueue() async throws {
        let queue = OperationQueue()
        queue.isSuspended = true
        let members = [AsyncBlockOperation(name: "a") { 1 }, AsyncBlockOperation(name: "b") { 2 }]
        let group = OperationGroup(members)
        queue.addOperations(members)
        let threw = Locked<Bool?>(nil)
        let waiter = Task {
            do {
                try await group.finished()
                threw.withLock { $0 = false }
            } catch { threw.withLock { $0 = $0 ?? (error is CancellationError) } }
        }
        waiter.cancel()
        let ended = try await Self.outcome(of: threw, within: 3)
        #expect(ended == true, "finished() did not end within 3 s of its task's cancellation")
        #expect(members.allSatisfy { $0.isCancelled })
        queue.isSuspended = false  // lets a hung wait end, so the test does
        _ = await waiter.result
    }

    /// ResultOperation.result: "Set exactly once: the first of finish(with:), a cancellation before start, or a plain
    /// finish() (which records missingResult) wins." A plain finish() before start came first.
    @Test("finish() before start, then finish(returning:): the first call's missing result stands")
    func plainFinishFirstWins() throws {
        let operation = PendingResultOperation(name: "finished early")
        operation.finish()
        operation.finish(returning: 1)
        operation.start()
        #expect(operation.isFinished)
        let result = try #require(operation.result)
        #expect((try? result.get()) == nil, "a value given after the plain finish() replaced its missing result")
    }
}
