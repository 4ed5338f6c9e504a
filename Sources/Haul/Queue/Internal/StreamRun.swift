import DequeModule
import HaulOperations

/// One iteration of ``DownloadResults``: the window shared by the task that reads the requests and adds them (the
/// feeder) and the loop that takes the results, as one lock-guarded state. Continuations are resumed after the lock.
final class StreamRun: Sendable {
    private struct State {
        /// Downloads held: room taken by the feeder, added and running or waiting, or ended and not yet taken.
        var held = 0
        var ready: Deque<FinishedDownload> = []
        /// The loop, waiting for a result.
        var consumer: CheckedContinuation<FinishedDownload?, any Error>?
        /// The feeder, waiting for room.
        var feeder: CheckedContinuation<Bool, Never>?
        /// The feeder has ended: nothing more will be delivered.
        var fed = false
        /// The request sequence's error, thrown once the results before it are taken.
        var failure: (any Error)?
        var cancelled = false
        var task: Task<Void, Never>?
    }

    private let window: Int
    private let state = Locked(State())

    init(window: Int) {
        self.window = window
    }

    /// Runs `feed` in a task of its own, cancelled with the run.
    func start(_ feed: @escaping @Sendable (StreamRun) async -> Void) {
        let task = Task { await feed(self) }
        state.withLock { $0.task = task }
    }

    // MARK: - The feeder

    /// Takes room for one more download, waiting until the loop has taken a result if the window is full. `false`
    /// when the run was cancelled (then nothing more is read).
    func reserve() async -> Bool {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ready = state.withLock { state -> Bool? in
                    if state.cancelled { return false }
                    if state.held < window {
                        state.held += 1
                        return true
                    }
                    state.feeder = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            cancel()
        }
    }

    /// Gives back room taken for a request the sequence did not have.
    func unreserve() {
        state.withLock { $0.held -= 1 }
    }

    /// Hands an ended download to the loop (dropped once the run is cancelled: nobody takes it).
    func deliver(_ finished: FinishedDownload) {
        let (consumer, feeder) = state.withLock {
            state -> (CheckedContinuation<FinishedDownload?, any Error>?, CheckedContinuation<Bool, Never>?) in
            guard !state.cancelled else { return (nil, nil) }
            guard let consumer = state.consumer else {
                state.ready.append(finished)
                return (nil, nil)
            }
            state.consumer = nil
            return (consumer, takeResult(in: &state))
        }
        consumer?.resume(returning: finished)
        feeder?.resume(returning: true)
    }

    /// The request sequence threw: delivered after the results before it.
    func sourceFailed(_ error: any Error) {
        state.withLock { $0.failure = error }
    }

    /// The feeder has ended and every download it added has been delivered.
    func fed() {
        let (consumer, failure) = state.withLock {
            state -> (CheckedContinuation<FinishedDownload?, any Error>?, (any Error)?) in
            state.fed = true
            guard let consumer = state.consumer else { return (nil, nil) }
            state.consumer = nil
            defer { state.failure = nil }
            return (consumer, state.failure)
        }
        if let failure {
            consumer?.resume(throwing: failure)
        } else {
            consumer?.resume(returning: nil)
        }
    }

    // MARK: - The loop

    /// The next ended download, `nil` at the end.
    func next() async throws -> FinishedDownload? {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                enum Answer {
                    case result(FinishedDownload, feeder: CheckedContinuation<Bool, Never>?)
                    case end((any Error)?)
                    case cancelled
                    case wait
                }
                let answer = state.withLock { state -> Answer in
                    if !state.cancelled, let finished = state.ready.popFirst() {
                        return .result(finished, feeder: takeResult(in: &state))
                    }
                    if state.fed && state.ready.isEmpty {
                        defer { state.failure = nil }
                        return .end(state.failure)
                    }
                    if state.cancelled { return .cancelled }
                    state.consumer = continuation
                    return .wait
                }
                switch answer {
                case .result(let finished, let feeder):
                    continuation.resume(returning: finished)
                    feeder?.resume(returning: true)
                case .end(let failure?): continuation.resume(throwing: failure)
                case .end(nil): continuation.resume(returning: nil)
                case .cancelled: continuation.resume(throwing: CancellationError())
                case .wait: break
                }
            }
        } onCancel: {
            cancel()
        }
    }

    /// A result is being taken: its room goes to the feeder if it waits for some (returned, to resume).
    private func takeResult(in state: inout State) -> CheckedContinuation<Bool, Never>? {
        state.held -= 1
        guard let feeder = state.feeder, state.held < window else { return nil }
        state.feeder = nil
        state.held += 1
        return feeder
    }

    /// Stops reading requests and cancels the downloads held; a waiting loop throws `CancellationError`.
    func cancel() {
        typealias Waiters = (
            consumer: CheckedContinuation<FinishedDownload?, any Error>?, feeder: CheckedContinuation<Bool, Never>?,
            task: Task<Void, Never>?
        )
        let (consumer, feeder, task) = state.withLock { state -> Waiters in
            guard !state.cancelled else { return (nil, nil, nil) }
            state.cancelled = true
            defer { (state.consumer, state.feeder) = (nil, nil) }
            return (state.consumer, state.feeder, state.task)
        }
        consumer?.resume(throwing: CancellationError())
        feeder?.resume(returning: false)
        // The feeder's task group cancels its children, and each cancels its download.
        task?.cancel()
    }

    /// Cancels the run when the iterator is let go of before the end (the loop was left).
    final class Closer: Sendable {
        let run: StreamRun
        init(_ run: StreamRun) { self.run = run }
        deinit { run.cancel() }
    }
}
