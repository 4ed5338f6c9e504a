import Foundation
import HaulOperations
import HaulTestSupport
import Testing

/// A ResultOperation whose work never finishes by itself: the test finishes it.
private final class IdleResultOperation: ResultOperation<Int>, @unchecked Sendable {
    override func execute() {}
}

@Suite("Operations review hazards", .timeLimit(.minutes(1)))
struct OperationsReviewHazardTests {
    /// ResultOperation.result: "The outcome, or `nil` while the operation has not finished", a result given with
    /// `finish(with:)` before `start()` included.
    @Test("result stays nil until the operation has finished")
    func resultNilUntilFinished() {
        let operation = IdleResultOperation(name: "early")
        operation.finish(returning: 1)
        #expect(!operation.isFinished)
        #expect(operation.result == nil, "a result is visible on an operation that has not finished")
        operation.start()
        #expect(operation.isFinished)
        #expect((try? operation.result?.get()) == 1)
    }

    /// ResultOperation.value: "Cancellation travels both ways: ... if the operation is cancelled, this throws."
    /// Cancelled while its queue is suspended (or before it is in one), the operation is not finished until a queue
    /// starts it; `value` throws without waiting for that.
    @Test("value throws once the operation is cancelled, even in a suspended queue")
    func valueThrowsWhenCancelledInSuspendedQueue() async throws {
        let queue = OperationQueue()
        queue.isSuspended = true
        let operation = AsyncBlockOperation(name: "never-started") { 1 }
        queue.addOperation(operation)
        let threw = Locked<Bool?>(nil)
        let waiter = Task {
            do {
                _ = try await operation.value
                threw.withLock { $0 = false }
            } catch { threw.withLock { $0 = true } }
        }
        try await Task.sleep(for: .milliseconds(50))
        operation.cancel()
        let deadline = ContinuousClock.now + .seconds(3)
        while threw.withLock({ $0 }) == nil, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(threw.withLock { $0 } == true, "value did not end within 3 s of the operation's cancellation")
        queue.isSuspended = false  // lets a hung `value` end, so the test does
        _ = await waiter.value
    }
}
