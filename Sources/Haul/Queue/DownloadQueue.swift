import Foundation
import HaulOperations
import Synchronization

/// Runs many downloads with controlled concurrency: a global limit (1 = one at a time, in submission order),
/// an optional per-host limit, priorities, pause/resume, cancellation, a failure policy, and progress for each
/// download and for the batch.
///
/// ```swift
/// let queue = DownloadQueue(downloader: Downloader(transport: AsyncHTTPClientTransport.shared))
/// queue.maxConcurrentDownloads = 1                          // strictly one after another
/// let handles = urls.map { queue.add(DownloadRequest(url: $0, destination: .directory(dir))) }
/// for handle in handles { print(try await handle.result.fileURL.path) }
/// ```
///
/// The same queue is reachable as `async`/`await` (``download(_:)``, ``downloadAll(_:)``, ``events``), as
/// `Operation`s (``DownloadOperation/init(_:queue:name:)``) and, through `HaulCombine`, as publishers.
/// Adding a request whose URL and destination equal a waiting or running one joins it instead of fetching
/// twice; the first request's settings apply.
public final class DownloadQueue: Sendable {
    /// How a queue admits and reports downloads. The defaults are those of ARCHITECTURE.md, "Defaults".
    public struct Configuration: Sendable {
        /// The most downloads running at once; 1 runs them one after another in submission order.
        public var maxConcurrentDownloads: Int
        /// The most downloads running at once against one host (scheme, host and port); `nil` for no limit.
        public var perHostLimit: Int?
        /// What happens to the other downloads when one fails for good (a cancellation is not a failure).
        public var failurePolicy: FailurePolicy
        /// Whether requests are recorded in the downloader's journal when added, so that
        /// ``DownloadQueue/resumeUnfinished(includingFailed:)`` can re-admit them after a restart. Turn it off when
        /// the caller can add the same requests again by itself (the `haul` command: rerunning the command does),
        /// to save a journal write per batch added and a few microseconds per request.
        public var recordsRequests: Bool
        /// The shortest time between two ``QueueEvent/batchProgress(_:)`` events (one always follows the end
        /// of the batch). Per-download progress is throttled by ``Downloader/Configuration/progressInterval``.
        public var progressInterval: Duration

        /// Creates a configuration: 4 at once, no per-host limit, failures leave the others running.
        public init(
            maxConcurrentDownloads: Int = 4,
            perHostLimit: Int? = nil,
            failurePolicy: FailurePolicy = .continueOthers,
            recordsRequests: Bool = true,
            progressInterval: Duration = .milliseconds(100)
        ) {
            self.maxConcurrentDownloads = maxConcurrentDownloads
            self.perHostLimit = perHostLimit
            self.failurePolicy = failurePolicy
            self.recordsRequests = recordsRequests
            self.progressInterval = progressInterval
        }
    }

    /// The engine every download runs on.
    public let downloader: Downloader
    let progressInterval: Duration
    let recordsRequests: Bool
    let state: Locked<State>
    /// `state.interest` as bits (``QueueEvent/Kind/bit``), readable without the lock: a download's event that no
    /// subscriber takes then costs no lock at all: with several threads finishing downloads, a lock taken for every
    /// event is contended (bench/compare, s3).
    let interestBits = Atomic<UInt16>(0)

    /// Creates a queue that runs its downloads on `downloader`.
    ///
    /// - Precondition: `maxConcurrentDownloads` and `perHostLimit` are at least 1.
    public init(downloader: Downloader, configuration: Configuration = Configuration()) {
        precondition(
            configuration.maxConcurrentDownloads >= 1,
            "maxConcurrentDownloads must be at least 1, not \(configuration.maxConcurrentDownloads)")
        precondition(
            (configuration.perHostLimit ?? 1) >= 1,
            "perHostLimit must be at least 1 or nil, not \(configuration.perHostLimit ?? 0)")
        self.downloader = downloader
        downloader.transport.allowConnections(perHost: configuration.maxConcurrentDownloads)
        progressInterval = configuration.progressInterval
        recordsRequests = configuration.recordsRequests
        state = Locked(
            State(
                scheduler: AdmissionScheduler(
                    maxConcurrent: configuration.maxConcurrentDownloads, perHostLimit: configuration.perHostLimit),
                failurePolicy: configuration.failurePolicy))
    }

    /// Ends the event sequences still subscribed: a loop over ``events`` ends once the queue is gone, as documented
    /// (a continuation released unfinished would leave it waiting for ever). Nothing else holds the queue now, so
    /// no one is sending its events.
    deinit {
        let subscribers = state.withLock { Array($0.subscribers.values) }
        for subscriber in subscribers { subscriber.finish() }
    }

    // MARK: - Adding

    /// Adds `request`; it starts when a global slot and a slot for its host are free (higher priority first,
    /// then in the order added). Returns a handle to await, cancel or re-prioritise it.
    @discardableResult
    public func add(_ request: DownloadRequest) -> DownloadHandle {
        add([request])[0]
    }

    /// Adds `requests` in order (see ``add(_:)``); the handles are in the same order.
    ///
    /// With a journal on the downloader (and ``Configuration/recordsRequests``), the requests are recorded
    /// first, in one write, so a process killed before they finish can re-admit them
    /// (``resumeUnfinished(includingFailed:)``).
    ///
    /// Where many requests of the batch go into one directory, the directory is listed once, and a download whose
    /// file was not there when the batch was added does not look for it again when it starts (a look-up per file
    /// showed on ext4): a file that appears in between is found when publishing, which never replaces it (except
    /// with ``ConflictPolicy/overwrite``), and the conflict policy applies then, after the request.
    ///
    /// A large batch of one priority, on a queue whose failures leave the others running, is entered in slices and
    /// its first downloads start before the rest is entered (bench/compare, s3: the first request goes out before a
    /// list of 10,000 is in); the order of admission is the same. A ``cancelAll()`` made on another thread
    /// while such a batch is being added may then miss the requests not yet entered.
    @discardableResult
    public func add(_ requests: [DownloadRequest]) -> [DownloadHandle] {
        add(requests, unlessEndedDuringScan: false)
    }

    /// Adds `request` paused, or not: a paused download is paused as it is added, under the same lock, so it never
    /// starts before ``resume(_:)`` (adding and then pausing could let it start in between, and a download paused
    /// while it runs moves to the front of the waiting order). Joining a download already in the queue leaves that
    /// one as it is.
    public func add(_ request: DownloadRequest, paused: Bool) -> DownloadHandle {
        add([request], unlessEndedDuringScan: false, paused: paused)[0]
    }

    /// ``add(_:)-([DownloadRequest])``; with `unlessEndedDuringScan`, leaves out the requests whose download ended
    /// while ``resumeUnfinished(includingFailed:)`` read the journal (their records there are older than their end).
    /// Adds one request of a stream; `absentPath` as ``DestinationSnapshot/Listing`` found it.
    func add(_ request: DownloadRequest, absentPath: String?) -> DownloadHandle {
        add([request], unlessEndedDuringScan: false, absent: [absentPath])[0]
    }

    /// Adds `requests` in order, paused or not (see ``add(_:paused:)``); `absentPaths`, one per request, as a
    /// ``DestinationSnapshot/Listing`` taken as they were read found them (a service adding what its callers send).
    package func add(_ requests: [DownloadRequest], absentPaths: [String?], paused: Bool) -> [DownloadHandle] {
        add(requests, unlessEndedDuringScan: false, absent: absentPaths, paused: paused)
    }

    private func add(
        _ requests: [DownloadRequest], unlessEndedDuringScan: Bool, absent given: [String?]? = nil,
        paused: Bool = false
    ) -> [DownloadHandle] {
        if recordsRequests, let journal = downloader.configuration.journal {
            Self.recordRequested(requests, in: journal)
        }
        var added: [(DownloadID, ResultBox<Outcome>, DownloadControl)?] = []
        added.reserveCapacity(requests.count)
        let sliced = slicesAdmission(of: requests)
        let sliceSize = sliced ? Self.admissionSlice : max(requests.count, 1)
        // Sliced, the listing is made once the first slice's downloads run (they look their destinations up), not
        // before the first request.
        var absent = given ?? (sliced ? nil : DestinationSnapshot.absentPaths(of: requests))
        var start = 0
        repeat {
            let slice = requests[start..<min(start + sliceSize, requests.count)]
            mutate { state in
                if start == 0 {
                    // Room for the whole batch at once: growing one by one moved every entry ~14 times for 10,000.
                    state.entries.reserveCapacity(state.entries.count + requests.count)
                    state.joined.reserveCapacity(state.joined.count + requests.count)
                }
                for index in slice.indices {
                    let request = requests[index]
                    // Read as unfinished, but ended while the journal was read, or cancelled and still ending (its
                    // record goes as it ends): not added again.
                    if unlessEndedDuringScan,
                        case let key = JoinKey(url: request.url, destination: request.destination),
                        state.endedDuringScan.contains(key) || state.ending[key] != nil
                    {
                        added.append(nil)
                        continue
                    }
                    let entered = enqueue(request, absentPath: absent?[index], in: &state)
                    // A new entry only: one joined is another caller's download.
                    if paused, let entry = state.entries[entered.0.rawValue], entry.handles == 1, !entry.paused,
                        state.scheduler.pause(entered.0.rawValue)
                    {
                        entry.paused = true
                        if state.wants(.paused) { state.publish(.paused(entered.0)) }
                    }
                    added.append(entered)
                }
                admit(in: &state)
            }
            if sliced && start == 0 { absent = DestinationSnapshot.absentPaths(of: requests) }
            start += sliceSize
        } while start < requests.count
        return zip(requests, added).compactMap { request, added in
            added.map { DownloadHandle(id: $0.0, request: request, box: $0.1, control: $0.2, queue: self) }
        }
    }

    /// How many requests of a large batch are entered under one hold of the lock.
    static let admissionSlice = 256

    /// Whether entering `requests` in slices admits them exactly as entering them at once would: one priority (so
    /// admission follows the order added either way), and no failure policy that must cancel the rest of the batch.
    private func slicesAdmission(of requests: [DownloadRequest]) -> Bool {
        guard requests.count > Self.admissionSlice, let priority = requests.first?.priority else { return false }
        return locked { $0.failurePolicy == .continueOthers } && requests.allSatisfy { $0.priority == priority }
    }

    /// Re-admits what an earlier process left unfinished in the downloader's journal: requests added to a
    /// queue and never finished, and downloads with a partial to resume (from where they stopped), in the order
    /// they were first added. Completed downloads are not fetched again; failed ones only with
    /// `includingFailed`, unless they kept a partial (``Downloader/Configuration/keepsPartialOnFailure``), which
    /// counts as unfinished; ones cancelled through the queue were forgotten (unless they kept a partial, see
    /// ``Downloader/Configuration/keepsPartialOnCancel``). Of several requests for one file (a link added again with a
    /// new token), only the last added is re-admitted: it resumes the partial an earlier one left there, whatever its
    /// URL (see ``Downloader/Configuration/journal``). Returns their handles; none without a journal.
    ///
    /// ```swift
    /// var configuration = Downloader.Configuration()
    /// configuration.journal = try SQLiteJournal(path: journalPath)
    /// let queue = DownloadQueue(downloader: Downloader(transport: transport, configuration: configuration))
    /// let resumed = queue.resumeUnfinished()      // after a crash or an app kill
    /// ```
    @discardableResult
    public func resumeUnfinished(includingFailed: Bool = false) -> [DownloadHandle] {
        guard let journal = downloader.configuration.journal else { return [] }
        // A download of this queue that ends while the journal is read may be read as unfinished: it is not
        // added again (the queue notes what ends while a scan is under way).
        locked { $0.resumeScans += 1 }
        defer {
            locked { state in
                state.resumeScans -= 1
                if state.resumeScans == 0 { state.endedDuringScan = [] }
            }
        }
        let records = journal.allRecords().compactMap { record -> (JournalRecord, DownloadRequest, String?)? in
            guard let request = record.request,
                record.state.isUnfinished || (includingFailed && record.state.isFailure)
            else { return nil }
            return (record, request, record.path.isEmpty ? request.plannedPath : record.path)
        }
        // A download belongs to its file: of the requests for one file (a link renewed with a new token, say), the
        // last added runs, and takes over what an earlier one left there; the others' records go.
        var last: [String: Int] = [:]
        for (index, (_, _, path)) in records.enumerated() {
            if let path { last[path] = index }
        }
        var requests: [DownloadRequest] = []
        var superseded: [JournalKey] = []
        for (index, (record, request, path)) in records.enumerated() {
            if let path, last[path] != index {
                if !record.state.isFile { superseded.append(record.key) }
                continue
            }
            requests.append(request)
        }
        if !superseded.isEmpty { journal.remove(superseded) }
        return add(requests, unlessEndedDuringScan: true)
    }

    /// Records `requests` as requested, except those the journal already knows as waiting, partial or done
    /// (a partial must stay resumable, a completed file skippable).
    private static func recordRequested(_ requests: [DownloadRequest], in journal: any Journal) {
        var seen = Set<JournalKey>()
        let records = requests.compactMap { request -> JournalRecord? in
            let key = JournalKey(request)
            guard seen.insert(key).inserted else { return nil }
            if let known = journal.record(for: key), !known.state.isFailure { return nil }
            return JournalRecord(key: key, path: "", state: .requested, request: request)
        }
        if !records.isEmpty { journal.store(records) }
    }

    // MARK: - Limits and admission

    /// The most downloads running at once (at least 1). Raising it starts waiting downloads at once; lowering
    /// it lets running ones finish.
    public var maxConcurrentDownloads: Int {
        get { locked { $0.scheduler.maxConcurrent } }
        set {
            precondition(newValue >= 1, "maxConcurrentDownloads must be at least 1, not \(newValue)")
            // Before the downloads it lets start ask for connections.
            downloader.transport.allowConnections(perHost: newValue)
            locked { state in
                state.scheduler.maxConcurrent = newValue
                admit(in: &state)
            }
        }
    }

    /// The most downloads running at once against one host (at least 1), or `nil` for no per-host limit.
    public var perHostLimit: Int? {
        get { locked { $0.scheduler.perHostLimit } }
        set {
            precondition((newValue ?? 1) >= 1, "perHostLimit must be at least 1 or nil, not \(newValue ?? 0)")
            locked { state in
                state.scheduler.perHostLimit = newValue
                admit(in: &state)
            }
        }
    }

    /// What happens to the other downloads when one fails for good.
    public var failurePolicy: FailurePolicy {
        get { locked { $0.failurePolicy } }
        set { locked { $0.failurePolicy = newValue } }
    }

    /// Stops starting downloads; running ones go on. Downloads can still be added.
    public func pause() {
        locked { $0.scheduler.isPaused = true }
    }

    /// Starts admitting downloads again after ``pause()``.
    public func resume() {
        locked { state in
            state.scheduler.isPaused = false
            admit(in: &state)
        }
    }

    /// Whether admission is paused.
    public var isPaused: Bool { locked { $0.scheduler.isPaused } }

    // MARK: - Cancelling

    /// Cancels every waiting and running download. Nothing they wrote is left at a destination.
    public func cancelAll() {
        cancelEntries { state in state.entries.keys.sorted() }
    }

    /// Cancels the waiting and running downloads whose request matches `predicate`. The predicate runs without the
    /// queue's lock (it may read the queue), on the requests there were when the call began.
    public func cancel(where predicate: (DownloadRequest) -> Bool) {
        let candidates = locked { state in state.entries.map { ($0.key, $0.value.request) } }
        Self.assertLockNotHeld("calling a cancel(where:) predicate")
        let chosen = candidates.filter { predicate($0.1) }.map(\.0).sorted()
        cancelEntries { _ in chosen }
    }

    /// Cancels the entries `pick` names (those still there), in one hold of the lock.
    /// Cancels the downloads `pick` chooses, in one hold of the lock; returns them.
    @discardableResult
    func cancelEntries(_ pick: (inout State) -> [UInt64]) -> [UInt64] {
        let (picked, effects) = mutate { state -> ([UInt64], SideEffects) in
            var effects = SideEffects()
            let picked = pick(&state)
            for id in picked { cancelEntry(id, in: &state, effects: &effects) }
            effects.idleWaiters = takeIdleWaiters(in: &state)
            return (picked, effects)
        }
        effects.run()
        return picked
    }

    // MARK: - Observing

    /// The current batch's progress.
    public var progress: BatchProgress { locked { $0.batchProgress() } }

    /// Downloads waiting for a slot.
    public var waitingCount: Int { locked { $0.scheduler.waitingCount } }

    /// Downloads running now.
    public var runningCount: Int { locked { $0.scheduler.runningCount } }

    /// Waits until nothing is waiting or running (returns at once if the queue is idle). Does not block a
    /// thread; cancelling the waiting task ends the wait, not the downloads.
    public func waitUntilIdle() async {
        let waiter = ResultBox<Void>()
        let idle = locked { state in
            if state.isIdle { return true }
            state.idleWaiters.append(waiter)
            return false
        }
        if idle { return }
        await withTaskCancellationHandler {
            await waiter.wait()
        } onCancel: {
            waiter.resolve(())
        }
    }
}
