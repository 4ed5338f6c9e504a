import Foundation
/// Runs an `async throws` closure as an `Operation`, so structured-concurrency code can join an
/// `OperationQueue` with its width limit, priorities and dependencies.
///
/// Cancelling the operation cancels the task running the closure; a closure that then throws (for example
/// `CancellationError` from `Task.checkCancellation()` or a cancelled `URLSession` call) finishes the
/// operation with ``OperationError/Code/cancelled``.
///
/// Hand a result from one step to the next with ``init(name:consuming:_:)``:
///
/// ```swift
/// let fetch = AsyncBlockOperation(name: "fetch") { try await api.quotesJSON() }
/// let parse = AsyncBlockOperation(name: "parse", consuming: fetch) { json in try Quote.parse(json) }
/// let save = AsyncBlockOperation(name: "save", consuming: parse) { quotes in try await store.save(quotes) }
/// queue.addOperations([fetch, parse, save], waitUntilFinished: false)
/// let saved = try await save.value  // fails with .dependencyFailed if fetch or parse failed
/// ```
public final class AsyncBlockOperation<Output: Sendable>: ResultOperation<Output>, @unchecked Sendable {
    // unchecked Sendable: `body` is immutable and Sendable; the rest of the state lives in the base classes.

    private let body: @Sendable () async throws -> Output

    /// Creates an operation that runs `body` when the queue starts it.
    public init(name: String? = nil, _ body: @escaping @Sendable () async throws -> Output) {
        self.body = body
        super.init(name: name)
    }

    /// Creates an operation that runs `body` with the value of `producer`, and depends on it.
    ///
    /// If `producer` failed or was cancelled, `body` does not run: this operation finishes with
    /// ``OperationError/Code/dependencyFailed`` (wrapping the producer's error) or
    /// ``OperationError/Code/dependencyCancelled``, which then travels on to its own consumers. To run anyway
    /// and decide yourself, use ``init(name:afterResultOf:_:)``.
    public convenience init<Input: Sendable>(
        name: String? = nil,
        consuming producer: ResultOperation<Input>,
        _ body: @escaping @Sendable (Input) async throws -> Output
    ) {
        self.init(name: name) {
            let input = try producer.outputForConsumer()
            return try await body(input)
        }
        addDependency(producer)
    }

    /// Creates an operation that runs `body` with the result of `producer` whatever it is (success, failure or
    /// cancellation), and depends on it: the "always run" failure policy, e.g. for clean-up steps.
    public convenience init<Input: Sendable>(
        name: String? = nil,
        afterResultOf producer: ResultOperation<Input>,
        _ body: @escaping @Sendable (Result<Input, any Error>) async throws -> Output
    ) {
        self.init(name: name) {
            let result = Result<Input, any Error> { try producer.outputForConsumer() }
            return try await body(result)
        }
        addDependency(producer)
    }

    /// Starts a task running the closure; called by the queue.
    public override func execute() {
        let task = Task { [body] in
            let result: Result<Output, any Error>
            do {
                result = .success(try await body())
            } catch {
                // A cancelled operation reports one well-known error, whatever the closure threw on the way
                // out; an error the closure chose (e.g. a dependency error) is kept as it is.
                let keepAsIs = error is OperationError || !isCancelled
                result = .failure(keepAsIs ? error : OperationError(.cancelled, operationName: name))
            }
            finish(with: result)
        }
        onCancel { task.cancel() }
    }
}
