import DequeModule
import HaulOperations

/// One iteration of ``DownloadResults``: the window shared by the task that reads the requests and adds them (the
/// feeder) and the loop that takes the results, as one lock-guarded state. Continuations are resumed and downloads
/// cancelled after the lock.
final class StreamRun: Sendable {
    private struct State {
        /// Downloads held: room taken by the feeder, added and not ended, or ended and not yet taken.
        var held = 0
        var ready: Deque<FinishedDownload> = []
        /// The downloads added and not ended.
        var running: [ObjectIdentifier: DownloadHandle] = [:]
        /// The loop, waiting for a result.
        var consumer: CheckedContinuation<FinishedDownload?, any Error>?
        /// The feeder, waiting for room.
        var feeder: CheckedContinuation<Int, Never>?
        var feederDone = false
        /// The request sequence's error, thrown once the results before it are taken.
        var failure: (any Error)?
        var cancelled = false
        var task: Task<Void, Never>?
        /// Results taken out of `running` and being handed to the sink: the run ends only after them.
        var delivering = 0

        /// Nothing more will be delivered.
        var ended: Bool { feederDone && running.isEmpty && delivering == 0 }
    }

    private let window: Int
    /// Where results go as downloads end, instead of to the loop (see ``DownloadQueue/download(_:window:onResult:)``).
    private let sink: (@Sendable (FinishedDownload) -> Void)?
    /// The feeder is woken once this much room is free, not for every result taken: a list of small files then
    /// costs no task switch per download.
    private let wakeBatch: Int
    private let state = Locked(State())

    init(window: Int, sink: (@Sendable (FinishedDownload) -> Void)? = nil) {
        self.window = window
        self.sink = sink
        wakeBatch = max(1, window / 16)
    }

    /// Runs `feed` in a task of its own, cancelled with the run.
    func start(_ feed: @escaping @Sendable (StreamRun) async -> Void) {
        let task = Task { await feed(self) }
        state.withLock { $0.task = task }
    }

    // MARK: - The feeder

    /// Takes the room that is free, waiting until some is if the window is full; 0 when the run was cancelled
    /// (then nothing more is read).
    func reserve() async -> Int {
        await withCheckedContinuation { continuation in
            let room = state.withLock { state -> Int? in
                if state.cancelled { return 0 }
                let free = window - state.held
                guard free > 0 else {
                    state.feeder = continuation
                    return nil
                }
                state.held = window
                return free
            }
            if let room { continuation.resume(returning: room) }
        }
    }

    /// Watches a download just added, to deliver how it ends.
    func track(_ handle: DownloadHandle) {
        let key = ObjectIdentifier(handle)
        // Held even when the run was cancelled meanwhile: the loop's end waits for this download to end too.
        let cancelled = state.withLock { state in
            state.running[key] = handle
            return state.cancelled
        }
        if cancelled, !handle.queue.cancel([handle]).isEmpty {
            letGo([handle])  // another holder keeps it (see ``cancel()``)
            return
        }
        let request = handle.request
        handle.whenEnded { [self] outcome in
            deliver(FinishedDownload(id: handle.id, request: request, result: outcome), of: key)
        }
    }

    /// Hands an ended download to the loop (dropped once the run is cancelled: nobody takes it), or to the sink.
    private func deliver(_ finished: FinishedDownload, of key: ObjectIdentifier) {
        // Taken out of `running` by whoever comes first: this end, or a cancel that let it go (``letGo(_:)``), which
        // hands over its result then.
        let claimed = state.withLock { state in
            guard state.running.removeValue(forKey: key) != nil else { return false }
            state.delivering += 1
            return true
        }
        guard claimed else { return }
        // The end is signalled only after every result was handed over.
        sink?(finished)
        let (reply, wake) = state.withLock { state -> (Reply?, Wake?) in
            state.delivering -= 1
            if sink != nil { return (takeEnd(in: &state), takeResult(in: &state)) }
            guard !state.cancelled, let consumer = state.consumer else {
                if !state.cancelled { state.ready.append(finished) }
                return (takeEnd(in: &state), nil)
            }
            state.consumer = nil
            return (Reply(consumer: consumer, answer: .result(finished)), takeResult(in: &state))
        }
        wake?.run()
        reply?.run()
    }

    /// The request sequence threw: delivered after the results before it.
    func sourceFailed(_ error: any Error) {
        state.withLock { $0.failure = error }
    }

    /// The feeder has read its last request.
    func feederEnded() {
        let reply = state.withLock { state in
            state.feederDone = true
            return takeEnd(in: &state)
        }
        reply?.run()
    }

    // MARK: - The loop

    private typealias Consumer = CheckedContinuation<FinishedDownload?, any Error>
    private typealias Feeder = CheckedContinuation<Int, Never>

    /// The feeder to resume, with the room it now holds.
    private struct Wake {
        let feeder: Feeder
        let room: Int
        func run() { feeder.resume(returning: room) }
    }

    /// The loop to resume, with its answer.
    private struct Reply {
        let consumer: Consumer
        let answer: Answer
        func run() { answer.resume(consumer) }
    }

    private enum Answer {
        case result(FinishedDownload)
        case end((any Error)?)

        func resume(_ consumer: Consumer) {
            switch self {
            case .result(let finished): consumer.resume(returning: finished)
            case .end(let failure?): consumer.resume(throwing: failure)
            case .end(nil): consumer.resume(returning: nil)
            }
        }
    }

    /// The next ended download, `nil` at the end.
    func next() async throws -> FinishedDownload? {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let (answer, wake) = state.withLock { state -> (Answer?, Wake?) in
                    if !state.cancelled, let finished = state.ready.popFirst() {
                        return (.result(finished), takeResult(in: &state))
                    }
                    if let end = endAnswer(in: &state) { return (end, nil) }
                    // Cancelled, the loop waits for the downloads it held to end.
                    state.consumer = continuation
                    return (nil, nil)
                }
                wake?.run()
                answer?.resume(continuation)
            }
        } onCancel: {
            cancel()
        }
    }

    /// A result is being taken: its room goes to the feeder once enough is free (returned, to resume).
    private func takeResult(in state: inout State) -> Wake? {
        state.held -= 1
        guard let feeder = state.feeder, window - state.held >= wakeBatch else { return nil }
        state.feeder = nil
        defer { state.held = window }
        return Wake(feeder: feeder, room: window - state.held)
    }

    /// The end for a waiting loop, if everything has ended and nothing is left to take.
    private func takeEnd(in state: inout State) -> Reply? {
        guard let consumer = state.consumer, let answer = endAnswer(in: &state) else { return nil }
        state.consumer = nil
        return Reply(consumer: consumer, answer: answer)
    }

    private func endAnswer(in state: inout State) -> Answer? {
        guard state.ended, state.cancelled || state.ready.isEmpty else { return nil }
        if state.cancelled { return .end(CancellationError()) }
        defer { state.failure = nil }
        return .end(state.failure)
    }

    /// Stops reading requests and cancels the downloads held; the loop throws `CancellationError` once they have
    /// ended.
    func cancel() {
        let (feeder, running, task) = state.withLock {
            state -> (Feeder?, [DownloadHandle], Task<Void, Never>?) in
            guard !state.cancelled else { return (nil, [], nil) }
            state.cancelled = true
            state.ready.removeAll()
            defer { state.feeder = nil }
            return (state.feeder, Array(state.running.values), state.task)
        }
        feeder?.resume(returning: 0)
        // In one hold of the queue's lock (all are of one queue): one at a time, a running one could end before the
        // others are cancelled, and its slot start one of them.
        let kept = running.first?.queue.cancel(running) ?? []
        task?.cancel()
        letGo(kept)
    }

    /// Stops holding `handles`, downloads a cancel left to another holder (one the app added itself, and paused):
    /// they are not this run's to wait for. The sink is handed a cancellation for each, at once, as for every download
    /// this run read; the loop takes none after a cancel.
    private func letGo(_ handles: [DownloadHandle]) {
        guard !handles.isEmpty else { return }
        let claimed = state.withLock { state in
            let claimed = handles.filter { state.running.removeValue(forKey: ObjectIdentifier($0)) != nil }
            state.delivering += claimed.count
            return claimed
        }
        if let sink {
            for handle in claimed {
                let cancelled = DownloadError(.cancelled, message: "cancelled", url: handle.request.url)
                sink(FinishedDownload(id: handle.id, request: handle.request, result: .failure(cancelled)))
            }
        }
        let reply = state.withLock { state in
            state.delivering -= claimed.count
            return takeEnd(in: &state)
        }
        reply?.run()
    }

    /// Cancels the run when the iterator is let go of before the end (the loop was left).
    final class Closer: Sendable {
        let run: StreamRun
        init(_ run: StreamRun) { self.run = run }
        deinit { run.cancel() }
    }
}
