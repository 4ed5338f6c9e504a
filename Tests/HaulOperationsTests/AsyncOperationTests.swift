import Dispatch
import Foundation
import HaulTestSupport
import Testing

@testable import HaulOperations

@Suite("AsyncOperation", .timeLimit(.minutes(1)))
struct AsyncOperationTests {
    @Test("width 1: never more than one executing, submission order kept")
    func widthOneIsSequentialInOrder() async throws {
        let meter = InFlightMeter()
        let gate = Gate<Void>()
        gate.open()  // each operation still finishes asynchronously, from another queue
        let (queue, _) = makeObservableQueue(width: 1)
        let operations = (0..<200).map { GatedOperation(id: $0, meter: meter, gate: gate) }
        queue.addOperations(operations)
        try await operations.allFinished()

        #expect(meter.highest == 1)
        #expect(meter.startOrder == Array(0..<200))
        #expect(meter.finishedCount == 200)
    }

    @Test("width N with N+k held at a gate: the highest number in flight is exactly N", arguments: [2, 4, 8])
    func widthNBoundsConcurrency(width: Int) async throws {
        let meter = InFlightMeter()
        let gate = Gate<Void>()
        let (queue, underlying) = makeObservableQueue(width: width)
        let operations = (0..<(width + 5)).map { GatedOperation(id: $0, meter: meter, gate: gate) }
        queue.addOperations(operations)

        await meter.waitUntilStarted(width)
        // Every start the queue has dispatched so far has run once this barrier passes, so an extra
        // admission would already show in the meter.
        underlying.sync(flags: .barrier) {}
        #expect(meter.current == width)
        #expect(operations.filter(\.isExecuting).count == width)

        gate.open()
        try await operations.allFinished()
        #expect(meter.highest == width)
        #expect(meter.finishedCount == width + 5)
    }

    @Test("dependencies order work across queues")
    func dependenciesOrderWork() async throws {
        let meter = InFlightMeter()
        let gate = Gate<Void>()
        let first = GatedOperation(id: 1, meter: meter, gate: gate)
        let second = GatedOperation(id: 2, meter: meter, gate: gate)
        let third = GatedOperation(id: 3, meter: meter, gate: gate)
        second.addDependency(first)
        third.addDependency(first)
        let (queueA, underlyingA) = makeObservableQueue(width: 8)
        let (queueB, _) = makeObservableQueue(width: 8)
        queueA.addOperations([third, second])
        queueB.addOperation(first)

        await meter.waitUntilStarted(1)
        underlyingA.sync(flags: .barrier) {}
        #expect(meter.startOrder == [1])  // 2 and 3 wait for 1 although their queue has free slots
        #expect(second.isReady == false)

        gate.open()
        try await [first, second, third].allFinished()
        #expect(meter.startOrder.first == 1)
        #expect(Set(meter.startOrder) == [1, 2, 3])
    }

    @Test("cancelled before start: finishes without running execute(), dependents still run")
    func cancelBeforeStart() async throws {
        let meter = InFlightMeter()
        let gate = Gate<Void>()
        gate.open()
        let blocker = GatedOperation(id: 0, meter: meter, gate: Gate<Void>())  // never opens: keeps the queue busy
        let cancelled = GatedOperation(id: 1, meter: meter, gate: gate)
        let dependent = GatedOperation(id: 2, meter: meter, gate: gate)
        dependent.addDependency(cancelled)
        let (queue, _) = makeObservableQueue(width: 1)
        queue.addOperations([blocker, cancelled, dependent])
        await meter.waitUntilStarted(1)
        cancelled.cancel()
        blocker.cancel()  // the gated work ignores cancel; finish it by hand
        blocker.finish()
        try await [cancelled, dependent].allFinished()

        #expect(cancelled.executed.withLock { $0 } == false)
        #expect(cancelled.isFinished && cancelled.isCancelled && !cancelled.isExecuting)
        #expect(dependent.executed.withLock { $0 } == true)
    }

    @Test("cancelled before start, started by hand: finishes at once")
    func cancelBeforeManualStart() {
        let operation = GatedOperation(id: 0, meter: InFlightMeter(), gate: Gate<Void>())
        operation.cancel()
        operation.start()
        #expect(operation.isFinished)
        #expect(operation.executed.withLock { $0 } == false)
    }

    @Test("cancel during work reaches the work and ends it")
    func cancelDuringWork() async throws {
        let started = Gate<Void>()
        let operation = CancellableWorkOperation(started: started)
        let queue = OperationQueue()
        queue.addOperation(operation)
        await started.wait()
        #expect(operation.isExecuting)
        operation.cancel()
        try await [operation].allFinished()
        #expect(operation.cancelHandlerRuns.withLock { $0 } == 1)
        #expect(operation.isFinished && !operation.isExecuting)
    }

    @Test("onCancel registered after cancel runs at once; never after finish")
    func onCancelTiming() {
        let operation = AsyncOperation()
        let runs = Locked(0)
        operation.cancel()
        operation.onCancel { runs.withLock { $0 += 1 } }
        #expect(runs.withLock { $0 } == 1)

        let finished = AsyncOperation()
        finished.start()  // the default execute() finishes at once
        finished.onCancel { runs.withLock { $0 += 1 } }
        finished.cancel()
        #expect(runs.withLock { $0 } == 1)
        #expect(finished.isFinished)
    }

    @Test("finish racing cancel from many threads finishes exactly once (10,000 iterations)")
    func finishRacingCancel() async throws {
        let iterations = 10_000
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 8
        let observerRuns = Locked(0)
        let completionRuns = Locked(0)
        let dependentRuns = Locked(0)
        var all: [Operation] = []
        for _ in 0..<iterations {
            let operation = RacingFinishOperation()
            operation.addFinishObserver { observerRuns.withLock { $0 += 1 } }
            operation.completionBlock = { completionRuns.withLock { $0 += 1 } }
            let dependent = BlockOperation { dependentRuns.withLock { $0 += 1 } }
            dependent.addDependency(operation)
            all += [operation, dependent]
        }
        queue.addOperations(all)
        try await all.allFinished()
        // completion blocks run asynchronously after the finish; wait for them without sleeping. So do finish
        // observers, on the finishing thread after the finish notification: allFinished() registers its own after
        // the test's, and one that finds the operation already finished runs at once, before the test's may have.
        while completionRuns.withLock({ $0 }) < iterations || observerRuns.withLock({ $0 }) < iterations {
            await Task.yield()
        }

        #expect(observerRuns.withLock { $0 } == iterations)
        #expect(dependentRuns.withLock { $0 } == iterations)
        #expect(completionRuns.withLock { $0 } == iterations)
        // The queue drops a finished operation on its own thread just after the finish notification that
        // allFinished() waits for, so its count reaches 0 a moment later: wait for that (bounded), then check.
        let deadline = ContinuousClock.now + .seconds(10)
        while queue.operationCount > 0, ContinuousClock.now < deadline { await Task.yield() }
        #expect(queue.operationCount == 0)
        #expect(all.allSatisfy { $0.isFinished && !$0.isExecuting })
    }

    @Test("finish() before start: start() finishes without executing")
    func finishBeforeStart() {
        let operation = GatedOperation(id: 0, meter: InFlightMeter(), gate: Gate<Void>())
        operation.finish()
        #expect(!operation.isFinished)
        operation.start()
        #expect(operation.isFinished)
        #expect(operation.executed.withLock { $0 } == false)
    }

    @Test("a second start() is ignored")
    func secondStartIgnored() {
        let meter = InFlightMeter()
        let operation = GatedOperation(id: 0, meter: meter, gate: Gate<Void>())
        operation.start()
        operation.start()
        #expect(meter.startOrder == [0])
        #expect(operation.isExecuting)
        operation.finish()
        #expect(operation.isFinished)
    }

    @Test("isAsynchronous, and isReady honours dependencies")
    func readiness() async throws {
        let producer = AsyncOperation()
        let consumer = AsyncOperation()
        consumer.addDependency(producer)
        #expect(consumer.isAsynchronous)
        #expect(producer.isReady)
        #expect(!consumer.isReady)
        producer.start()
        try await [producer].allFinished()
        #expect(consumer.isReady)
    }
}

/// Calls `finish()` and `cancel()` on itself from several threads at once, many times each.
private final class RacingFinishOperation: AsyncOperation, @unchecked Sendable {
    // unchecked Sendable: no state of its own.
    override func execute() {
        DispatchQueue.concurrentPerform(iterations: 4) { index in
            if index % 2 == 0 { finish() } else { cancel() }
            finish()
        }
    }
}

/// Work that only ends when cancelled: it registers a cancel handler that finishes the operation.
private final class CancellableWorkOperation: AsyncOperation, @unchecked Sendable {
    // unchecked Sendable: immutable lets of Sendable types only.
    let started: Gate<Void>
    let cancelHandlerRuns = Locked(0)

    init(started: Gate<Void>) {
        self.started = started
        super.init(name: "cancellable")
    }

    override func execute() {
        onCancel { [self] in
            cancelHandlerRuns.withLock { $0 += 1 }
            finish()
        }
        started.open()
    }
}
