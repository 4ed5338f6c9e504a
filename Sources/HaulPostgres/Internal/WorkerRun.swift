import CoreMetrics
import Foundation
import Haul
import HaulOperations
import Logging
import PostgresNIO

/// One registration of a worker: from its claim of a lease to its stop, the loss of its lease, or an empty queue.
///
/// Its life is one task group (``run()``): the feeding (``ClaimFeed`` claims downloads when the download queue has
/// room and hands them out one by one), the recording (each download's end becomes a ``Completion``, recorded with
/// others in one statement), the heartbeat (renews the lease, stops downloads cancelled in the database), the fence
/// watch (stops everything when the lease may be lost), the rescue (takes back the claims of silent workers) and the
/// listener (wakes the feeding when work is added). The run ends when the feeding and the recording have; the others
/// are cancelled then.
final class WorkerRun: Sendable {
    enum Ending {
        case interrupted, leaseLost, empty
    }

    /// Where the run stands.
    enum Phase: Equatable {
        /// Claiming, downloading and recording.
        case running
        /// The run was cancelled (the worker is stopping): nothing more is claimed, the downloads stop, and their
        /// claims go back.
        case stopping
        /// The lease is lost (or may be soon): nothing more is claimed, the downloads stop, and nothing is handed
        /// back (the rescuer decides for the claims).
        case fenced
        /// The feeding and every download have ended; what is left is being recorded. `fenced` when the lease was
        /// lost before or since.
        case drained(fenced: Bool)

        var isFenced: Bool { self == .fenced || self == .drained(fenced: true) }
        var isDrained: Bool { if case .drained = self { true } else { false } }

        /// The phase once the lease is lost.
        var fencing: Phase { isDrained ? .drained(fenced: true) : .fenced }
    }

    let worker: SharedQueueWorker
    let id: Int64
    let report: Locked<WorkerReport>
    let state = Locked(State())
    /// Wakes the feed: a notification, a recorded batch, the fence.
    let feedWake = Wake()
    /// Wakes the recording: a full batch, the end of the feeding.
    let batchWake = Wake()
    /// Wakes the feeding's race against the fence and the interruption.
    let stopWake = Wake()
    /// The directories downloads write into.
    let directories: ContainedDirectories

    struct State {
        var phase = Phase.running
        /// Claims not handed out yet.
        var buffered: [Claim] = []
        /// Claims handed out and not ended, by destination path.
        var held: [String: Claim] = [:]
        /// Ends not recorded yet.
        var completions: [Completion] = []
        var lastRenewal = ContinuousClock.now
        /// Whether the last statement failed (so that the database's return is reported once).
        var unreachable = false
        /// Ends being recorded now.
        var sending: Set<Int64> = []
        /// Downloads the database said this worker holds and the worker did not know of, at the last heartbeat.
        var strangers: Set<Int64> = []
    }

    init(worker: SharedQueueWorker, id: Int64, report: Locked<WorkerReport>) {
        self.worker = worker
        self.id = id
        self.report = report
        directories = ContainedDirectories(base: worker.configuration.directory.path)
    }

    var queue: SharedQueue { worker.queue }
    var configuration: SharedQueueWorker.Configuration { worker.configuration }

    /// What a child of the run's task group was.
    private enum Child {
        case feeding(interrupted: Bool)
        case recording
        case background
    }

    /// Runs the worker's registration to its end (see the type's description). Cancelling the task stops the run in
    /// order: the downloads stop and their claims go back, while the recording, the heartbeat and the fence watch go
    /// on until the last end is recorded (a database that stays silent fences the worker after half its lease, so a
    /// stop never waits longer for it).
    func run() async -> Ending {
        // The group runs apart from the caller's task, whose cancellation would reach every child at once: it
        // becomes the feeding's interruption instead.
        let group = Task.detached { await self.runChildren() }
        return await withTaskCancellationHandler {
            await group.value
        } onCancel: {
            interrupt()
        }
    }

    private func runChildren() async -> Ending {
        await withTaskGroup(of: Child.self) { group in
            group.addTask {
                await self.heartbeatLoop(); return .background
            }
            group.addTask {
                await self.fenceWatch(); return .background
            }
            group.addTask {
                await self.rescueLoop(); return .background
            }
            group.addTask {
                await self.listenLoop(); return .background
            }
            group.addTask {
                await self.batchLoop(); return .recording
            }
            group.addTask { .feeding(interrupted: await self.feed()) }
            var interrupted = false
            var running = 2  // the feeding and the recording
            while running > 0, let child = await group.next() {
                switch child {
                case .feeding(let wasInterrupted):
                    interrupted = wasInterrupted
                    running -= 1
                case .recording:
                    running -= 1
                case .background:
                    break
                }
            }
            group.cancelAll()
            let fenced = state.withLock { $0.phase.isFenced }
            if fenced { return .leaseLost }
            try? await queue.stopWorker(id)
            return interrupted ? .interrupted : .empty
        }
    }

    /// Stops claiming and stops every download; their claims go back.
    private func interrupt() {
        let first = state.withLock { state in
            guard state.phase == .running else { return false }
            state.phase = .stopping
            return true
        }
        guard first else { return }
        feedWake.signal()
        stopWake.signal()
    }

    /// Runs the downloads of the feed until it ends, the lease is lost or the run is interrupted (either cancels every
    /// download held, one being added at that moment included); hands back what was claimed and not handed out, and
    /// lets the recording finish. Returns whether the run was interrupted.
    private func feed() async -> Bool {
        let feed = ClaimFeed(run: self)
        await withTaskGroup(of: Void.self) { race in
            race.addTask { [self] in
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
            race.addTask { [self] in
                while !Task.isCancelled, state.withLock({ $0.phase == .running }) {
                    await stopWake.wait(upTo: .seconds(3600))
                }
            }
            await race.next()
            race.cancelAll()
        }
        // What was claimed and not handed out goes back now, fenced too: a worker fences itself when the database stops
        // answering, not only when its lease is gone, and a row it still holds would otherwise wait out the lease and
        // come back failed, an attempt counted for a request never made. A row that is another worker's by then is
        // left alone (a completion changes only rows running for this worker).
        let (leftover, interrupted) = state.withLock { state in
            defer {
                state.buffered = []
                state.phase = .drained(fenced: state.phase.isFenced)
            }
            return (state.buffered, state.phase == .stopping)
        }
        for claim in leftover { add(Completion(id: claim.id, kind: .returned)) }
        if !leftover.isEmpty { countReturned(leftover.count) }
        batchWake.signal()
        return interrupted
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
            log(.info, result.skipped ? "skipped: already there" : "done", claim, request, ["size": "\(result.size)"])
            worker.emit(
                .finished(
                    path: claim.path, url: request.url.absoluteString, size: result.size, sha256: result.sha256,
                    skipped: result.skipped))
        case .failure(let error) where error.isCancellation:
            completion = Completion(id: claim.id, kind: .returned, path: claim.path)
            // A fenced worker's claims are the rescuer's now: nothing goes back from here (the database refuses it).
            if !state.withLock({ $0.phase.isFenced }) { countReturned(1) }
        case .failure(let error) where error.code == .destinationBusy:
            // Another process holds the partial: a worker frozen past its lease (a paused machine) that has not
            // noticed yet, and lets go once it does. Not this download's failure: back to the queue a while later,
            // its attempt not counted, for whichever worker then gets the partial.
            var back = Completion(id: claim.id, kind: .returned, path: claim.path, error: Self.reason(error))
            back.delay = configuration.lease / 3
            completion = back
            report.withLock { $0.retried += 1 }
            let reason = "another process is writing its partial (a worker past its lease?); back to the queue"
            log(.warning, "failed: \(reason)", claim, request, ["will_retry": "true"])
            worker.emit(.failed(path: claim.path, url: request.url.absoluteString, reason: reason, willRetry: true))
        case .failure(let error):
            // The engine's rule, with the attempts the database counts.
            let decision = configuration.retryPolicy.decision(
                afterFailure: claim.attempt, transient: error.isTransient, status: error.status,
                retryAfter: error.retryAfter, maxRetries: claim.maxAttempts - 1, random: { Double.random(in: 0...1) })
            let retries = decision.retryDelay != nil
            var failure = Completion(
                id: claim.id, kind: retries ? .retry : .failed, path: claim.path, error: Self.reason(error))
            failure.delay = decision.retryDelay ?? .zero
            failure.hostHold = decision.hostHold ?? .zero
            completion = failure
            report.withLock { if retries { $0.retried += 1 } else { $0.failed += 1 } }
            if retries { worker.metrics?.retries.increment() }
            log(
                retries ? .warning : .error, "failed: \(Self.reason(error))", claim, request,
                ["will_retry": "\(retries)", "attempt": "\(claim.attempt)"])
            worker.emit(
                .failed(
                    path: claim.path, url: request.url.absoluteString, reason: Self.reason(error), willRetry: retries))
        }
        add(completion)
    }

    /// Logs a download's end with its identity as metadata (``SharedQueueWorker/Configuration/logger``).
    private func log(
        _ level: Logger.Level, _ message: String, _ claim: Claim, _ request: DownloadRequest,
        _ extra: [String: String] = [:]
    ) {
        let logger = configuration.logger
        guard logger.logLevel <= level else { return }
        var metadata: Logger.Metadata = [
            "download.id": "\(claim.id)", "download.url": "\(request.url.redactedString)",
            "download.path": "\(claim.path)",
        ]
        for (key, value) in extra { metadata[key] = .string(value) }
        logger.log(level: level, "\(message)", metadata: metadata)
    }

    /// Makes the directories of a claim's `path` (relative, checked by ``SharedDownload``) under the worker's
    /// directory, or says why it cannot.
    func makeDirectories(for path: String) -> String? {
        guard let problem = directories.walk(path.split(separator: "/").dropLast(), making: true) else { return nil }
        switch problem.finding {
        case .symbolicLink, .notDirectory:
            return "'\(problem.path)' is not a directory (a symbolic link or a file there is not followed)"
        case .cannotCreate(let error):
            return "cannot make the directory '\(problem.path)': \(String(cString: strerror(error)))"
        }
    }

    /// Fails a claim that cannot be run here (its directory cannot be made safely), for good.
    func refuse(_ claim: Claim, because problem: String) {
        let path = claim.path(in: configuration.directory)
        state.withLock { _ = $0.held.removeValue(forKey: path) }
        add(Completion(id: claim.id, kind: .failed, path: claim.path, error: problem))
        report.withLock { $0.failed += 1 }
        worker.emit(.failed(path: claim.path, url: claim.request.url.absoluteString, reason: problem, willRetry: false))
    }

    /// Records that `claim` was handed to the engine, with the next batch of ends (no batch of its own: a worker
    /// killed before it is sent gives the attempt back, one more try at most).
    func started(_ claim: Claim) {
        state.withLock { $0.completions.append(Completion(id: claim.id, kind: .started)) }
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
                return (state.completions, state.phase.isDrained)
            }
            if !batch.isEmpty {
                do {
                    let accepted = try await queue.complete(worker: id, batch)
                    state.withLock { $0.sending = [] }
                    reachable()
                    refuse(batch.filter { !accepted.contains($0.id) })
                    feedWake.signal()
                } catch {
                    unreachable(error)
                    let fenced = state.withLock { state in
                        state.completions.insert(contentsOf: batch, at: 0)
                        return state.phase.isFenced
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
        worker.metrics?.databaseErrors.increment()
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
                worker.metrics?.leaseRenewals.increment()
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
            defer { state.phase = state.phase.fencing }
            return !state.phase.isFenced
        }
        guard first else { return }
        worker.emit(.leaseLost)
        feedWake.signal()
        stopWake.signal()
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
