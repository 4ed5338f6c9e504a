import Foundation
import HaulOperations
import Synchronization

extension DownloadQueue {
    typealias Outcome = Result<DownloadResult, DownloadError>

    /// Downloads with the same URL and destination share one transfer.
    struct JoinKey: Hashable {
        let url: URL
        let destination: Destination
        /// Hashed once: the table hashes a key again for each look-up, and for each key it moves when another is
        /// removed, and hashing a URL reads all of its text.
        private let hash: Int

        init(url: URL, destination: Destination) {
            self.url = url
            self.destination = destination
            var hasher = Hasher()
            hasher.combine(url)
            hasher.combine(destination)
            hash = hasher.finalize()
        }

        static func == (left: JoinKey, right: JoinKey) -> Bool {
            left.hash == right.hash && left.url == right.url && left.destination == right.destination
        }

        func hash(into hasher: inout Hasher) { hasher.combine(hash) }
    }

    /// Drops `entry`'s join if it is still this entry's, with one lookup.
    static func leaveJoin(_ entry: Entry, id: UInt64, in state: inout State) {
        if let index = state.joined.index(forKey: entry.joinKey), state.joined.values[index] == id {
            state.joined.remove(at: index)
        }
    }

    /// One queued download (waiting or running) and everyone waiting for it. Touched only under the queue's lock.
    ///
    /// A class: the table of entries then moves 8 bytes per entry when it reorganises on a removal (an entry with its
    /// request is a few hundred), and an admitted entry is updated in place instead of copied out and back.
    final class Entry {
        /// The request, its priority as last set (``DownloadQueue/setPriority(_:of:)``).
        var request: DownloadRequest
        /// Its URL and destination; a waiting download moved to another file has them changed
        /// (``DownloadQueue/moveWaitingDownload(_:to:)``).
        var joinKey: JoinKey
        let box: ResultBox<Outcome>
        /// The destination, when it was absent as the request was added (see ``DestinationSnapshot``).
        var absentPath: String?
        /// Handles that still want the download; cancelling through the last one cancels it.
        var handles = 1
        /// Its task, once admitted (made after the lock that admitted it).
        var task: TaskCell?
        /// The latest progress of a running download (set when it is admitted): its own lock, so that the
        /// download's events need not take the queue's.
        var progress: Locked<DownloadProgress?>?
        /// The outcome of a cancelled download of the same URL and destination that was still ending when this one
        /// was added: this one starts once it has ended (and let go of the destination, its partial's lock).
        var predecessor: ResultBox<Outcome>?
        /// Whether the caller paused it (``DownloadQueue/pause(_:)``): it is not admitted until resumed.
        var paused = false
        /// Whether its task was cancelled to pause it: when the run has stopped, it goes back to the front of the
        /// waiting order (paused, unless resumed meanwhile) instead of ending.
        var requeues = false
        /// Whether it was cancelled while it ran: its run is ending, and a pause must not bring it back (as aria2
        /// refuses to pause a download being removed).
        var cancelled = false
        /// Whether a run of it kept its partial for a pause: if it is cancelled before a run picks the partial up,
        /// the partial is discarded (unless ``Downloader/Configuration/keepsPartialOnCancel`` keeps it).
        var keptPartialForPause = false
        /// Its speed limit, which may change while it runs, and the pause flag its run reads.
        let control: DownloadControl
        /// Whether its request was replaced while it waited (``DownloadQueue/replaceWaitingRequest(of:with:)``,
        /// ``DownloadQueue/moveWaitingDownload(_:to:)``): its handles then show the request it ended with.
        var replaced = false

        init(request: DownloadRequest, joinKey: JoinKey, box: ResultBox<Outcome>, absentPath: String?) {
            self.request = request
            self.joinKey = joinKey
            self.box = box
            self.absentPath = absentPath
            control = DownloadControl(maxBytesPerSecond: request.maxBytesPerSecond)
        }
    }

    /// What a locked section decided to do once the lock is released: resolve results, cancel tasks (whose
    /// cancellation handlers run synchronously and must not find the lock held), wake idle waiters.
    struct SideEffects {
        /// Outcomes already stored (under the lock, see ``ResultBox/store(_:)``) whose waiters are to be woken; one
        /// nobody waits for is not kept (most downloads of a batch: no array, no copy of the result).
        var resolutions: [ResultBox<Outcome>.Wakeup] = []
        var cancellations: [Task<Void, Never>] = []
        /// Requests cancelled while waiting, to remove from the journal (a write: not under the lock).
        var forgotten: [JournalKey] = []
        /// Partials kept for a pause, and their records, to discard: the download was cancelled.
        var discarded: [JournalKey] = []
        var journal: (any Journal)?
        var idleWaiters: [ResultBox<Void>] = []

        func run() {
            DownloadQueue.assertLockNotHeld("resuming waiters, cancelling tasks or calling the journal")
            if let journal, !forgotten.isEmpty {
                // Only what was merely requested: a partial kept from an earlier run stays resumable.
                let requested = forgotten.filter { key in
                    if case .requested = journal.record(for: key)?.state { true } else { false }
                }
                if !requested.isEmpty { journal.remove(requested) }
            }
            if let journal { for key in discarded { journal.discardPartial(of: key) } }
            for task in cancellations { task.cancel() }
            for resolution in resolutions { resolution.run() }
            for waiter in idleWaiters { waiter.resolve(()) }
        }
    }

    /// Counters of the batch in progress (see ``BatchProgress``).
    struct BatchCounters {
        var totalFiles = 0
        var finishedFiles = 0
        var failedFiles = 0
        var cancelledFiles = 0
        /// Sizes of the finished files.
        var finishedBytes: Int64 = 0
        /// `expectedSize` of waiting downloads that declared one, and how many did not.
        var waitingExpectedBytes: Int64 = 0
        var waitingWithoutSize = 0
    }

    /// One subscription to ``DownloadQueue/events``: where its events go and which kinds it takes.
    struct Subscriber {
        /// Where its events go: a sequence's buffer, or an observer called as each is sent
        /// (``DownloadQueue/observe(including:_:)``).
        enum Sink {
            case stream(AsyncStream<QueueEvent>.Continuation)
            case observer(@Sendable (QueueEvent) -> Void)
        }

        let sink: Sink
        let kinds: Set<QueueEvent.Kind>

        func send(_ event: QueueEvent) {
            switch sink {
            case .stream(let continuation): continuation.yield(event)
            case .observer(let observer): observer(event)
            }
        }

        /// Ends a sequence after what it has buffered; an observer just hears no more.
        func finish() {
            if case .stream(let continuation) = sink { continuation.finish() }
        }
    }

    /// What is to be sent to subscribers once the lock is released, in the order it happened.
    enum Delivery {
        /// An event, with the subscribers there were when it was published (each takes it if it takes its kind).
        case event(QueueEvent, [Subscriber])
        /// The end of these subscribers' sequences (``DownloadQueue/finishEvents()``), after the events before it.
        case finish([Subscriber])
        /// Resolved once every event before it has been sent (``DownloadQueue/eventsSent()``).
        case mark(ResultBox<Void>)
    }

    /// The task of an admitted download, made after the lock that admitted it: a cancellation that comes first is
    /// kept for it. A small lock of its own, so that storing the task does not take the queue's lock again.
    final class TaskCell: Sendable {
        private let state = Locked<(task: Task<Void, Never>?, cancelled: Bool)>((nil, false))

        /// Stores `task`; returns whether the download was cancelled before (its caller then cancels the task).
        func store(_ task: Task<Void, Never>) -> Bool {
            state.withLock { state in
                state.task = task
                return state.cancelled
            }
        }

        /// Marks the download cancelled; returns its task, if made already, to cancel after the queue's lock.
        func cancel() -> Task<Void, Never>? {
            state.withLock { state in
                state.cancelled = true
                return state.task
            }
        }

        /// Whether the task is made, and whether the download was cancelled.
        var status: (made: Bool, cancelled: Bool) { state.withLock { ($0.task != nil, $0.cancelled) } }
    }

    /// What an admission by the scheduler leads to, once the lock is released.
    enum Admission {
        /// A waiter of an extra connection or of a moved download got its slot.
        case wake(ResultBox<Bool>)
        /// A download starts: its task is made and stored in its cell.
        case start(Start)
    }

    /// A download admitted to run, with what its task needs.
    struct Start: Sendable {
        let id: UInt64
        let cell: TaskCell
        let request: DownloadRequest
        let absentPath: String?
        let predecessor: ResultBox<Outcome>?
        let progress: Locked<DownloadProgress?>
        let control: DownloadControl
    }

    /// All of the queue's bookkeeping, behind one lock.
    ///
    /// The lock-order rule: while the lock is held nothing is yielded into a stream, no continuation is resumed, no
    /// task is cancelled and no closure from outside (a predicate, a transport's or journal's code, a stream's
    /// termination handler) is called. What a locked section decides to do of that kind it returns (``SideEffects``,
    /// the ``outbox`` of events) and does after the lock. A stream's `onTermination` may take the lock: no holder of
    /// the lock ever waits for a task's own lock, which `swift_task_cancel` holds while it runs the handler.
    struct State {
        var scheduler: AdmissionScheduler
        var failurePolicy: FailurePolicy
        var entries: [UInt64: Entry] = [:]
        var joined: [JoinKey: UInt64] = [:]
        /// How many ``DownloadQueue/resumeUnfinished(includingFailed:)`` calls are reading the journal, and the keys
        /// of the downloads that ended meanwhile (kept only while one is).
        var resumeScans = 0
        var endedDuringScan: Set<JoinKey> = []
        /// Running downloads cancelled and not yet ended, by key: a new add of the same key is a fresh download,
        /// which waits for the old one to end (``Entry/predecessor``).
        var ending: [JoinKey: (id: UInt64, outcome: ResultBox<Outcome>)] = [:]
        var nextID: UInt64 = 0
        /// Extra connections' numbers in the scheduler, above every download's: ``connectionIDs`` and a count.
        var nextConnectionID: UInt64 = 0
        static let connectionIDs: UInt64 = 1 << 63
        var subscribers: [UInt64: Subscriber] = [:]
        /// ``subscribers``' values, made when they change: each published event keeps this list (shared, not
        /// copied) for its delivery after the lock.
        var subscriberList: [Subscriber] = []
        var nextSubscriber: UInt64 = 0
        /// Events published and not yet sent, in order (see ``DownloadQueue/mutate(_:)``).
        var outbox: [Delivery] = []
        /// Whether a thread is sending the outbox's events: the others leave theirs to it, so that every subscriber
        /// gets every event in the one order they were published in, and nothing is sent under the lock.
        var delivering = false
        /// The kinds some subscriber takes: an event of another kind is not even made (making, sending and waking for
        /// events nobody reads would cost 10,000 small downloads a third of their CPU).
        var interest: Set<QueueEvent.Kind> = []
        var batch = BatchCounters()
        var lastBatchEvent: ContinuousClock.Instant?
        var idleWaiters: [ResultBox<Void>] = []
        /// Extra connections of running downloads (``Connections``), waiting or admitted, by their scheduler ID; each
        /// box tells its waiter whether it got the slot.
        var connections: [UInt64: ResultBox<Bool>] = [:]
        /// How many of them are admitted: the scheduler counts them as running, the batch does not count them as files.
        var runningConnections = 0
        /// The scheduler numbers of downloads that moved to another origin's slot (``Connections/move(to:)``), by the
        /// download's number, and the downloads by those numbers (a running slot's progress is its download's).
        var slots: [UInt64: UInt64] = [:]
        var movedSlots: [UInt64: UInt64] = [:]
        /// Moving downloads waiting for their new slot, by its number; each box tells its waiter whether it got it.
        var moves: [UInt64: ResultBox<Bool>] = [:]
        /// What ``DownloadQueue/admit(in:)`` admitted, carried out by ``DownloadQueue/locked(_:)`` once the lock is
        /// released: no task is made and no waiter woken under the lock.
        var admitted: [Admission] = []

        init(scheduler: AdmissionScheduler, failurePolicy: FailurePolicy) {
            self.scheduler = scheduler
            self.failurePolicy = failurePolicy
        }

        var isIdle: Bool { scheduler.waitingCount == 0 && scheduler.runningCount == 0 }

        /// Queues `event` for the subscribers there are now; it is sent after the lock, in the order published.
        mutating func publish(_ event: QueueEvent) {
            outbox.append(.event(event, subscriberList))
        }

        /// The outbox, for the caller to send after the lock, unless another thread is sending (it will send these
        /// too). The caller then sends until ``nextDeliveries()`` has nothing more.
        mutating func takeDeliveries() -> [Delivery]? {
            guard !delivering, !outbox.isEmpty else { return nil }
            delivering = true
            defer { outbox = [] }
            return outbox
        }

        /// What was published while the sender sent the last batch; `nil` (and the sender's turn over) when nothing.
        mutating func nextDeliveries() -> [Delivery]? {
            guard !outbox.isEmpty else {
                delivering = false
                return nil
            }
            defer { outbox = [] }
            return outbox
        }

        /// Whether some subscriber takes events of `kind`.
        func wants(_ kind: QueueEvent.Kind) -> Bool { interest.contains(kind) }

        /// Recomputes ``interest`` after the subscribers changed; returns it as bits for ``interestBits``.
        mutating func updateInterest() -> UInt16 {
            subscriberList = Array(subscribers.values)
            interest = subscribers.values.reduce(into: []) { $0.formUnion($1.kinds) }
            return interest.reduce(0) { $0 | $1.bit }
        }

        func batchProgress() -> BatchProgress {
            var progress = BatchProgress()
            progress.totalFiles = batch.totalFiles
            progress.finishedFiles = batch.finishedFiles
            progress.failedFiles = batch.failedFiles
            progress.cancelledFiles = batch.cancelledFiles
            // A download gone on at another origin that waits for its slot there is under way all the same.
            progress.runningFiles = scheduler.runningCount - runningConnections + moves.count

            var written = batch.finishedBytes
            var knownTotal = batch.finishedBytes + batch.waitingExpectedBytes
            var knownFiles = batch.finishedFiles + (scheduler.waitingCount - batch.waitingWithoutSize)
            var unknownFiles = batch.waitingWithoutSize
            var speed = 0.0
            for id in scheduler.runningIDs {
                guard let entry = entries[id] ?? movedSlots[id].flatMap({ entries[$0] }) else { continue }
                let current = entry.progress?.withLock { $0 }
                let total = current?.totalBytes ?? entry.request.expectedSize
                written += current?.bytesWritten ?? 0
                speed += current?.bytesPerSecond ?? 0
                if let total {
                    knownTotal += total
                    knownFiles += 1
                } else {
                    unknownFiles += 1
                }
            }
            progress.bytesWritten = written
            progress.bytesPerSecond = speed
            progress.totalBytes = unknownFiles == 0 ? knownTotal : nil
            // Sizes not yet known are estimated from the average known size, so the ETA covers the whole batch.
            let estimatedTotal: Double? =
                unknownFiles == 0
                ? Double(knownTotal)
                : knownFiles > 0 ? Double(knownTotal) * Double(knownFiles + unknownFiles) / Double(knownFiles) : nil
            if let estimatedTotal, speed > 0 {
                progress.estimatedTimeRemaining = .seconds(max(0, estimatedTotal - Double(written)) / speed)
            }
            return progress
        }
    }

    // MARK: - The lock

    /// Runs `body` under the queue's lock, then carries out what it admitted (``admit(in:)``). Every locked section
    /// goes through here (or ``mutate(_:)``), so that debug builds can check the lock-order rule
    /// (``assertLockNotHeld(_:)``).
    func locked<Result>(_ body: (inout State) -> Result) -> Result {
        let (result, admitted) = lockedHoldingAdmissions(body)
        if !admitted.isEmpty { carryOut(admitted) }
        return result
    }

    /// ``locked(_:)``, returning what it admitted for the caller to carry out (``carryOut(_:)``) when it chooses.
    private func lockedHoldingAdmissions<Result>(_ body: (inout State) -> Result) -> (Result, [Admission]) {
        var admitted: [Admission] = []
        let result = state.withLock { state in
            #if DEBUG
            QueueLockCheck.setHeld(true)
            defer { QueueLockCheck.setHeld(false) }
            #endif
            let result = body(&state)
            if !state.admitted.isEmpty { swap(&admitted, &state.admitted) }
            return result
        }
        return (result, admitted)
    }

    /// Debug builds: stops the program if this thread holds a queue's lock, where `what` (yielding events, resuming
    /// a continuation, calling a closure from outside) is about to happen.
    static func assertLockNotHeld(_ what: @autoclosure () -> String) {
        #if DEBUG
        precondition(!QueueLockCheck.isHeld, "\(what()) under a DownloadQueue's lock")
        #endif
    }

    /// Runs `body` under the queue's lock, then sends the events it published, after the lock (see ``State`` for the
    /// rule). Every locked section that may publish goes through here.
    func mutate<Result>(_ body: (inout State) -> Result) -> Result {
        let (result, deliveries) = locked { state in (body(&state), state.takeDeliveries()) }
        if let deliveries { deliver(deliveries) }
        return result
    }

    /// Sends `deliveries`, then whatever was published meanwhile, until the outbox is empty. One thread at a time
    /// (``State/delivering``), with no lock held while it yields or calls an observer.
    private func deliver(_ deliveries: [Delivery]) {
        Self.assertLockNotHeld("yielding events")
        var batch = deliveries
        while true {
            for delivery in batch {
                switch delivery {
                case .event(let event, let subscribers):
                    let kind = event.kind
                    for subscriber in subscribers where subscriber.kinds.contains(kind) { subscriber.send(event) }
                case .finish(let subscribers):
                    for subscriber in subscribers { subscriber.finish() }
                case .mark(let box):
                    box.resolve(())
                }
            }
            guard let next = locked({ $0.nextDeliveries() }) else { return }
            batch = next
        }
    }

    // MARK: - Admission

    /// Adds an entry (or joins an identical one) and announces it. Call ``admit(in:)`` after.
    func enqueue(
        _ request: DownloadRequest, absentPath: String?, in state: inout State
    ) -> (DownloadID, ResultBox<Outcome>, DownloadControl) {
        let key = JoinKey(url: request.url, destination: request.destination)
        if let existing = state.joined[key], let entry = state.entries[existing] {
            entry.handles += 1
            return (DownloadID(rawValue: existing), entry.box, entry.control)
        }
        if state.isIdle {
            state.batch = BatchCounters()  // a new batch begins
        }
        state.nextID += 1
        let id = state.nextID
        let entry = Entry(request: request, joinKey: key, box: ResultBox(), absentPath: absentPath)
        entry.predecessor = state.ending[key]?.outcome
        state.entries[id] = entry
        state.joined[key] = id
        state.batch.totalFiles += 1
        if let size = request.expectedSize {
            state.batch.waitingExpectedBytes += size
        } else {
            state.batch.waitingWithoutSize += 1
        }
        state.scheduler.enqueue(id, host: Self.originKey(for: request.url), priority: request.priority)
        if state.wants(.queued) { state.publish(.queued(DownloadID(rawValue: id), request)) }
        publishBatchProgress(in: &state, force: false)
        return (DownloadID(rawValue: id), entry.box, entry.control)
    }

    /// Takes what the scheduler admits now into ``State/admitted``, which ``locked(_:)`` carries out after the lock.
    func admit(in state: inout State) {
        for id in state.scheduler.admit() {
            if let move = state.moves.removeValue(forKey: id) {
                state.admitted.append(.wake(move))
                continue
            }
            if let connection = state.connections[id] {
                state.runningConnections += 1
                state.admitted.append(.wake(connection))
                continue
            }
            guard let entry = state.entries[id] else { continue }
            leaveWaiting(entry.request, in: &state)
            // A download paused while it ran starts again from the bytes it had (its partial, kept).
            let held = entry.progress?.withLock { $0 }
            let progress = Locked<DownloadProgress?>(
                held.map {
                    DownloadProgress(bytesWritten: $0.bytesWritten, totalBytes: $0.totalBytes, bytesPerSecond: 0)
                })
            entry.progress = progress
            let cell = TaskCell()
            entry.task = cell
            state.admitted.append(
                .start(
                    Start(
                        id: id, cell: cell, request: entry.request, absentPath: entry.absentPath,
                        predecessor: entry.predecessor, progress: progress, control: entry.control)))
        }
    }

    /// Wakes the admitted waiters and starts the admitted downloads' tasks, storing each in its task cell (a download
    /// cancelled meanwhile has its task cancelled at once).
    func carryOut(_ admitted: [Admission]) {
        Self.assertLockNotHeld("making tasks or waking waiters")
        for admission in admitted {
            switch admission {
            case .wake(let box):
                box.resolve(true)
            case .start(let start):
                let task = Task(executorPreference: downloader.preferredExecutor(for: start.request)) { [self] in
                    // A task can start before it is stored, and so before a cancellation made since its admission
                    // reaches it: it cancels itself then, before anything else.
                    if start.cell.status.cancelled { withUnsafeCurrentTask { $0?.cancel() } }
                    await start.predecessor?.wait()
                    await run(
                        start.id, start.request, absentPath: start.absentPath, progress: start.progress,
                        control: start.control)
                }
                if start.cell.store(task) { task.cancel() }
            }
        }
    }

    private func leaveWaiting(_ request: DownloadRequest, in state: inout State) {
        if let size = request.expectedSize {
            state.batch.waitingExpectedBytes -= size
        } else {
            state.batch.waitingWithoutSize -= 1
        }
    }

    /// Counts a download that goes back to waiting (paused while it ran) in the batch's waiting counters again.
    private func reenterWaiting(_ request: DownloadRequest, in state: inout State) {
        if let size = request.expectedSize {
            state.batch.waitingExpectedBytes += size
        } else {
            state.batch.waitingWithoutSize += 1
        }
    }

    /// Per-host limits count by origin (scheme, host, port): the same origin the redirect rules use.
    static func originKey(for url: URL) -> String {
        let origin = HTTPRules.origin(of: url)
        return "\(origin.scheme)://\(origin.host):\(origin.port)"
    }

    // MARK: - Running

    private func run(
        _ id: UInt64, _ request: DownloadRequest, absentPath: String?, progress: Locked<DownloadProgress?>,
        control: DownloadControl
    ) async {
        let outcome: Outcome
        do {
            let connections = Connections(queue: self, id: id, priority: request.priority, control: control)
            outcome = .success(
                try await downloader.download(
                    request, absentPath: absentPath, connections: connections, control: control
                ) { [self] event in
                    record(event, of: id, progress: progress)
                })
        } catch {
            outcome = .failure(error)
        }
        complete(id, with: outcome)
    }

    private func record(_ event: DownloadEvent, of id: UInt64, progress: Locked<DownloadProgress?>) {
        switch event {
        case .progress(let latest):
            progress.withLock { $0 = latest }
        case .started(_, let resumingAt):
            progress.withLock {
                $0 = DownloadProgress(bytesWritten: resumingAt, totalBytes: $0?.totalBytes, bytesPerSecond: 0)
            }
        default:
            break
        }
        // A download's last event is published by complete(), with its outcome stored in the same hold of the
        // lock: a subscriber of that download (``DownloadHandle/events``) then either finds the outcome or gets the
        // event.
        if event.isTerminal { return }
        // The bits may lag a subscription made meanwhile (an event concurrent with subscribing may be missed
        // either way); under the lock `wants` decides.
        let kind = QueueEvent.Kind(event)
        let bits = interestBits.load(ordering: .acquiring)
        let batch: Bool = if case .progress = event { bits & QueueEvent.Kind.batchProgress.bit != 0 } else { false }
        guard bits & kind.bit != 0 || batch else { return }
        mutate { state in
            if state.wants(kind) { state.publish(.download(DownloadID(rawValue: id), event)) }
            if batch { publishBatchProgress(in: &state, force: false) }
        }
    }

    private func complete(_ id: UInt64, with outcome: Outcome) {
        // What its end lets start is started once its events are sent and its waiters woken: with one slot, a result
        // is handed over before the next download can end, so results come in the order the downloads ran.
        let ((effects, deliveries), admitted) = lockedHoldingAdmissions { state -> (SideEffects, [Delivery]?) in
            var effects = SideEffects()
            if requeue(id, after: outcome, in: &state) { return (effects, state.takeDeliveries()) }
            guard let entry = state.entries.removeValue(forKey: id) else { return (effects, state.takeDeliveries()) }
            if entry.replaced { entry.control.end(with: entry.request) }
            if case .failure(let error) = outcome, error.isCancellation {
                discardPausedPartial(of: entry, in: &effects)
            }
            if state.ending[entry.joinKey]?.id == id { state.ending[entry.joinKey] = nil }
            if state.resumeScans > 0 { state.endedDuringScan.insert(entry.joinKey) }
            if let wakeup = entry.box.store(outcome), !wakeup.waiters.isEmpty { effects.resolutions.append(wakeup) }
            let terminal = outcome.terminalEvent
            if state.wants(QueueEvent.Kind(terminal)) { state.publish(.download(DownloadID(rawValue: id), terminal)) }
            Self.leaveJoin(entry, id: id, in: &state)
            if let slot = state.slots.removeValue(forKey: id) {
                state.movedSlots[slot] = nil
                state.scheduler.finish(slot)
            } else {
                state.scheduler.finish(id)
            }
            switch outcome {
            case .success(let result):
                state.batch.finishedFiles += 1
                state.batch.finishedBytes += result.size
            case .failure(let error) where error.isCancellation:
                state.batch.cancelledFiles += 1
            case .failure:
                state.batch.failedFiles += 1
                if state.failurePolicy == .cancelOthers {
                    for other in state.entries.keys.sorted() { cancelEntry(other, in: &state, effects: &effects) }
                }
            }
            admit(in: &state)
            effects.idleWaiters = takeIdleWaiters(in: &state)
            return (effects, state.takeDeliveries())
        }
        if let deliveries { deliver(deliveries) }
        effects.run()
        if !admitted.isEmpty { carryOut(admitted) }
    }

    /// Puts a download whose run stopped to pause it back at the front of the waiting order (paused, unless it was
    /// resumed meanwhile), and admits what its slot lets start. Returns `false` when it is not one: it ended
    /// otherwise (finished or failed before the pause took effect), and ends.
    private func requeue(_ id: UInt64, after outcome: Outcome, in state: inout State) -> Bool {
        guard let entry = state.entries[id], entry.requeues, case .failure(let error) = outcome, error.isCancellation
        else { return false }
        entry.requeues = false
        entry.task = nil
        if entry.control.withdrawPause() { entry.keptPartialForPause = true }
        if let slot = state.slots.removeValue(forKey: id) {
            state.movedSlots[slot] = nil
            state.scheduler.finish(slot)
        } else {
            state.scheduler.finish(id)
        }
        state.scheduler.enqueueAtFront(
            id, host: Self.originKey(for: entry.request.url), priority: entry.request.priority, paused: entry.paused)
        reenterWaiting(entry.request, in: &state)
        entry.progress?.withLock { $0?.bytesPerSecond = 0 }
        admit(in: &state)
        return true
    }

    /// Cancels one entry whatever its handle count: a waiting one is taken out at once (its result is
    /// resolved after the lock), a running one has its task cancelled after the lock and ends through
    /// ``complete(_:with:)``.
    func cancelEntry(_ id: UInt64, in state: inout State, effects: inout SideEffects) {
        guard let entry = state.entries[id] else { return }
        // A cancellation wins over a pause still taking effect: the download ends, and keeps no partial for it.
        entry.requeues = false
        // Taken already, the run has kept its partial for the pause: it is discarded once the run has ended.
        if entry.control.withdrawPause() { entry.keptPartialForPause = true }
        guard state.scheduler.remove(id) else {
            // Running: its task is cancelled after the lock, or as it is stored (admitted under this lock or one just
            // before, its task is made after it).
            if let task = entry.task?.cancel() { effects.cancellations.append(task) }
            entry.cancelled = true
            // Whoever adds the same request from now on wants a fresh download, not this ending one.
            Self.leaveJoin(entry, id: id, in: &state)
            state.ending[entry.joinKey] = (id, entry.box)
            return
        }
        state.entries[id] = nil
        if entry.replaced { entry.control.end(with: entry.request) }
        Self.leaveJoin(entry, id: id, in: &state)
        leaveWaiting(entry.request, in: &state)
        if state.resumeScans > 0 { state.endedDuringScan.insert(entry.joinKey) }
        state.batch.cancelledFiles += 1
        // It never ran, so the engine will not tell the journal; the caller gave up on it.
        if let journal = downloader.configuration.journal {
            effects.journal = journal
            effects.forgotten.append(JournalKey(entry.request))
        }
        discardPausedPartial(of: entry, in: &effects)
        let error = DownloadError(
            .cancelled, message: "cancelled before it started", url: entry.request.url)
        if state.wants(.failed) { state.publish(.download(DownloadID(rawValue: id), .failed(error))) }
        if let wakeup = entry.box.store(.failure(error)), !wakeup.waiters.isEmpty {
            effects.resolutions.append(wakeup)
        }
    }

    /// Has the partial a pause of the cancelled `entry` kept discarded after the lock, as a cancelled run discards its
    /// own, unless the configuration keeps the partials of cancelled downloads.
    private func discardPausedPartial(of entry: Entry, in effects: inout SideEffects) {
        guard entry.keptPartialForPause, !downloader.configuration.keepsPartialOnCancel,
            let journal = downloader.configuration.journal
        else { return }
        effects.journal = journal
        effects.discarded.append(JournalKey(entry.request))
    }

    /// Cancels through one handle: only when no other handle still wants the download.
    func cancel(_ id: DownloadID) {
        cancel([id])
    }

    /// Cancels through one handle of each of `ids`, in one hold of the lock: one at a time, a running one could end
    /// before the others are cancelled, and its slot start one of them. Returns those cancelled (no other handle
    /// wanted them).
    @discardableResult
    func cancel(_ ids: [DownloadID]) -> Set<UInt64> {
        guard !ids.isEmpty else { return [] }
        return Set(
            cancelEntries { state in
                ids.compactMap { id in
                    guard let entry = state.entries[id.rawValue] else { return nil }
                    entry.handles -= 1
                    return entry.handles == 0 ? id.rawValue : nil
                }
            })
    }

    /// Cancels `handles` as ``DownloadHandle/cancel()`` on each would, all in one hold of the lock. Returns those
    /// cancelled here whose download goes on: another handle still wants it (not one that had ended already).
    @discardableResult
    func cancel(_ handles: some Sequence<DownloadHandle>) -> [DownloadHandle] {
        let marked = handles.filter { $0.markCancelled() }
        guard !marked.isEmpty else { return [] }
        var goingOn: Set<UInt64> = []
        cancelEntries { state in
            marked.compactMap { handle in
                let id = handle.id.rawValue
                guard let entry = state.entries[id] else { return nil }
                entry.handles -= 1
                guard entry.handles == 0 else {
                    goingOn.insert(id)
                    return nil
                }
                goingOn.remove(id)
                return id
            }
        }
        return marked.filter { goingOn.contains($0.id.rawValue) }
    }

    /// Changes a waiting download's priority; returns `false` if it is not waiting any more.
    func setPriority(_ priority: Int, of id: DownloadID) -> Bool {
        locked { state in
            let changed = state.scheduler.setPriority(priority, of: id.rawValue)
            // Kept with the request too: a download paused while it runs goes back to waiting at this priority, and
            // its status shows it.
            if changed { state.entries[id.rawValue]?.request.priority = priority }
            admit(in: &state)
            return changed
        }
    }

    /// When the queue has become idle: ends the batch with a final progress event and hands back the waiters.
    func takeIdleWaiters(in state: inout State) -> [ResultBox<Void>] {
        guard state.isIdle else {
            publishBatchProgress(in: &state, force: false)
            return []
        }
        publishBatchProgress(in: &state, force: true)
        let waiters = state.idleWaiters
        state.idleWaiters.removeAll()
        return waiters
    }

    private func publishBatchProgress(in state: inout State, force: Bool) {
        guard state.wants(.batchProgress) else { return }
        let now = ContinuousClock.now
        if !force, let last = state.lastBatchEvent, now - last < progressInterval { return }
        state.lastBatchEvent = now
        state.publish(.batchProgress(state.batchProgress()))
    }
}

#if DEBUG
/// Which threads hold a queue's lock, for ``DownloadQueue/assertLockNotHeld(_:)`` (debug builds only).
enum QueueLockCheck {
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    static var isHeld: Bool { pthread_getspecific(key) != nil }

    static func setHeld(_ held: Bool) {
        pthread_setspecific(key, held ? UnsafeRawPointer(bitPattern: 1) : nil)
    }
}
#endif
