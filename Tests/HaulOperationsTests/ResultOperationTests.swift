import Foundation
import HaulTestSupport
import Testing

@testable import HaulOperations

@Suite("Typed results and hand-off", .timeLimit(.minutes(1)))
struct ResultOperationTests {
    @Test("produce -> transform -> consume hands each output to the next step")
    func handOff() async throws {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 4
        let produce = AsyncBlockOperation(name: "produce") { "3,1,2" }
        let transform = AsyncBlockOperation(name: "transform", consuming: produce) { text in
            text.split(separator: ",").compactMap { Int($0) }.sorted()
        }
        let consume = AsyncBlockOperation(name: "consume", consuming: transform) { numbers in
            numbers.reduce(0, +)
        }
        // Added in reverse: only the dependencies order them.
        queue.addOperations([consume, transform, produce])
        #expect(try await consume.value == 6)
        #expect(try transform.result?.get() == [1, 2, 3])
    }

    @Test("a failed producer: consumers do not run and report dependencyFailed with the root cause")
    func failurePropagates() async throws {
        let queue = OperationQueue()
        let consumerRan = Locked(false)
        let produce = AsyncBlockOperation<String>(name: "download") { throw TestFailure(message: "503") }
        let parse = AsyncBlockOperation(name: "parse", consuming: produce) { text -> Int in
            consumerRan.withLock { $0 = true }
            return text.count
        }
        let save = AsyncBlockOperation(name: "save", consuming: parse) { count in count * 2 }
        queue.addOperations([produce, parse, save])

        let error = try #require(await #expect(throws: OperationError.self) { try await save.value })
        #expect(error.code == .dependencyFailed)
        #expect(error.operationName == "parse")
        #expect(error.rootCause as? TestFailure == TestFailure(message: "503"))
        #expect(String(describing: error).contains("'parse'"))
        #expect(consumerRan.withLock { $0 } == false)
        #expect((parse.result.flatMap { try? $0.get() }) == nil)
    }

    @Test("a cancelled producer: consumers report dependencyCancelled")
    func cancellationPropagates() async throws {
        let queue = OperationQueue()
        let produce = AsyncBlockOperation(name: "download") { () async throws -> Int in
            try await Task.sleep(for: .seconds(3600))
            return 1
        }
        let consume = AsyncBlockOperation(name: "parse", consuming: produce) { $0 + 1 }
        queue.addOperations([produce, consume])
        produce.cancel()
        let error = try #require(await #expect(throws: OperationError.self) { try await consume.value })
        #expect(error.code == .dependencyCancelled)
        #expect(error.isCancellation)
        let producerError = try #require(await #expect(throws: OperationError.self) { try await produce.value })
        #expect(producerError.code == .cancelled)
    }

    @Test("afterResultOf runs whatever the producer did (the 'always run' policy)")
    func runAnywayPolicy() async throws {
        let queue = OperationQueue()
        let produce = AsyncBlockOperation<Int>(name: "download") { throw TestFailure(message: "boom") }
        let cleanup = AsyncBlockOperation(name: "cleanup", afterResultOf: produce) { result -> String in
            switch result {
            case .success: "ok"
            case .failure(let error): "cleaned up after: \((error as? OperationError)?.code.description ?? "?")"
            }
        }
        queue.addOperations([produce, cleanup])
        #expect(try await cleanup.value == "cleaned up after: dependencyFailed")
    }

    @Test("reading a producer that is not a dependency (not finished) is a clear error, not a crash")
    func missingDependency() throws {
        let produce = AsyncBlockOperation(name: "never-run") { 1 }
        #expect(throws: OperationError.self) { try produce.outputForConsumer() }
        do {
            _ = try produce.outputForConsumer()
        } catch {
            #expect(error.code == .missingResult)
            #expect(error.description.contains("add it as a dependency"))
        }
    }

    @Test("a ResultOperation subclass that finishes without a result reports missingResult")
    func subclassWithoutResult() async throws {
        let operation = ForgetfulOperation(name: "forgetful")
        OperationQueue().addOperation(operation)
        let error = try #require(await #expect(throws: OperationError.self) { try await operation.value })
        #expect(error.code == .missingResult)
    }

    @Test("the first result wins; later finishes are ignored")
    func firstResultWins() throws {
        let operation = ManualResultOperation()
        operation.start()
        operation.finish(returning: 1)
        operation.finish(returning: 2)
        operation.finish(throwing: TestFailure(message: "late"))
        #expect(try operation.result?.get() == 1)
    }

    @Test("cancelling the operation cancels the task running the closure")
    func operationCancelReachesTask() async throws {
        let started = Gate<Void>()
        let observedCancellation = Locked(false)
        let operation = AsyncBlockOperation(name: "slow") { () async throws -> Int in
            started.open()
            do {
                try await Task.sleep(for: .seconds(3600))
            } catch {
                observedCancellation.withLock { $0 = true }
                throw error
            }
            return 0
        }
        OperationQueue().addOperation(operation)
        await started.wait()
        operation.cancel()
        let error = try #require(await #expect(throws: OperationError.self) { try await operation.value })
        #expect(error.code == .cancelled)
        #expect(observedCancellation.withLock { $0 })
    }

    @Test("cancelling the awaiting task cancels the operation and its work")
    func taskCancelReachesOperation() async throws {
        let started = Gate<Void>()
        let operation = AsyncBlockOperation(name: "slow") { () async throws -> Int in
            started.open()
            try await Task.sleep(for: .seconds(3600))
            return 0
        }
        OperationQueue().addOperation(operation)
        let waiter = Task { try await operation.value }
        await started.wait()
        waiter.cancel()
        await #expect(throws: OperationError.self) { try await waiter.value }
        try await [operation].allFinished()
        #expect(operation.isCancelled)
    }

    @Test("work that completes despite a cancel keeps its value")
    func completedWorkWins() async throws {
        let release = Gate<Void>()
        let started = Gate<Void>()
        let operation = AsyncBlockOperation(name: "stubborn") { () async -> Int in
            started.open()
            await release.wait()  // ignores cancellation
            return 42
        }
        OperationQueue().addOperation(operation)
        await started.wait()
        operation.cancel()
        release.open()
        #expect(try await operation.value == 42)
    }
}

private final class ForgetfulOperation: ResultOperation<Int>, @unchecked Sendable {
    // unchecked Sendable: no state of its own.
    override func execute() { finish() }
}

private final class ManualResultOperation: ResultOperation<Int>, @unchecked Sendable {
    // unchecked Sendable: no state of its own.
    override func execute() {}
}
