import Foundation
import HaulTestSupport
import Testing

@testable import HaulOperations

@Suite("OperationGroup and async waits", .timeLimit(.minutes(1)))
struct OperationGroupTests {
    @Test("the completion operation runs after every member, with the k / n count at each step")
    func completionAfterAll() async throws {
        let meter = InFlightMeter()
        let gate = Gate<Void>()
        let members = (0..<10).map { GatedOperation(id: $0, meter: meter, gate: gate) }
        let group = OperationGroup(members)
        let steps = Locked<[String]>([])
        group.onMemberFinished = { done, total in steps.withLock { $0.append("\(done) / \(total)") } }
        let finishedWhenCompletionRan = Locked(-1)
        let completion = group.completionOperation {
            finishedWhenCompletionRan.withLock { $0 = meter.finishedCount }
        }
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 3
        queue.addOperations([completion] + members)
        await meter.waitUntilStarted(3)
        #expect(!completion.isFinished)
        gate.open()
        try await [completion].allFinished()
        try await group.finished()

        #expect(finishedWhenCompletionRan.withLock { $0 } == 10)
        #expect(steps.withLock { $0 } == (1...10).map { "\($0) / 10" })
        #expect(group.finishedCount == 10)
    }

    @Test("k / n counts arrive strictly in order when members finish on many threads at once")
    func countsInOrderUnderContention() async throws {
        for _ in 0..<200 {
            let meter = InFlightMeter()
            let gate = Gate<Void>()
            let members = (0..<64).map { GatedOperation(id: $0, meter: meter, gate: gate) }
            let group = OperationGroup(members)
            let counts = Locked<[Int]>([])
            group.onMemberFinished = { done, _ in counts.withLock { $0.append(done) } }
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = 64
            queue.addOperations(members)
            await meter.waitUntilStarted(64)
            gate.open()  // all 64 finish from the global dispatch queue's threads at once
            try await group.finished()
            #expect(counts.withLock { $0 } == Array(1...64))
        }
    }

    @Test("cancelOthers: the first failure cancels the rest")
    func cancelOthersOnFailure() async throws {
        let started = Gate<Void>()
        let slow = (0..<3).map { index in
            AsyncBlockOperation(name: "slow-\(index)") { () async throws -> Int in
                try await Task.sleep(for: .seconds(3600))
                return index
            }
        }
        let failing = AsyncBlockOperation<Int>(name: "failing") {
            await started.wait()
            throw TestFailure(message: "404")
        }
        let group = OperationGroup(slow + [failing], failurePolicy: .cancelOthers)
        let queue = OperationQueue()
        queue.addOperations(slow + [failing])
        started.open()
        try await group.finished()

        #expect(group.firstFailure as? TestFailure == TestFailure(message: "404"))
        for operation in slow {
            #expect(operation.isCancelled)
            #expect((operation.result.map { r in (try? r.get()) == nil }) == true)
        }
    }

    @Test("continueOthers: a failure leaves the others to finish")
    func continueOthersOnFailure() async throws {
        let ok = (0..<3).map { index in AsyncBlockOperation(name: "ok-\(index)") { index } }
        let failing = AsyncBlockOperation<Int>(name: "failing") { throw TestFailure(message: "404") }
        let group = OperationGroup(ok + [failing])
        OperationQueue().addOperations(ok + [failing])
        try await group.finished()
        #expect(group.firstFailure != nil)
        #expect(try ok.map { try $0.result?.get() } == [0, 1, 2])
    }

    @Test("a cancellation is not a failure under cancelOthers")
    func cancellationIsNotFailure() async throws {
        let cancelled = AsyncBlockOperation(name: "cancelled") { 1 }
        let other = AsyncBlockOperation(name: "other") { 2 }
        cancelled.cancel()
        let group = OperationGroup([cancelled, other], failurePolicy: .cancelOthers)
        OperationQueue().addOperations([cancelled, other])
        try await group.finished()
        #expect(group.firstFailure == nil)
        #expect(try other.result?.get() == 2)
    }

    @Test("cancelling a task awaiting a group cancels the members and waits for them")
    func groupWaitCancellation() async throws {
        let started = Gate<Void>()
        let member = AsyncBlockOperation(name: "slow") { () async throws -> Int in
            started.open()
            try await Task.sleep(for: .seconds(3600))
            return 0
        }
        let group = OperationGroup([member])
        OperationQueue().addOperation(member)
        let waiter = Task { try await group.finished() }
        await started.wait()
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        #expect(member.isFinished && member.isCancelled)
    }

    @Test("cancelling a group starts none of the members waiting for the place a running one holds")
    func cancelAllStartsNoneWaiting() async throws {
        let started = Gate<Void>()
        let first = AsyncBlockOperation(name: "first") { () async throws -> Int in
            started.open()
            try await Task.sleep(for: .seconds(3600))
            return 0
        }
        // Cancelled in order, the running one could finish before the others are cancelled, and the queue start one
        // of them: the more wait, the likelier.
        let ran = Locked(0)
        let waiting = (0..<500).map { index in
            AsyncBlockOperation(name: "waiting-\(index)") { () -> Int in
                ran.withLock { $0 += 1 }
                return index
            }
        }
        let group = OperationGroup([first] + waiting)
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        queue.addOperations([first] + waiting)
        await started.wait()
        group.cancelAll()
        try await group.finished()
        #expect(ran.withLock { $0 } == 0)
        #expect(([first] + waiting).filter { !$0.isCancelled }.count == 0)
    }

    @Test("awaiting plain BlockOperations and a whole queue without blocking a thread")
    func awaitQueue() async throws {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 2
        let count = Locked(0)
        let blocks = (0..<50).map { _ in BlockOperation { count.withLock { $0 += 1 } } }
        queue.addOperations(blocks)
        try await queue.allOperationsFinished()
        #expect(count.withLock { $0 } == 50)
        try await [Operation]().allFinished()  // nothing to wait for
    }

    @Test("cancelling a task awaiting operations stops the wait and leaves them alone")
    func sequenceWaitCancellation() async throws {
        let never = AsyncOperation(name: "never started")
        let waiter = Task { try await [never].allFinished() }
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        #expect(!never.isCancelled)
    }

    @Test("OperationQueue.run joins async code to the queue's width limit")
    func runRespectsWidth() async throws {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 2
        let meter = InFlightMeter()
        let gate = Gate<Void>()
        let results = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<6 {
                group.addTask {
                    try await queue.run(name: "job-\(index)") {
                        meter.enter(index)
                        await gate.wait()
                        meter.leave()
                        return index * 10
                    }
                }
            }
            await meter.waitUntilStarted(2)
            #expect(meter.current == 2)
            gate.open()
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(results.sorted() == [0, 10, 20, 30, 40, 50])
        #expect(meter.highest == 2)
    }

    @Test("OperationQueue.run: cancelling the caller cancels the operation")
    func runCancellation() async throws {
        let queue = OperationQueue()
        let started = Gate<Void>()
        let task = Task {
            try await queue.run(name: "slow") { () async throws -> Int in
                started.open()
                try await Task.sleep(for: .seconds(3600))
                return 0
            }
        }
        await started.wait()
        task.cancel()
        let error = try #require(await #expect(throws: OperationError.self) { try await task.value })
        #expect(error.code == .cancelled)
        try await queue.allOperationsFinished()
        #expect(queue.operationCount == 0)
    }

    @Test(
        "OperationQueue.run on a suspended or full queue: a cancelled caller gets cancelled at once, not when the queue reaches it"
    )
    func runCancelledWhileWaiting() async throws {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        queue.isSuspended = true
        let ran = Locked(false)
        let task = Task {
            try await queue.run(name: "never reached") { () async throws -> Int in
                ran.withLock { $0 = true }
                return 1
            }
        }
        while queue.operationCount == 0 { await Task.yield() }
        task.cancel()
        let error = try #require(await #expect(throws: OperationError.self) { try await task.value })
        #expect(error.code == .cancelled)
        queue.isSuspended = false
        try await queue.allOperationsFinished()
        #expect(!ran.withLock { $0 })
    }

    @Test("the completion operation runs after onMemberFinished has reported the last member, however slow that is")
    func completionAfterLastReport() async throws {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 2
        let members = (0..<3).map { _ in BlockOperation {} }
        let group = OperationGroup(members)
        let reported = Locked(0)
        group.onMemberFinished = { done, total in
            // A slow report of the last member: the members are all finished meanwhile.
            if done == total { Thread.sleep(forTimeInterval: 0.2) }
            reported.withLock { $0 = done }
        }
        let sawAll = Locked(false)
        let completion = group.completionOperation { sawAll.withLock { $0 = reported.withLock { $0 } == 3 } }
        queue.addOperations(members + [completion])
        try await [completion].allFinished()
        #expect(sawAll.withLock { $0 })
    }
}
