import Foundation
import GRDB
import GRDBSQLite
import HaulOperations
public import Haul

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The journal in an SQLite database (GRDB, WAL): what `haul get` keeps in `DIR/.haul/journal.sqlite`.
///
/// The database is where records are kept and looked up. The change written last to a key wins, whichever process
/// made it. Writes from concurrent downloads are committed together
/// (group commit): the writes that arrive while one commit runs go into the next, so a burst of small downloads pays
/// one transaction per group, not one per file, and a lone download waits for no timer. How far a written record
/// survives follows `durability`, like the engine's files:
/// - `Downloader.Durability.processCrash` (the default): a write is appended to a small log of the changes not
///   committed yet (`journal.sqlite-pending.*`, a copy into the page cache) and returns; a thread of the journal's
///   commits them in batches (4,096 changes, or 50 ms after a batch's first), in the order they were written, and no
///   writer waits for a commit. A record survives the process being killed the moment the write
///   returns: the next journal to open the database commits what a killed one left. Nothing is `fsync`ed
///   (`synchronous = OFF`): on ext4 one `fsync` forces out every file written since the last one, which a batch of
///   small downloads would pay for again and again. After a power loss the database may be unreadable; opening it
///   then fails with a message naming it (delete it: only resumability is lost).
/// - `Downloader.Durability.powerLoss`: a write returns once its group is committed and `fsync`ed
///   (`synchronous = FULL`).
///
/// A look-up finds this journal's own writes at once. A journal opened after a write returned finds it, in any
/// process (it reads the pending logs of the journals open on the database); one open already finds another's writes
/// once they are committed. The change written last to a key wins, whenever each is committed (`ChangeOrder`): a
/// batch committed late, or a killed journal's change committed at the next open, never replaces a change written
/// after it.
///
/// A look-up is one query by the table's key on a connection of its own, and the journal holds no records in memory:
/// a rerun of a list of a million downloads skips each completed one at the same cost as a short list's.
///
/// Either way the engine trusts a completed record only while the file's size, modification time and inode
/// still match, so a lost or stale record costs a re-download, never a wrong file.
///
/// ```swift
/// var configuration = Downloader.Configuration()
/// configuration.journal = try SQLiteJournal(path: downloads.appendingPathComponent(".haul/journal.sqlite").path)
/// configuration.keepsPartialOnCancel = true
/// ```
public final class SQLiteJournal: Journal {
    private let pool: DatabasePool
    private let onError: @Sendable (any Error) -> Void
    /// The writer connection's prepared statements (used only inside the pool's writer, one caller at a time).
    private let statements: WriteStatements
    /// The look-ups' connection.
    private let query: RecordQuery
    /// Whether a look-up asks the database: not when it was empty at open and look-ups need not find this
    /// instance's own writes (then nothing there is anything a look-up may answer with).
    private let queriesDatabase: Bool
    /// How writes reach the database, by durability.
    private let writes: Writes
    /// What journals open when this one opened had written and not committed yet, by key (the newest change of
    /// each): read once from their pending logs, so that a journal opened after a write returned finds it. An entry
    /// answers until its batch is committed (then the database has it, or something newer) or this journal writes
    /// the key.
    private let others: Locked<[JournalKey: OtherChange]>
    /// Whether ``others`` had entries at open (when it did not, no look-up or write takes its lock).
    private let othersAtOpen: Bool

    private struct OtherChange {
        var change: JournalChange
        /// Its place in the order of changes: it is answered only while the database holds nothing newer for its key
        /// (committed, it would be refused).
        var ticket: Int64
        var instance: String
        var batch: UInt64
        /// The log it was read from: gone, its batch is in the database (a log is deleted only once committed), even
        /// when the database no longer notes the batch (its journal finished, and forgot its instance).
        var log: String
        /// Where it was in the logs read at open: the order of keys new to the database.
        var position: Int
    }

    private enum Writes {
        /// `processCrash`: appended to a pending log, committed in the background (see ``PendingWrites``).
        case logged(PendingWrites)
        /// `powerLoss`: committed, and `fsync`ed, before the writer goes on, with the writes around it.
        case grouped(GroupCommit<JournalChange>)
    }

    /// Opens (creating if needed, with its directory) the journal at `path`.
    ///
    /// - Parameters:
    ///   - path: the database file; its directory is created if missing.
    ///   - durability: how far a committed record must survive (see the type's discussion); give it the
    ///     downloader's `Downloader.Configuration.durability`.
    ///   - onError: called when a later read or write fails (the download goes on; only what a later run can
    ///     resume or skip is affected). By default errors are dropped.
    /// - Throws: ``JournalOpenError`` when the database cannot be opened or migrated (its reason, and a message
    ///   naming the path).
    public convenience init(
        path: String, durability: Downloader.Durability = .processCrash,
        onError: @escaping @Sendable (any Error) -> Void = { _ in }
    ) throws {
        try self.init(path: path, durability: durability, remembersWrites: true, onError: onError)
    }

    /// Opens the journal at `path`.
    ///
    /// Without `remembersWrites`, a journal opened on an empty database answers every look-up as unknown without
    /// asking the database, its own writes included (they still reach the database). That suits a process that looks
    /// each download up once, before it writes it, and never after, which `haul get` is: a first run's look-ups then
    /// cost nothing (bench/compare, list rows).
    package init(
        path: String, durability: Downloader.Durability = .processCrash, remembersWrites: Bool,
        onError: @escaping @Sendable (any Error) -> Void = { _ in }
    ) throws {
        // Owner-only from the start, the directory made for it too (SQLite gives its -wal and -shm files the
        // database's mode): requests are stored with their URLs and header fields, which are nobody else's business
        // even without credentials (those are never encoded).
        try JournalOpenError.mapping(path) {
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
        }
        if let log = JournalSchema.olderLog(besides: path) {
            throw JournalOpenError(reason: .olderLog, path: path, detail: log)
        }
        PrivateFile.createIfAbsent(path)
        var configuration = Configuration()
        configuration.label = "haul-journal"
        let synchronous = durability == .powerLoss ? "FULL" : "OFF"
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = \(synchronous)")
            #if canImport(Darwin)
            // fsync(2) on Darwin leaves the data in the drive's cache: F_FULLFSYNC for the database and its checkpoints
            // (SQLite's own switches for it), as for the downloads' files.
            if synchronous == "FULL" {
                try db.execute(sql: "PRAGMA fullfsync = ON")
                try db.execute(sql: "PRAGMA checkpoint_fullfsync = ON")
            }
            #endif
        }
        // Another process (a second `haul get` on the same directory) waits for the lock instead of failing.
        configuration.busyMode = .timeout(10)
        let pool = try JournalOpenError.mapping(path) {
            try Self.openPool(path: path, configuration: configuration, synchronous: synchronous)
        }
        self.pool = pool
        self.onError = onError
        let statements = WriteStatements()
        self.statements = statements
        let order = try ChangeOrder(databasePath: path)
        if order.resetIfDamaged() {
            onError(
                PendingLog.Refused(
                    description: "'\(order.path)' held a count no journal reaches (damaged): counted again from the "
                        + "database's"))
        }
        // Read before the logs are listed: a journal whose logs are not among them takes its tickets after this.
        let takenBeforeListing = order.current
        let otherLogs = PendingLog.others(besides: path)
        for refusal in otherLogs.refused {
            onError(PendingLog.Refused(description: refusal))
        }
        for log in otherLogs.left + otherLogs.held where log.damaged {
            onError(
                PendingLog.Refused(
                    description: "'\(log.path)' holds a damaged change (its checksum fails): it and the changes after "
                        + "it in that log are not applied"))
        }
        try JournalOpenError.mapping(path) {
            // Above every ticket given out, should the order file be new (a database moved, or its file deleted).
            let logged = (otherLogs.left + otherLogs.held).flatMap(\.payloads).compactMap {
                JournalChange.read($0)?.ticket
            }
            let committed = try Self.committedTickets(in: pool, onError: onError)
            order.lift(to: max(logged.max() ?? 0, committed))
            try Self.commit(otherLogs.left, into: pool, with: statements, order: order)
            // No other journal has a log open: every change with a ticket up to `takenBeforeListing` is committed, and
            // the tombstones up to it have done their work.
            if otherLogs.held.isEmpty { try Self.dropRemovals(upTo: takenBeforeListing, in: pool, with: statements) }
        }
        let query = try JournalOpenError.mapping(path) { try RecordQuery(path: path) }
        self.query = query
        var others: [JournalKey: OtherChange] = [:]
        for log in otherLogs.held {
            for payload in log.payloads {
                guard let (change, ticket) = JournalChange.read(payload) else { break }
                let position = others[change.key]?.position ?? others.count
                // A change of a log written before tickets takes one when it is committed: above any there is now.
                others[change.key] = OtherChange(
                    change: change, ticket: ticket ?? .max, instance: log.instance, batch: log.batch, log: log.path,
                    position: position)
            }
        }
        self.others = Locked(others)
        othersAtOpen = !others.isEmpty
        let queriesDatabase =
            try remembersWrites || !others.isEmpty || JournalOpenError.mapping(path) { try query.hasRecords() }
        self.queriesDatabase = queriesDatabase
        if durability == .powerLoss {
            writes = .grouped(
                GroupCommit { changes in
                    // Their tickets taken in the transaction, under the database's write lock: see dropRemovals.
                    Self.commit(into: pool, with: statements, onError: onError, removalsBeside: path) {
                        let first = order.take(changes.count)
                        let ordered = changes.enumerated().map { OrderedChange(change: $1, ticket: first + Int64($0)) }
                        // Nothing of this journal's is left to commit after these.
                        return (ordered, order.current)
                    }
                })
        } else {
            writes = .logged(
                try JournalOpenError.mapping(path) {
                    try PendingWrites(databasePath: path, order: order, remembers: queriesDatabase, onError: onError) {
                        changes, instance, batch, settled in
                        Self.commit(
                            into: pool, with: statements, onError: onError, batch: (instance, batch),
                            removalsBeside: path
                        ) { (changes, settled) }
                    }
                })
        }
    }

    /// Commits the batches of the pending logs `left` by killed journals (those not committed yet, in the order each
    /// journal wrote them), then deletes the logs and what was noted of their journals. Each change keeps its ticket:
    /// one written before a change committed since does not replace it. A change from a log written before changes
    /// had tickets takes one now.
    private static func commit(
        _ left: [PendingLog.Left], into pool: DatabasePool, with statements: WriteStatements, order: ChangeOrder
    ) throws {
        guard !left.isEmpty else { return }
        defer { for log in left { close(log.descriptor) } }
        try pool.writeWithoutTransaction { db in
            let committed = try Dictionary(
                Row.fetchAll(db, sql: "SELECT instance, batch FROM committedBatch").map {
                    ($0["instance"] as String, UInt64(bitPattern: $0["batch"] as Int64))
                },
                uniquingKeysWith: max)
            try statements.transaction(on: db) { statements in
                var highest: Int64 = 0
                for log in left where log.batch > committed[log.instance] ?? 0 {
                    // A payload that does not read back ends the log, as a torn frame does.
                    for payload in log.payloads {
                        guard let (change, ticket) = JournalChange.read(payload) else { break }
                        let ordered = OrderedChange(change: change, ticket: ticket ?? order.take(1))
                        try apply(ordered, with: statements)
                        highest = max(highest, ordered.ticket)
                    }
                }
                if highest > 0 { try statements.noteTickets(upTo: highest) }
                for instance in Set(left.map(\.instance)) { try statements.forget(instance: instance) }
            }
        }
        for log in left { unlink(log.path) }
    }

    /// Opens the database, in WAL mode and migrated, waiting up to `patience` for another process that holds it.
    ///
    /// Processes opening one journal take turns, by an exclusive `flock` on its directory for the length of the
    /// open: two that found no migration applied would otherwise both run them, and the second fail ("table
    /// already exists"). The busy timeout covers the waits after that, but not all: SQLite can answer `SQLITE_BUSY`
    /// straight away (turning WAL on while another connection reads), so those attempts are made again, as a whole,
    /// until `patience` runs out.
    private static func openPool(
        path: String, configuration: Configuration, synchronous: String, patience: Duration = .seconds(10)
    ) throws -> DatabasePool {
        let deadline = ContinuousClock.now + patience
        let directory = (path as NSString).deletingLastPathComponent
        let lock = open(directory.isEmpty ? "." : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { if lock >= 0 { close(lock) } }  // closing lets the next one in
        while lock >= 0, flock(lock, LOCK_EX | LOCK_NB) != 0, errno == EWOULDBLOCK || errno == EINTR {
            guard ContinuousClock.now < deadline else {
                throw DatabaseError(resultCode: .SQLITE_BUSY, message: "another process is opening the journal")
            }
            Thread.sleep(forTimeInterval: 0.005)
        }
        // Under the lock: what another process is making here is a journal.
        try JournalSchema.refuseUnusable(at: path)
        while true {
            do {
                let pool = try DatabasePool(path: path, configuration: configuration)
                // Again on the writer: GRDB sets NORMAL there when it turns WAL on, after prepareDatabase.
                try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = \(synchronous)") }
                try JournalSchema.migrate(pool)
                return pool
            } catch let error as DatabaseError
                where error.resultCode == .SQLITE_BUSY || error.resultCode == .SQLITE_LOCKED
            {
                guard ContinuousClock.now < deadline else { throw error }
                Thread.sleep(forTimeInterval: 0.02)
            }
        }
    }

    deinit {
        finish()
    }

    /// Writes the changes `changes` gives (called in the transaction) in one transaction, with the note of the
    /// pending log's `batch` they are; a failure loses them all (reported to `onError`: only what a later run can
    /// resume or skip is affected).
    ///
    /// With a removal among them, the tombstones go in the same transaction up to the ticket `changes` gives as
    /// settled (none of this journal's changes still to commit is at or below it), unless another journal has a log
    /// beside the database at `path` (its changes not committed may be older): under the write lock, a journal that
    /// commits without a log (`powerLoss`) has no change between its ticket and its commit.
    private static func commit(
        into pool: DatabasePool, with statements: WriteStatements, onError: @Sendable (any Error) -> Void,
        batch: (instance: String, number: UInt64)? = nil, removalsBeside path: String,
        _ changes: () -> (changes: [OrderedChange], settled: Int64)
    ) {
        do {
            try pool.writeWithoutTransaction { db in
                try statements.transaction(on: db) { statements in
                    let (changes, settled) = changes()
                    for change in changes { try apply(change, with: statements) }
                    if let highest = changes.map(\.ticket).max() { try statements.noteTickets(upTo: highest) }
                    if let batch { try statements.noteCommitted(instance: batch.instance, batch: batch.number) }
                    if changes.contains(where: { if case .remove = $0.change { true } else { false } }),
                        !PendingLog.othersExist(besides: path, instance: batch?.instance)
                    {
                        try statements.dropRemovals(upTo: settled)
                    }
                }
            }
        } catch {
            onError(error)
        }
    }

    private static func apply(_ ordered: OrderedChange, with statements: WriteStatements) throws {
        switch ordered.change {
        case .upsert(let row): try statements.upsert(row, ticket: ordered.ticket)
        case .remove(let key): try statements.delete(key, ticket: ordered.ticket)
        }
    }

    /// The highest ticket the database notes as committed (`changeOrder`). A note missing (a database changed by hand)
    /// is made again from the highest ticket of its records and removals; one at or above ``ChangeOrder/limit``
    /// (damaged) has those tickets set back to 0, older than any change to come, and is reported.
    private static func committedTickets(
        in pool: DatabasePool, onError: @Sendable (any Error) -> Void
    ) throws -> Int64 {
        // On the writer's connection, open already: a read through the pool would open a reader connection for it.
        let noted = try pool.writeWithoutTransaction { db in
            try Int64.fetchOne(db, sql: "SELECT last FROM changeOrder")
        }
        if let noted, noted >= 0, noted < ChangeOrder.limit { return noted }
        return try pool.write { db in
            let limit = ChangeOrder.limit
            if noted != nil {
                onError(
                    PendingLog.Refused(
                        description: "the journal's record of its order was damaged: the records it kept rank as the "
                            + "oldest"))
            }
            for table in ["record", "removal"] {
                try db.execute(
                    sql: "UPDATE \(table) SET ticket = 0 WHERE ticket < 0 OR ticket >= ?", arguments: [limit])
            }
            let highest =
                try Int64.fetchOne(
                    db,
                    sql: """
                        SELECT max(coalesce((SELECT max(ticket) FROM record), 0),
                                   coalesce((SELECT max(ticket) FROM removal), 0))
                        """) ?? 0
            try db.execute(sql: "DELETE FROM changeOrder")
            try db.execute(sql: "INSERT INTO changeOrder (last) VALUES (?)", arguments: [highest])
            return highest
        }
    }

    /// Deletes the tombstones of removals whose tickets are `ticket` or lower (``WriteStatements/delete(_:ticket:)``),
    /// when there are any. In a write transaction: a journal that commits without a log takes its tickets in its own
    /// (see `writes`), so none of its changes is between its ticket and its commit now.
    private static func dropRemovals(
        upTo ticket: Int64, in pool: DatabasePool, with statements: WriteStatements
    ) throws {
        // On the writer's connection, as committedTickets reads.
        try pool.writeWithoutTransaction { db in
            guard try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM removal)") == true else { return }
            try statements.transaction(on: db) { try $0.dropRemovals(upTo: ticket) }
        }
    }

    /// Commits what is pending, deletes the pending logs, closes the look-ups' connection and the writer's
    /// statements, and moves what the WAL holds into the database without waiting for anyone: for a process that exits without releasing the journal (the `haul` command, which
    /// leaves freeing its memory to the system). The journal must not be used afterwards. Finishing again does
    /// nothing.
    package func finish() {
        if case .logged(let pending) = writes {
            guard pending.close() else { return }
            try? pool.writeWithoutTransaction { db in
                try statements.transaction(on: db) { try $0.forget(instance: pending.instance) }
            }
        }
        query.close()
        // Finalized before the pool closes the connection, which would otherwise report them as unfinalized.
        try? pool.writeWithoutTransaction { db in
            statements.finalize()
            try db.execute(sql: "PRAGMA wal_checkpoint(PASSIVE)")
        }
    }

    /// Throws when the journal cannot be read: its database file is gone from its directory, or a read fails (a
    /// readiness check: `haul worker`'s and `haul daemon`'s `/readyz`).
    public func checkReadable() throws {
        let path = pool.path
        guard FileManager.default.fileExists(atPath: path) else {
            throw CocoaError(.fileNoSuchFile, userInfo: [NSFilePathErrorKey: path])
        }
        _ = try pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master") }
    }

    /// The record stored for `key`, if any: one query by the table's key, however many rows it holds (the request
    /// decoded only for a record that has one, which a completed one does not).
    ///
    /// An instance opened without remembering its writes on an empty database answers every key as unknown.
    public func record(for key: JournalKey) -> JournalRecord? {
        guard queriesDatabase else { return nil }
        // A change not committed yet answers unless the database already holds a newer one for the key, which its
        // commit will not replace.
        let uncommitted: OrderedChange? =
            if case .logged(let pending) = writes, let own = pending.change(for: key) {
                own
            } else if othersAtOpen, let other = otherChange(for: key) {
                other
            } else {
                nil
            }
        if let uncommitted, uncommitted.ticket > newestTicket(for: key) {
            guard case .upsert(let row) = uncommitted.change else { return nil }
            return Self.record(from: row)
        }
        do {
            return try query.row(for: key).flatMap(Self.record(from:))
        } catch {
            onError(error)
            return nil
        }
    }

    /// The records of the partial and completed files at `path`, under any key: one search of an index by path.
    /// Like ``record(for:)``, an instance that does not remember its writes may answer without them.
    public func records(forFileAt path: String) -> [JournalRecord] {
        guard queriesDatabase else { return [] }
        while true {
            let commits = if case .logged(let pending) = writes { pending.committed } else { 0 }
            // Before the rows: a batch another journal commits between the two is then in the rows, never in neither.
            let others = othersAtOpen ? uncommittedOthers() : [:]
            let rows: [RecordRow]
            do {
                rows = try query.fileRows(at: path)
            } catch {
                onError(error)
                rows = []
            }
            guard case .logged(let pending) = writes else { return rows.compactMap(Self.record(from:)) }
            // This journal's changes not committed yet replace the rows of their keys. A commit between reading the
            // database and them would leave neither with its changes: then the database is read again.
            let keys = Set(rows.map { JournalKey(url: $0.url, destination: $0.destination) })
            let newer = pending.changes(at: path, orTo: keys)
            guard newer.commits == commits else { continue }
            var byKey = Dictionary(rows.map { (JournalKey(url: $0.url, destination: $0.destination), $0) }) { $1 }
            let ownKeys = Set(newer.changes.map(\.change.key))
            var uncommitted = newer.changes
            if othersAtOpen {
                for (key, entry) in others where !ownKeys.contains(key) {
                    uncommitted.append(OrderedChange(change: entry.change, ticket: entry.ticket))
                }
            }
            for ordered in uncommitted {
                let key = ordered.change.key
                // The database's newest for the key: a row read here is it (a newer removal would have deleted it).
                let newest = byKey[key]?.ticket ?? newestTicket(for: key)
                guard ordered.ticket > newest else { continue }
                switch ordered.change {
                case .upsert(let row) where row.path == path: byKey[key] = row
                case .upsert, .remove: byKey[key] = nil
                }
            }
            return byKey.values.compactMap { row in Self.record(from: row).flatMap { $0.state.isFile ? $0 : nil } }
        }
    }

    /// Stores `record`, replacing the one for its key; returns once it is committed.
    public func store(_ record: JournalRecord) {
        write([.upsert(Self.row(record))])
    }

    /// Stores `records` in one transaction (all or none survive a kill).
    public func store(_ records: [JournalRecord]) {
        guard !records.isEmpty else { return }
        write(records.map { .upsert(Self.row($0)) })
    }

    /// Stores `record` like ``store(_:)-(JournalRecord)``; with `powerLoss` durability, suspending instead of
    /// blocking while the commit before it runs.
    public func commit(_ record: JournalRecord) async {
        let changes: [JournalChange] = [.upsert(Self.row(record))]
        guard case .grouped(let group) = writes else { return write(changes) }
        forgetOthers(changes)
        await group.commit(changes)
    }

    /// Forgets `key`.
    public func remove(_ key: JournalKey) {
        write([.remove(key)])
    }

    /// Forgets `keys` in one transaction.
    public func remove(_ keys: [JournalKey]) {
        guard !keys.isEmpty else { return }
        write(keys.map(JournalChange.remove))
    }

    /// Writes `changes` as one (all or none survive a kill).
    private func write(_ changes: [JournalChange]) {
        forgetOthers(changes)
        switch writes {
        case .logged(let pending): pending.write(changes)
        case .grouped(let group): group.write(changes)
        }
    }

    /// Drops what ``others`` holds for the keys `changes` change: this journal's change is the newer.
    private func forgetOthers(_ changes: [JournalChange]) {
        if othersAtOpen { others.withLock { others in for change in changes { others[change.key] = nil } } }
    }

    /// SQLite's `synchronous` setting of the writing connection (0 OFF, 1 NORMAL, 2 FULL): for tests.
    package var synchronousSetting: Int? {
        try? pool.write { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") }
    }

    /// Every record, in the order their keys were first stored, as committed by any process (this journal's writes
    /// are committed first), with what other journals open at open had not committed yet.
    public func allRecords() -> [JournalRecord] {
        if case .logged(let pending) = writes { pending.drain() }
        do {
            // Before the rows: a batch committed between the two is then in the rows, never in neither.
            let changes = othersAtOpen ? uncommittedOthers() : [:]
            var rows = try pool.read(Self.fetchRows)
            if othersAtOpen {
                // Another journal's change answers only over what is older in the database: its row's, or the
                // ticket of its removal.
                let removals = changes.isEmpty ? [:] : try pool.read(Self.fetchRemovals)
                var stored = Set<JournalKey>()
                rows = rows.compactMap { row in
                    let key = JournalKey(url: row.url, destination: row.destination)
                    stored.insert(key)
                    guard let entry = changes[key], entry.ticket > row.ticket else { return row }
                    guard case .upsert(var newer) = entry.change else { return nil }
                    newer.sequence = row.sequence
                    return newer
                }
                for entry in changes.values.sorted(by: { $0.position < $1.position }) {
                    guard case .upsert(let row) = entry.change, case let key = entry.change.key,
                        !stored.contains(key), entry.ticket > removals[key] ?? 0
                    else { continue }
                    rows.append(row)
                }
            }
            return rows.compactMap(Self.record(from:))
        } catch {
            onError(error)
            return []
        }
    }

    /// Another open journal's change to `key` not committed yet, if ``others`` has one; an entry whose batch the
    /// database has is dropped.
    private func otherChange(for key: JournalKey) -> OrderedChange? {
        guard let entry = others.withLock({ $0[key] }) else { return nil }
        guard !Self.isCommitted(entry, noted: (try? query.committedBatch(of: entry.instance)) ?? 0) else {
            others.withLock { if $0[key]?.batch == entry.batch { $0[key] = nil } }
            return nil
        }
        return OrderedChange(change: entry.change, ticket: entry.ticket)
    }

    /// The highest ticket the database holds for `key` (0 when it cannot be read: the change not committed answers).
    private func newestTicket(for key: JournalKey) -> Int64 {
        do {
            return try query.newestTicket(for: key)
        } catch {
            onError(error)
            return 0
        }
    }

    /// The entries of ``others`` whose batches are not committed yet.
    private func uncommittedOthers() -> [JournalKey: OtherChange] {
        let entries = others.withLock { $0 }
        var committed: [String: UInt64] = [:]
        var changes: [JournalKey: OtherChange] = [:]
        for (key, entry) in entries {
            let last = committed[entry.instance] ?? (try? query.committedBatch(of: entry.instance)) ?? 0
            committed[entry.instance] = last
            if !Self.isCommitted(entry, noted: last) { changes[key] = entry }
        }
        return changes
    }

    /// Whether the database holds `entry`'s batch: `noted`, the last batch the database notes its journal committed,
    /// reaches it, or its log is gone. The log is looked at after the note is read: a journal commits its batch before
    /// it deletes the log and forgets its instance, so a note read missing and a log read gone after it still mean
    /// committed.
    private static func isCommitted(_ entry: OtherChange, noted: UInt64) -> Bool {
        noted >= entry.batch || (access(entry.log, F_OK) != 0 && errno == ENOENT)
    }

    /// `record` in the table's columns (its request as JSON; the sequence is the writer's to give).
    private static func row(_ record: JournalRecord) -> RecordRow {
        var row = RecordRow(
            url: record.key.url, destination: record.key.destination, path: record.path, state: "", sequence: 0,
            request: record.request.flatMap { try? encoder.encode($0) }.map { String(decoding: $0, as: UTF8.self) })
        switch record.state {
        case .requested:
            row.state = "requested"
        case .partial(let validator, let totalBytes, let missingRanges):
            row.state = "partial"
            row.validator = validator
            row.totalBytes = totalBytes
            row.missingRanges = missingRanges.map(RecordRow.rangesText)
        case .completed(let size, let sha256, let stamp, let validator):
            row.state = "completed"
            row.size = size
            row.sha256 = sha256
            row.modifiedNanoseconds = stamp.modifiedNanoseconds
            row.inode = Int64(bitPattern: stamp.inode)
            row.validator = validator
        case .failed(let message):
            row.state = "failed"
            row.failure = message
        }
        return row
    }

    /// The tickets of the removals the database keeps, by key.
    private static func fetchRemovals(_ db: Database) throws -> [JournalKey: Int64] {
        var removals: [JournalKey: Int64] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT url, destination, ticket FROM removal") {
            removals[JournalKey(url: row["url"], destination: row["destination"])] = row["ticket"]
        }
        return removals
    }

    /// Every row in sequence order.
    private static func fetchRows(_ db: Database) throws -> [RecordRow] {
        try Row.fetchAll(db, sql: "SELECT * FROM record ORDER BY sequence").map { row in
            WriteStatements.Row(
                url: row["url"], destination: row["destination"], path: row["path"], state: row["state"],
                sequence: row["sequence"], validator: row["validator"], totalBytes: row["totalBytes"],
                size: row["size"], sha256: row["sha256"], modifiedNanoseconds: row["modifiedNanoseconds"],
                inode: row["inode"], request: row["request"], failure: row["failure"],
                missingRanges: row["missingRanges"], ticket: row["ticket"])
        }
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return encoder
    }()

    private static func record(from row: RecordRow) -> JournalRecord? {
        let key = JournalKey(url: row.url, destination: row.destination)
        let state: JournalRecord.State
        switch row.state {
        case "requested":
            state = .requested
        case "failed":
            state = .failed(message: row.failure ?? "")
        case "partial":
            guard let validator = row.validator else { return nil }
            // Ranges that do not read back make the row malformed, like a partial without its validator: resuming
            // from ranges guessed at could leave holes in the file, so the record is dropped and its partial is not
            // resumed from.
            var missingRanges: [Range<Int64>]?
            if let text = row.missingRanges {
                guard let ranges = RecordRow.ranges(fromText: text) else { return nil }
                missingRanges = ranges
            }
            state = .partial(validator: validator, totalBytes: row.totalBytes, missingRanges: missingRanges)
        case "completed":
            guard let size = row.size, let modified = row.modifiedNanoseconds, let inode = row.inode else { return nil }
            state = .completed(
                size: size, sha256: row.sha256,
                stamp: FileStamp(size: size, modifiedNanoseconds: modified, inode: UInt64(bitPattern: inode)),
                validator: row.validator)
        default:
            return nil
        }
        let request = row.request.flatMap { try? JSONDecoder().decode(DownloadRequest.self, from: Data($0.utf8)) }
        return JournalRecord(key: key, path: row.path, state: state, request: request)
    }
}

/// One record's columns (GRDB has a `Row` of its own).
typealias RecordRow = WriteStatements.Row
