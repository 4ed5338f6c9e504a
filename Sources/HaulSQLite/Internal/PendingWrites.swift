import Foundation
import Haul

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The journal's writes with `Downloader.Durability.processCrash`: a write is appended to a ``PendingLog`` (a copy,
/// in the page cache when it returns, so it survives the process being killed) and committed to the database by a
/// thread of its own, with every write made meanwhile, once the batch holds ``batchSize`` changes or ``batchDelay``
/// after its first (at once for ``drain()`` and ``close()``). No writer waits for a commit.
///
/// Each change takes its ticket from the database's ``ChangeOrder`` as it goes into the log, in the log's order, and
/// the database keeps the change with the highest ticket: the change written last wins, whenever it is committed. A
/// change left in the log of a killed process is committed by the next journal that opens the database; one already
/// committed is not committed again.
///
/// Until its commit, a write is found by ``change(for:)`` (when the journal answers its own writes), so a look-up
/// sees either it or, once committed, the database's row.
final class PendingWrites: @unchecked Sendable {  // every variable is guarded by `condition`
    private let condition = NSCondition()
    /// The two logs: one takes writes, the other holds the batch being committed.
    private let logs: [PendingLog]
    private var active = 0
    /// The changes in the active log.
    private var queued: [OrderedChange] = []
    private let order: ChangeOrder
    /// Whether the committer holds a batch.
    private var committing = false
    /// The committed batches, counted (a look-up by file reads the database again when one ended meanwhile).
    private var commits = 0
    /// This journal's changes not committed yet, by key, with the batch they are in; kept only when look-ups must
    /// find them.
    private var unknown: [JournalKey: (change: OrderedChange, batch: UInt64)] = [:]
    private let remembers: Bool
    /// The number of the active log's batch; the other log's is one more (it is active next).
    private var batch: UInt64 = 1
    /// This journal's name in its logs' names and in the database's record of its committed batches.
    let instance = "\(getpid()).\(UInt64.random(in: 0...UInt64.max))"
    private var closing = false
    private var finished = false
    /// Callers waiting in ``drain()``: the committer commits what is queued at once.
    private var draining = 0
    /// A batch is committed once it holds this many changes, or this long after its first write, whichever comes
    /// first (or at once for ``drain()`` and ``close()``): a transaction costs about as much as a few dozen rows
    /// (bench/journal: committing as often as writes came cost a quarter of a run of 10,000 small files), and no
    /// writer waits for it.
    static let batchSize = 4096
    static let batchDelay: TimeInterval = 0.05
    /// Commits a batch; `settled` is a ticket no change of this journal's still to commit after the batch is at or
    /// below (the bound of the tombstones it may drop, see `SQLiteJournal`). Let go by the committer before it says
    /// it has finished: what the closure holds (the journal's database) is then released by its owner, not later on
    /// the committer's thread, where closing the database's last connection would lock it for another reader.
    private var commit: (@Sendable ([OrderedChange], _ instance: String, _ batch: UInt64, _ settled: Int64) -> Void)?
    private let onError: @Sendable (any Error) -> Void

    /// Starts the committer, with two new logs beside `databasePath`; changes take their tickets from `order`.
    /// `remembers`: whether ``change(for:)`` and ``changes(at:orTo:)`` answer. `commit` writes a batch in one
    /// transaction, with the note that this instance committed it (so that a log whose batch is committed is never
    /// committed again), and reports its own errors.
    init(
        databasePath: String, order: ChangeOrder, remembers: Bool, onError: @escaping @Sendable (any Error) -> Void,
        commit: @escaping @Sendable ([OrderedChange], _ instance: String, _ batch: UInt64, _ settled: Int64) -> Void
    ) throws {
        let first = try PendingLog(databasePath: databasePath, instance: instance, side: 0, batch: 1)
        do {
            logs = [first, try PendingLog(databasePath: databasePath, instance: instance, side: 1, batch: 2)]
        } catch {
            first.remove()
            throw error
        }
        self.order = order
        self.remembers = remembers
        self.onError = onError
        self.commit = commit
        let thread = Thread { [self] in run() }
        thread.name = "haul.journal.commit"
        thread.start()
    }

    /// Appends `changes` to the log (all or none survive a kill) and queues them for the next commit.
    func write(_ changes: [JournalChange]) {
        var payloads = changes.map { $0.payload(ticket: 0) }
        condition.lock()
        // Under the lock: this journal's changes have their tickets in the order of its log and of its look-ups.
        let first = order.take(changes.count)
        for index in payloads.indices { JournalChange.stamp(first + Int64(index), on: &payloads[index]) }
        var failure: (any Error)?
        do {
            try logs[active].append(payloads)
        } catch {
            // Not in the log: committed all the same, only a kill before that loses them.
            failure = error
        }
        for (index, change) in changes.enumerated() {
            let ordered = OrderedChange(change: change, ticket: first + Int64(index))
            queued.append(ordered)
            if remembers { unknown[change.key] = (ordered, batch) }
        }
        if !committing && (queued.count == changes.count || queued.count >= Self.batchSize) { condition.broadcast() }
        condition.unlock()
        if let failure { onError(failure) }
    }

    /// This journal's newest change to `key` not committed yet, a removal included, with its ticket; `nil` when there
    /// is none (the database answers).
    func change(for key: JournalKey) -> OrderedChange? {
        guard remembers else { return nil }
        condition.lock()
        defer { condition.unlock() }
        return unknown[key]?.change
    }

    /// This journal's changes not committed yet to the keys in `keys` or to records at `path`, with their tickets,
    /// and the number of commits so far.
    func changes(at path: String, orTo keys: Set<JournalKey>) -> (changes: [OrderedChange], commits: Int) {
        condition.lock()
        defer { condition.unlock() }
        let changes = unknown.values.compactMap { entry -> OrderedChange? in
            switch entry.change.change {
            case .upsert(let row) where row.path == path || keys.contains(entry.change.change.key): entry.change
            case .remove(let key) where keys.contains(key): entry.change
            default: nil
            }
        }
        return (changes, commits)
    }

    /// Returns once every write made before is committed.
    func drain() {
        condition.lock()
        defer { condition.unlock() }
        let target = commits + (queued.isEmpty ? 0 : 1) + (committing ? 1 : 0)
        draining += 1
        condition.broadcast()
        while commits < target && !finished { condition.wait() }
        draining -= 1
    }

    /// The number of batches committed so far.
    var committed: Int {
        condition.lock()
        defer { condition.unlock() }
        return commits
    }

    /// Commits what is queued, stops the committer and deletes the logs; `false` if it was closed before.
    func close() -> Bool {
        condition.lock()
        let first = !closing
        closing = true
        condition.broadcast()
        while !finished { condition.wait() }
        condition.unlock()
        if first { for log in logs { log.remove() } }
        return first
    }

    /// The committer: takes the active log's batch, makes the other log active, commits, restarts the committed log
    /// for the batch after the active one.
    private func run() {
        #if os(Linux)
        // The lowest priority (per thread on Linux): the downloads keep the cores busy, and a commit can wait for a
        // gap; batches grow meanwhile, and with them what one transaction carries.
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)
        #endif
        condition.lock()
        while true {
            while queued.isEmpty && !closing { condition.wait() }
            if queued.isEmpty { break }
            let due = Date(timeIntervalSinceNow: Self.batchDelay)
            while queued.count < Self.batchSize && !closing && draining == 0 && condition.wait(until: due) {}
            let (taken, side, number) = (queued, active, batch)
            // Taken with the batch: every change with a ticket up to it is in the batch or committed before.
            let settled = order.current
            queued = []
            active = 1 - active
            batch += 1
            committing = true
            let commit = commit
            condition.unlock()
            commit?(taken, instance, number, settled)
            condition.lock()
            logs[side].restart(batch: batch + 1)
            if remembers { unknown = unknown.filter { $0.value.batch != number } }
            committing = false
            commits += 1
            condition.broadcast()
        }
        commit = nil
        finished = true
        condition.broadcast()
        condition.unlock()
    }
}
