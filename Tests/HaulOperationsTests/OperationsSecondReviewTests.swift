import Dispatch
import Foundation
import HaulTestSupport
import Testing

@testable import HaulOperations

/// A ResultOperation whose work never finishes by itself: the test finishes it.
private final class HeldResultOperation: ResultOperation<Int>, @unchecked Sendable {
    // unchecked Sendable: no state of its own.
    override func execute() {}
}

@Suite("Operations second review", .timeLimit(.minutes(1)))
struct OperationsSecondReviewTests {
    /// ResultOperation.result: "Set exactly once: the first of finish(with:), a cancellation before start, or a plain
    /// finish() wins."
    @Test("cancelled before start, a later finish(with:) does not replace the cancellation")
    func cancellationBeforeStartWins() throws {
        let operation = HeldResultOperation(name: "cancelled first")
        operation.cancel()
        operation.finish(returning: 1)
        operation.start()
        #expect(operation.isFinished)
        let result = try #require(operation.result)
        #expect(throws: OperationError.self) { try result.get() }
        #expect((try? result.get()) == nil, "a value given after the cancellation replaced it")
    }

    /// OperationGroup.completionOperation: "Add it to any queue". Waiting for the last report on the completion's
    /// queue thread stalls that queue; a progress callback that syncs onto it (the main queue, a state queue)
    /// deadlocks with the completion.
    @Test("the completion operation does not hold its queue's thread while the last member is reported")
    func completionLeavesItsQueueFree() async throws {
        let serial = DispatchQueue(label: "state")
        let member = HeldResultOperation(name: "member")
        let group = OperationGroup([member])
        let completionQueue = OperationQueue()
        completionQueue.underlyingQueue = serial
        let reportedWhenCompletionRan = Locked<Bool?>(nil)
        let reported = Locked(false)
        let completion = group.completionOperation {
            reportedWhenCompletionRan.withLock { $0 = reported.withLock { $0 } }
        }
        let queueFreeDuringReport = Locked<Bool?>(nil)
        group.onMemberFinished = { _, _ in
            // Gives the completion every chance to start (it is ready once the member is marked finished); then
            // the state queue must still answer.
            let deadline = Date().addingTimeInterval(1)
            while !completion.isExecuting, Date() < deadline { usleep(1000) }
            let answered = DispatchSemaphore(value: 0)
            serial.async { answered.signal() }
            queueFreeDuringReport.withLock { $0 = answered.wait(timeout: .now() + 3) == .success }
            reported.withLock { $0 = true }
        }
        completionQueue.addOperation(completion)
        member.start()
        member.finish(returning: 1)
        try await [completion].allFinished()
        #expect(queueFreeDuringReport.withLock { $0 } == true, "the completion held the state queue during the report")
        #expect(reportedWhenCompletionRan.withLock { $0 } == true)
    }

    /// OperationGroup: an empty group's completion operation runs at once, and `finished()` returns.
    @Test("an empty group: the completion runs and finished() returns")
    func emptyGroup() async throws {
        let group = OperationGroup([])
        let ran = Locked(false)
        let completion = group.completionOperation { ran.withLock { $0 = true } }
        OperationQueue().addOperation(completion)
        try await [completion].allFinished()
        try await group.finished()
        #expect(ran.withLock { $0 })
    }
}
