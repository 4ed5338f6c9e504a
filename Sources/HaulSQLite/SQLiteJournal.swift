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
/// A write is one `write(2)` to an append-only log beside the database (`journal.sqlite-log.*`, one per open
/// journal); every 4,096 changes the journal starts a new log and folds the full one into the database in one
/// transaction, in the background, then deletes it; closing the journal folds the rest, and a log left by a
/// killed process is folded by the next journal that opens the database. A transaction per download cost ~35 µs
/// here (BEGIN, WAL pages, COMMIT, four `fcntl` locks): a fifth of a 10,000 x 4 KiB run. How far a written record
/// survives follows `durability`, like the engine's files:
/// - ``Downloader/Durability/processCrash`` (the default): nothing is `fsync`ed (`synchronous = OFF` for the
///   database). A record survives the process being killed at any instant: it is in the log, in the page cache.
///   On ext4 one `fsync` forces out every file written since the last one, which cost a batch of small downloads
///   up to 70% more time. After a power loss the database may be unreadable; opening it then fails with a
///   message naming it (delete it: only resumability is lost).
/// - ``Downloader/Durability/powerLoss``: every append is `fsync`ed and the database is `synchronous = FULL`.
///
/// Other processes: a journal opened while another is open on the same database sees what that one had written
/// (its log is read, not folded); what it writes later is seen by journals opened after.
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
    /// Every record, read once at open and kept in step by this instance's writes: lookups (one per download)
    /// cost no query. Another process writing the same journal meanwhile is not seen until it is reopened.
    private let cache: Locked<[JournalKey: JournalRecord]>
    /// The writer connection's prepared statements (used only inside the pool's writer, one caller at a time).
    private let statements: WriteStatements
    /// The `sequence` the next new key gets.
    private let nextSequence: Locked<Int64>
    private let path: String
    /// Whether every append is `fsync`ed (``Downloader/Durability/powerLoss``).
    private let syncEachAppend: Bool
    /// This journal's current log, where every change goes first, and the changes on their way into it.
    private let current: Locked<Appending>

    /// The log and the group commit into it: a change is applied to the cache and queued under the lock, in one
    /// order; one caller at a time (the one that found nobody writing) writes everything queued, outside the lock,
    /// and wakes those who wait for it. Why: with the `write(2)` under the lock, downloads finishing together on
    /// different threads queued on the lock (futex sleeps and wake-ups, ~4,000 in a 10,000 x 4 KiB run); now they
    /// share one write, and an engine task waits suspended (its thread goes on with other downloads).
    private struct Appending {
        var log: IntentLog
        /// The changes in `log` (written), which decides when it is folded.
        var changes = 0
        /// Frames queued for `log`, in the order their changes reached the cache, and how many changes they hold.
        var queued: [UInt8] = []
        var queuedChanges = 0
        /// Who waits for the queued frames to be written.
        var waiters: [Waiter] = []
        /// Whether a caller is writing (queued frames are then its to write).
        var writing = false
        /// Whether the journal was finished (its log folded).
        var finished = false
    }

    /// A caller waiting for its change to be in the log: a suspended task or a blocked thread.
    private enum Waiter {
        case task(CheckedContinuation<Void, Never>)
        case thread(DispatchSemaphore)

        func resume() {
            switch self {
            case .task(let continuation): continuation.resume()
            case .thread(let semaphore): semaphore.signal()
            }
        }
    }
    /// Folds full logs into the database one after another, off the writing callers' threads.
    private let folding = DispatchQueue(label: "haul.journal.fold")
    /// A log is folded into the database once it holds this many changes.
    private let foldThreshold: Int
    /// ``foldThreshold`` unless a test sets another: 4,096 changes, a log of ~1 MB. Folding in the background while
    /// downloads run fills gaps the network leaves; one fold of everything at close ran alone at the end (10,000
    /// small files: +14.4% over `--no-journal` with one fold at close, +9.3% with this, +11.4% with 1,024; 20
    /// paired rounds each). No change is kept in memory meanwhile: the fold reads the log back.
    package static let defaultFoldThreshold = 4096

    /// Opens (creating if needed, with its directory) the journal at `path`.
    ///
    /// - Parameters:
    ///   - durability: how far a committed record must survive (see the type's discussion); give it the
    ///     downloader's ``Downloader/Configuration/durability``.
    ///   - onError: called when a later read or write fails (the download goes on; only what a later run can
    ///     resume or skip is affected). By default errors are dropped.
    /// - Throws: when the database cannot be opened or migrated (a clear message: path and SQLite's reason).
    public convenience init(
        path: String, durability: Downloader.Durability = .processCrash,
        onError: @escaping @Sendable (any Error) -> Void = { _ in }
    ) throws {
        try self.init(path: path, durability: durability, foldThreshold: Self.defaultFoldThreshold, onError: onError)
    }

    /// Opens the journal at `path`, folding its log into the database every `foldThreshold` changes.
    package init(
        path: String, durability: Downloader.Durability = .processCrash, foldThreshold: Int,
        onError: @escaping @Sendable (any Error) -> Void = { _ in }
    ) throws {
        self.foldThreshold = max(1, foldThreshold)
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        // Owner-only from the start (SQLite gives its -wal and -shm files the same mode): requests are stored
        // with their header fields, which may carry credentials.
        let descriptor = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        if descriptor >= 0 { close(descriptor) }
        var configuration = Configuration()
        configuration.label = "haul-journal"
        let synchronous = durability == .powerLoss ? "FULL" : "OFF"
        configuration.prepareDatabase { db in
            // Changes arrive in folds of thousands, so pages are SQLite's default 4 KiB (no effect on an existing
            // database): a fold of 4,096 records then writes ~4 times fewer WAL frames than with the 1 KiB pages
            // that suited one transaction per record.
            try db.execute(sql: "PRAGMA page_size = 4096")
            try db.execute(sql: "PRAGMA synchronous = \(synchronous)")
            // Checkpoints (WAL into the database) happen in the folds, in the background, every ~4 MiB of WAL;
            // the one left for closing the journal is small.
            try db.execute(sql: "PRAGMA wal_autocheckpoint = 1000")
        }
        // Another process (a second `haul get` on the same directory) waits for the lock instead of failing.
        configuration.busyMode = .timeout(10)
        pool = try DatabasePool(path: path, configuration: configuration)
        // Again on the writer: GRDB sets NORMAL there when it turns WAL on, after prepareDatabase.
        try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = \(synchronous)") }
        self.onError = onError
        self.path = path
        let statements = WriteStatements()
        self.statements = statements
        try Self.migrator.migrate(pool)
        // Logs of journals that were never closed (a killed process): into the database, then gone.
        let others = IntentLog.others(of: path, takingDead: true)
        defer { for descriptor in others.dead.descriptors { close(descriptor) } }
        try Self.apply(others.dead.operations, on: pool, with: statements)
        for dead in others.dead.paths { unlink(dead) }
        let rows = Self.overlay(others.live, on: try pool.read(Self.fetchRows))
        cache = Locked(Dictionary(rows.compactMap(Self.record(from:)).map { ($0.key, $0) }, uniquingKeysWith: { $1 }))
        nextSequence = Locked((rows.map(\.sequence).max() ?? 0) + 1)
        syncEachAppend = durability == .powerLoss
        current = Locked(Appending(log: try IntentLog(databasePath: path)))
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "download") { table in
                table.column("url", .text).notNull()
                table.column("destination", .text).notNull()
                table.column("path", .text).notNull()
                table.column("state", .text).notNull()  // requested | partial | verified | completed | failed
                table.column("validator", .text)
                table.column("totalBytes", .integer)
                table.column("size", .integer)
                table.column("sha256", .text)
                table.column("modifiedNanoseconds", .integer)
                table.column("inode", .integer)
                table.column("updatedAt", .datetime).notNull()
                table.primaryKey(["url", "destination"])
            }
        }
        // One b-tree keyed by (url, destination) instead of a rowid table plus its key's index: each commit
        // rewrites half the pages. `sequence` keeps the order records were first stored in.
        migrator.registerMigration("v2: without rowid, with requests and failures") { db in
            try db.execute(
                sql: """
                    CREATE TABLE record (
                        url TEXT NOT NULL, destination TEXT NOT NULL, sequence INTEGER NOT NULL,
                        path TEXT NOT NULL, state TEXT NOT NULL, validator TEXT, totalBytes INTEGER, size INTEGER,
                        sha256 TEXT, modifiedNanoseconds INTEGER, inode INTEGER, request TEXT, failure TEXT,
                        updatedAt TEXT NOT NULL,
                        PRIMARY KEY (url, destination)
                    ) WITHOUT ROWID;
                    INSERT INTO record
                    SELECT url, destination, rowid, path, state, validator, totalBytes, size, sha256,
                           modifiedNanoseconds, inode, NULL, NULL, updatedAt
                    FROM download;
                    DROP TABLE download;
                    """)
        }
        // When each change was written, so that the changes still in another open journal's log can be ordered
        // against the database's rows.
        migrator.registerMigration("v3: changedAt") { db in
            try db.execute(sql: "ALTER TABLE record ADD COLUMN changedAt INTEGER")
        }
        return migrator
    }

    deinit {
        finish()
    }

    /// Folds what is left of the log into the database now, as the journal's end would: for a process that exits
    /// without releasing the journal (the `haul` command, which leaves freeing its memory to the system). The
    /// journal must not be written to afterwards. Finishing again does nothing.
    package func finish() {
        let log = current.withLock { current -> IntentLog? in
            guard !current.finished else { return nil }
            current.finished = true
            return current.log
        }
        guard let log else { return }
        folding.sync {}
        fold(log)
        // Finalized before the pool closes the connection, which would otherwise report them as unfinalized.
        pool.writeWithoutTransaction { _ in statements.finalize() }
        // Freeing every cached record (~5 ms for 10,000) is left to the folding queue, off the caller's thread: a
        // process that is about to exit never waits for it.
        folding.async { [cache] in cache.withLock { $0 = [:] } }
    }

    /// The record stored for `key`, if any.
    public func record(for key: JournalKey) -> JournalRecord? {
        cache.withLock { $0[key] }
    }

    /// Stores `record`, replacing the one for its key.
    public func store(_ record: JournalRecord) {
        store([record])
    }

    /// Stores `records` with one write to the log (all or none survive a kill).
    public func store(_ records: [JournalRecord]) {
        guard !records.isEmpty else { return }
        let (operations, time) = operations(storing: records)
        write(operations, time: time) { cache in
            for record in records { cache[record.key] = record }
        }
    }

    /// Stores `record` and returns once it is in the log, suspended meanwhile: records of downloads that finish
    /// together go into the log with one write.
    public func commit(_ record: JournalRecord) async {
        let (operations, time) = operations(storing: [record])
        let bytes = IntentLog.encode(operations, time: time)
        await withCheckedContinuation { continuation in
            enqueue(bytes, changes: 1, waiter: .task(continuation)) { $0[record.key] = record }
        }
    }

    /// The log's operations for storing `records`, with the time they are stamped with.
    private func operations(storing records: [JournalRecord]) -> ([JournalOperation], time: Int64) {
        let first = nextSequence.withLock { next in
            defer { next += Int64(records.count) }
            return next
        }
        let time = IntentLog.now()
        let operations = records.enumerated().map { index, record in
            var row = Self.values(of: record, sequence: first + Int64(index))
            row.changedAt = time
            return JournalOperation.upsert(row)
        }
        return (operations, time)
    }

    private static func values(of record: JournalRecord, sequence: Int64) -> WriteStatements.Row {
        var row = WriteStatements.Row(
            url: record.key.url, destination: record.key.destination, path: record.path, state: "", sequence: sequence)
        switch record.state {
        case .requested:
            row.state = "requested"
        case .partial(let validator, let totalBytes):
            row.state = "partial"
            row.validator = validator
            row.totalBytes = totalBytes
        case .verified(let size, let sha256):
            row.state = "verified"
            row.size = size
            row.sha256 = sha256
        case .completed(let size, let sha256, let stamp):
            row.state = "completed"
            row.size = size
            row.sha256 = sha256
            row.modifiedNanoseconds = stamp.modifiedNanoseconds
            row.inode = Int64(bitPattern: stamp.inode)
        case .failed(let message):
            row.state = "failed"
            row.failure = message
        }
        row.request = record.request.flatMap { try? encoder.encode($0) }.map { String(decoding: $0, as: UTF8.self) }
        return row
    }

    /// Forgets `key`.
    public func remove(_ key: JournalKey) {
        remove([key])
    }

    /// Forgets `keys` with one write to the log.
    public func remove(_ keys: [JournalKey]) {
        guard !keys.isEmpty else { return }
        write(keys.map { .remove(url: $0.url, destination: $0.destination) }, time: IntentLog.now()) { cache in
            for key in keys { cache.removeValue(forKey: key) }
        }
    }

    /// Applies `operations` to the cache and appends them to the log, in the same order as other writers; returns
    /// once they are in the log (blocking: for the callers that are not engine tasks).
    private func write(
        _ operations: [JournalOperation], time: Int64, cache update: (inout [JournalKey: JournalRecord]) -> Void
    ) {
        let semaphore = DispatchSemaphore(value: 0)
        enqueue(IntentLog.encode(operations, time: time), changes: operations.count, waiter: .thread(semaphore), update)
        semaphore.wait()
    }

    /// Applies `update` to the cache and queues `bytes` for the log under one hold of the lock (so the log's order
    /// is the cache's), then writes everything queued if nobody else is writing; `waiter` is woken once `bytes`
    /// are in the log.
    private func enqueue(
        _ bytes: [UInt8], changes: Int, waiter: Waiter, _ update: (inout [JournalKey: JournalRecord]) -> Void
    ) {
        let writes = current.withLock { current in
            cache.withLock(update)
            current.queued.append(contentsOf: bytes)
            current.queuedChanges += changes
            current.waiters.append(waiter)
            if current.writing { return false }
            current.writing = true
            return true
        }
        if writes { writeQueued() }
    }

    /// Writes what is queued, one batch after another, until nothing is: each batch with one `write(2)` (and one
    /// `fsync` with ``Downloader/Durability/powerLoss``), outside the lock; a log is rotated, and folded, only
    /// with every change of it written.
    private func writeQueued() {
        while true {
            let batch = current.withLock { current -> (IntentLog, [UInt8], Int, [Waiter])? in
                guard !current.waiters.isEmpty else {
                    current.writing = false
                    return nil
                }
                defer {
                    current.queued = []
                    current.queuedChanges = 0
                    current.waiters = []
                }
                return (current.log, current.queued, current.queuedChanges, current.waiters)
            }
            guard let (log, bytes, changes, waiters) = batch else { return }
            do {
                try log.append(bytes)
                if syncEachAppend { try log.sync() }
            } catch {
                // Not in the log (or not on disk), so never folded: only what a later run can skip or resume is
                // affected.
                onError(error)
            }
            let full = current.withLock { current in
                current.changes += changes
                return current.changes >= foldThreshold ? rotate(&current) : nil
            }
            if let full { fold(full, later: true) }
            for waiter in waiters { waiter.resume() }
        }
    }

    /// Starts a new log and returns the full one, for ``fold(_:later:)``; `nil` (the changes go on into the same
    /// log) if no new log can be made.
    private func rotate(_ current: inout Appending) -> IntentLog? {
        guard current.changes > 0 else { return nil }
        do {
            let fresh = try IntentLog(databasePath: path)
            defer {
                current.log = fresh
                current.changes = 0
            }
            return current.log
        } catch {
            onError(error)
            return nil
        }
    }

    /// Reads back the changes of a log no longer appended to, writes them into the database in one transaction,
    /// then deletes the log; `later`: on the folding queue. If the write fails the log stays, and the next journal
    /// to open the database replays it. The queued work holds no reference to the journal, whose deinit waits for
    /// it.
    private func fold(_ log: IntentLog, later: Bool = false) {
        let (pool, statements, onError) = (pool, statements, onError)
        let work: @Sendable () -> Void = {
            do {
                try pool.writeWithoutTransaction { db in
                    try statements.transaction(on: db) { statements in
                        try log.forEachChange { try Self.apply($0, to: statements) }
                    }
                }
                log.remove()
            } catch {
                onError(error)
            }
        }
        if later { folding.async(execute: work) } else { work() }
    }

    private static func apply(
        _ operations: [JournalOperation], on pool: DatabasePool, with statements: WriteStatements
    ) throws {
        guard !operations.isEmpty else { return }
        try pool.writeWithoutTransaction { db in
            try statements.transaction(on: db) { statements in
                for operation in operations { try apply(operation, to: statements) }
            }
        }
    }

    private static func apply(_ operation: JournalOperation, to statements: WriteStatements) throws {
        switch operation {
        case .upsert(let row): try statements.upsert(row)
        case .remove(let url, let destination): try statements.delete(JournalKey(url: url, destination: destination))
        }
    }

    /// `rows` (in sequence order) with `operations` (in time order) applied as the database would apply them (an
    /// upsert keeps the sequence a key already has), except that a change older than a key's row is ignored: that
    /// row came later, from a journal that has folded its log since. (An older change to a key removed later
    /// comes back, and an older removal applies: two journals changing one key at once is two processes downloading
    /// one file to one place.)
    private static func overlay(_ operations: [JournalOperation], on rows: [RecordRow]) -> [RecordRow] {
        guard !operations.isEmpty else { return rows }
        var byKey = Dictionary(
            rows.map { (JournalKey(url: $0.url, destination: $0.destination), $0) }, uniquingKeysWith: { $1 })
        for operation in operations {
            switch operation {
            case .upsert(var row):
                let key = JournalKey(url: row.url, destination: row.destination)
                if let existing = byKey[key] {
                    if let newer = existing.changedAt, let time = row.changedAt, newer > time { continue }
                    row.sequence = existing.sequence
                }
                byKey[key] = row
            case .remove(let url, let destination):
                byKey[JournalKey(url: url, destination: destination)] = nil
            }
        }
        return byKey.values.sorted { $0.sequence < $1.sequence }
    }

    /// SQLite's `synchronous` setting of the writing connection (0 OFF, 1 NORMAL, 2 FULL): for tests.
    package var synchronousSetting: Int? {
        try? pool.write { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") }
    }

    /// Every record, in the order their keys were first stored: this journal's log folded first, then the
    /// database read from the file with the logs of other open journals on it applied (so it also shows what
    /// another process wrote).
    public func allRecords() -> [JournalRecord] {
        // This journal's log into the database, rotated between two batches (one being written would be read back
        // cut short): while one is, wait for it and try again.
        while true {
            let (busy, log) = current.withLock { $0.writing ? (true, nil) : (false, rotate(&$0)) }
            if !busy {
                if let log { fold(log, later: true) }
                break
            }
            write([], time: IntentLog.now()) { _ in }
        }
        folding.sync {}
        do {
            let others = IntentLog.others(of: path, takingDead: false).live
            return Self.overlay(others, on: try pool.read(Self.fetchRows)).compactMap(Self.record(from:))
        } catch {
            onError(error)
            return []
        }
    }

    /// Every row in sequence order.
    private static func fetchRows(_ db: Database) throws -> [RecordRow] {
        try Row.fetchAll(db, sql: "SELECT * FROM record ORDER BY sequence").map { row in
            WriteStatements.Row(
                url: row["url"], destination: row["destination"], path: row["path"], state: row["state"],
                sequence: row["sequence"], validator: row["validator"], totalBytes: row["totalBytes"],
                size: row["size"], sha256: row["sha256"], modifiedNanoseconds: row["modifiedNanoseconds"],
                inode: row["inode"], request: row["request"], failure: row["failure"], changedAt: row["changedAt"])
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
            state = .partial(validator: validator, totalBytes: row.totalBytes)
        case "verified":
            guard let size = row.size, let sha256 = row.sha256 else { return nil }
            state = .verified(size: size, sha256: sha256)
        case "completed":
            guard let size = row.size, let sha256 = row.sha256, let modified = row.modifiedNanoseconds,
                let inode = row.inode
            else { return nil }
            state = .completed(
                size: size, sha256: sha256,
                stamp: FileStamp(size: size, modifiedNanoseconds: modified, inode: UInt64(bitPattern: inode)))
        default:
            return nil
        }
        let request = row.request.flatMap { try? JSONDecoder().decode(DownloadRequest.self, from: Data($0.utf8)) }
        return JournalRecord(key: key, path: row.path, state: state, request: request)
    }
}

/// One record's columns (GRDB has a `Row` of its own).
typealias RecordRow = WriteStatements.Row
