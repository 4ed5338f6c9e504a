import Foundation
import Haul
import HaulOperations
import PostgresNIO

/// One registration of a worker: from its claim of a lease to its stop, the loss of its lease, or an empty queue.
///
/// The feed (``ClaimFeed``) claims downloads when the download queue has room and hands them out one by one; each
/// download's end becomes a ``Completion`` gathered by the batcher and recorded with others in one statement. Beside
/// them run the heartbeat (renews the lease, stops downloads cancelled in the database, stops everything when the
/// lease is lost), the rescuer (takes back the claims of silent workers) and the listener (wakes the feed when work
/// is added).
final class WorkerRun: Sendable {
    enum Ending {
        case interrupted, leaseLost, empty
    }

    let worker: SharedQueueWorker
    let id: Int64
    let report: Locked<WorkerReport>
    let state = Locked(State())
    /// Wakes the feed: a notification, a recorded batch.
    let feedWake = Wake()
    /// Wakes the batcher: a full batch, the run's end.
    let batchWake = Wake()
    /// The directories downloads write into.
    let directories: ParentDirectories

    struct State {
        /// Claims not handed out yet.
        var buffered: [Claim] = []
        /// Claims handed out and not ended, by destination path.
        var held: [String: Claim] = [:]
        /// Ends not recorded yet.
        var completions: [Completion] = []
        /// Set once the lease is lost: nothing more is claimed, and the downloads stop.
        var fenced = false
        /// Set once the feed has ended and every download with it.
        var finished = false
        var lastRenewal = ContinuousClock.now
        /// Whether the last statement failed (to report the database's return once).
        var unreachable = false
        /// Ends being recorded now.
        var sending: Set<Int64> = []
        /// Downloads the database said this worker holds and the worker did not know of, at the last heartbeat.
        var strangers: Set<Int64> = []
        /// The task running the downloads, cancelled when the lease is lost.
        var streaming: Task<Void, Never>?
    }

    init(worker: SharedQueueWorker, id: Int64, report: Locked<WorkerReport>) {
        self.worker = worker
        self.id = id
        self.report = report
        directories = ParentDirectories(base: worker.configuration.directory)
    }

    var queue: SharedQueue { worker.queue }
    var configuration: SharedQueueWorker.Configuration { worker.configuration }

    func run() async -> Ending {
        let background = [
            Task { await heartbeatLoop() },
            Task { await fenceWatch() },
            Task { await rescueLoop() },
            Task { await listenLoop() },
        ]
        let batcher = Task { await batchLoop() }
        let feed = ClaimFeed(run: self)
        // The downloads run in a task of their own, which a lost lease cancels: the stream then cancels every download
        // it holds, one being added at that moment included.
        let streaming = Task { [self] in
            switch worker.runner {
            case .engine(let downloads):
                // Thrown only when the task is cancelled, once every download held has ended.
                try? await downloads.download(feed, window: configuration.maxConcurrent) { [self] finished in
                    ended(finished.request, finished.result)
                }
            case .noOp:
                for await request in feed {
                    ended(request, .success(Self.noOpResult(request)))
                }
            }
        }
        let fencedBeforeStart = state.withLock { state in
            state.streaming = streaming
            return state.fenced
        }
        if fencedBeforeStart { streaming.cancel() }
        await withTaskCancellationHandler {
            await streaming.value
        } onCancel: {
            streaming.cancel()
        }
        let interrupted = Task.isCancelled
        // What was claimed and not handed out goes back now (a lost lease's claims are taken back by the rescuer).
        let (leftover, fenced) = state.withLock { state in
            defer { state.buffered = [] }
            return (state.fenced ? [] : state.buffered, state.fenced)
        }
        for claim in leftover { add(Completion(id: claim.id, kind: .returned)) }
        if !leftover.isEmpty { countReturned(leftover.count) }
        state.withLock { $0.finished = true }
        batchWake.signal()
        // The last batch is recorded whatever the run's task is: a stop must hand its claims back.
        await batcher.value
        for task in background { task.cancel() }
        if !fenced {
            let queue = queue
            let id = id
            try? await Task.detached { try await queue.stopWorker(id) }.value
        }
        if fenced { return .leaseLost }
        return interrupted ? .interrupted : .empty
    }

    // MARK: - Ends of downloads

    /// Records how a download ended (called on whatever thread ended it, never under a lock of ours).
    func ended(_ request: DownloadRequest, _ result: Result<DownloadResult, DownloadError>) {
        guard let path = Self.path(of: request) else { return }
        let claim = state.withLock { $0.held.removeValue(forKey: path) }
        guard let claim else { return }
        let completion: Completion
        switch result {
        case .success(let result):
            completion = Completion(
                id: claim.id, kind: .done, path: claim.path, size: result.size, sha256: result.sha256 ?? "")
            report.withLock { $0.done += 1 }
            worker.emit(
                .finished(
                    path: claim.path, url: request.url.absoluteString, size: result.size, sha256: result.sha256,
                    skipped: result.skipped))
        case .failure(let error) where error.isCancellation:
            completion = Completion(id: claim.id, kind: .returned, path: claim.path)
            // A fenced worker's claims are the rescuer's now: nothing goes back from here (the database refuses it).
            if !state.withLock({ $0.fenced }) { countReturned(1) }
        case .failure(let error) where error.code == .destinationBusy:
            // Another process holds the partial: a worker frozen past its lease (a paused machine) that has not
            // noticed yet, and lets go once it does. Not this download's failure: back to the queue a while later,
            // its attempt not counted, for whichever worker then gets the partial.
            var back = Completion(id: claim.id, kind: .returned, path: claim.path, error: Self.reason(error))
            back.delay = configuration.lease / 3
            completion = back
            report.withLock { $0.retried += 1 }
            worker.emit(
                .failed(
                    path: claim.path, url: request.url.absoluteString,
                    reason: "another process is writing its partial (a worker past its lease?); back to the queue",
                    willRetry: true))
        case .failure(let error):
            let retries = error.isTransient && claim.attempt < claim.maxAttempts
            var failure = Completion(
                id: claim.id, kind: retries ? .retry : .failed, path: claim.path, error: Self.reason(error))
            if retries {
                failure.delay = configuration.retryPolicy.delay(
                    beforeRetry: claim.attempt, retryAfter: error.retryAfter, random: { Double.random(in: 0...1) })
                if let retryAfter = error.retryAfter, error.status == 429 || error.status == 503 {
                    failure.hostHold = min(retryAfter, configuration.retryPolicy.maxRetryAfter)
                }
            }
            completion = failure
            report.withLock { if retries { $0.retried += 1 } else { $0.failed += 1 } }
            worker.emit(
                .failed(
                    path: claim.path, url: request.url.absoluteString, reason: Self.reason(error), willRetry: retries))
        }
        add(completion)
    }

    /// Fails a claim that cannot be run here (its directory cannot be made safely), for good.
    func refuse(_ claim: Claim, because problem: String) {
        let path = claim.path(in: configuration.directory)
        state.withLock { _ = $0.held.removeValue(forKey: path) }
        add(Completion(id: claim.id, kind: .failed, path: claim.path, error: problem))
        report.withLock { $0.failed += 1 }
        worker.emit(.failed(path: claim.path, url: claim.request.url.absoluteString, reason: problem, willRetry: false))
    }

    private func add(_ completion: Completion) {
        let (count, starved) = state.withLock { state in
            state.completions.append(completion)
            return (state.completions.count, state.buffered.isEmpty)
        }
        // With nothing claimed ahead, the next claim may wait for this end to free its host's slot: record it now
        // (ends that come meanwhile still gather into the next batch).
        if count >= 64 || starved { batchWake.signal() }
    }

    private func countReturned(_ count: Int) {
        report.withLock { $0.returned += count }
        worker.emit(.returned(count: count))
    }

    /// The destination path of a request the feed made.
    static func path(of request: DownloadRequest) -> String? {
        guard case .file(let url) = request.destination else { return nil }
        return url.path
    }

    /// What is stored as a failure's reason: the message with the status, without the URL (the row has it).
    static func reason(_ error: DownloadError) -> String {
        error.message
    }

    static func noOpResult(_ request: DownloadRequest) -> DownloadResult {
        let file = request.plannedFileURL ?? URL(fileURLWithPath: "/")
        return DownloadResult(
            fileURL: file, size: 0, sha256: nil, finalURL: request.url, attempts: 1, bytesTransferred: 0,
            skipped: false)
    }

    // MARK: - The batcher

    /// Records gathered ends every ``SharedQueueWorker/Configuration/completionDelay`` (sooner when 64 are waiting),
    /// until the run has finished and everything is recorded. A batch the database did not take is tried again.
    private func batchLoop() async {
        while true {
            let (batch, finished) = state.withLock { state in
                defer { state.completions = [] }
                state.sending = Set(state.completions.map(\.id))
                return (state.completions, state.finished)
            }
            if !batch.isEmpty {
                do {
                    let queue = queue
                    let id = id
                    // Detached: a stop cancels the run's task, and the stop's own returns must still be recorded.
                    let accepted = try await Task.detached { try await queue.complete(worker: id, batch) }.value
                    state.withLock { $0.sending = [] }
                    reachable()
                    refuse(batch.filter { !accepted.contains($0.id) })
                    feedWake.signal()
                } catch {
                    unreachable(error)
                    let fenced = state.withLock { state in
                        state.completions.insert(contentsOf: batch, at: 0)
                        return state.fenced
                    }
                    // A lost lease's completions would be refused: the rescuer decides for them. (A database that
                    // stays silent fences the worker after half its lease, so a stop never waits longer for it.)
                    if fenced { return }
                    try? await Task.sleep(for: .milliseconds(500))
                    continue
                }
            } else if finished {
                return
            }
            await batchWake.wait(upTo: configuration.completionDelay)
        }
    }

    /// Completions the database refused: the lease had been lost, so these downloads are someone else's now.
    private func refuse(_ completions: [Completion]) {
        let refused = completions.filter { $0.kind == .done }
        guard !refused.isEmpty else { return }
        report.withLock { $0.refused += refused.count }
        for completion in refused { worker.emit(.refused(path: completion.path)) }
    }

    func reachable() {
        let was = state.withLock { state in
            defer { state.unreachable = false }
            return state.unreachable
        }
        if was { worker.emit(.databaseReachable) }
    }

    func unreachable(_ error: any Error) {
        let first = state.withLock { state in
            defer { state.unreachable = true }
            return !state.unreachable
        }
        if first { worker.emit(.databaseUnreachable(reason: (error as? SharedQueueError)?.message ?? "\(error)")) }
    }

    // MARK: - Lease

    /// Renews the lease every sixth of it, and stops everything when the database says the lease is gone.
    private func heartbeatLoop() async {
        let lease = configuration.lease
        while !Task.isCancelled {
            try? await Task.sleep(for: lease / 6)
            if Task.isCancelled { return }
            // The lease runs from when the database wrote the heartbeat, at the latest when it was sent.
            let sent = ContinuousClock.now
            let left = lease / 2 - (sent - state.withLock { $0.lastRenewal })
            do {
                let answer = try await queue.heartbeat(worker: id, timeout: max(left, .milliseconds(100)))
                reachable()
                guard answer.alive else { return fence() }
                state.withLock { $0.lastRenewal = sent }
                if !answer.cancelled.isEmpty { cancelHeld(answer.cancelled) }
                returnStrangers(answer.running)
            } catch {
                unreachable(error)
            }
        }
    }

    /// Stops everything once the lease has gone unrenewed for half its time (the database unreachable, or too slow to
    /// answer), whatever the heartbeat is waiting for: before anyone may take the claims over.
    private func fenceWatch() async {
        let lease = configuration.lease
        while !Task.isCancelled {
            try? await Task.sleep(for: lease / 24)
            if ContinuousClock.now - state.withLock({ $0.lastRenewal }) >= lease / 2 { return fence() }
        }
    }

    /// Hands back the downloads the database says this worker holds and the worker does not know of, at two heartbeats
    /// in a row (a claim whose answer was lost with its connection; an end recorded just before the database crashed
    /// and lost it). Once is not enough: a claim may be on its way back at the moment of a heartbeat.
    private func returnStrangers(_ running: [Int64]) {
        let orphans: [Int64] = state.withLock { state in
            var known = state.sending
            for claim in state.held.values { known.insert(claim.id) }
            for claim in state.buffered { known.insert(claim.id) }
            for completion in state.completions { known.insert(completion.id) }
            let strangers = Set(running).subtracting(known)
            defer { state.strangers = strangers.subtracting(state.strangers) }
            return Array(strangers.intersection(state.strangers))
        }
        guard !orphans.isEmpty else { return }
        for id in orphans { add(Completion(id: id, kind: .returned)) }
        countReturned(orphans.count)
    }

    /// Stops claiming and stops every download: the lease is (or may soon be) someone else's.
    private func fence() {
        let first = state.withLock { state in
            defer { state.fenced = true }
            return !state.fenced
        }
        guard first else { return }
        worker.emit(.leaseLost)
        feedWake.signal()
        state.withLock { $0.streaming }?.cancel()
    }

    /// Stops the downloads cancelled in the database.
    private func cancelHeld(_ ids: [Int64]) {
        let wanted = Set(ids)
        let paths = state.withLock { state in
            Set(state.held.filter { wanted.contains($0.value.id) }.keys)
        }
        guard !paths.isEmpty, case .engine(let downloads) = worker.runner else { return }
        downloads.cancel { request in Self.path(of: request).map(paths.contains) ?? false }
    }

    /// Takes back the claims of silent workers every third of the lease (and once at the start).
    private func rescueLoop() async {
        while !Task.isCancelled {
            _ = try? await queue.rescue()
            try? await Task.sleep(for: configuration.lease / 3)
        }
    }

    /// Listens for work added, and wakes the feed; polling covers the time it is not connected.
    private func listenLoop() async {
        let name = queue.name
        let client = queue.client
        let wake = feedWake
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: SharedQueue.wakeChannel) { notifications in
                        for try await notification in notifications where notification.payload == name {
                            wake.signal()
                        }
                    }
                }
            } catch {}
            try? await Task.sleep(for: .seconds(1))
        }
    }
}
