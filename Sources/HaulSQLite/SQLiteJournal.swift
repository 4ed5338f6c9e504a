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
/// Each call is one short transaction (records the engine commits while many downloads finish together share
/// one). How far a committed record survives follows `durability`, like the engine's files:
/// - ``Downloader/Durability/processCrash`` (the default): `synchronous = OFF`. A record survives the process
///   being killed at any instant (it is in the WAL file, in the page cache) and nothing is ever `fsync`ed: on
///   ext4 one `fsync` forces out every file written since the last journal commit, which cost a batch of small
///   downloads up to 70% more time. After a power loss the database may be unreadable; opening it then fails
///   with a message naming it (delete it: only resumability is lost).
/// - ``Downloader/Durability/powerLoss``: `synchronous = FULL`, every commit is on disk when the call returns.
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
    private let statements = WriteStatements()
    /// The `sequence` the next new key gets.
    private let nextSequence: Locked<Int64>
    /// Records passed to ``commit(_:)`` and not yet written, with their waiting callers; and whether a caller
    /// is writing (and will write these too).
    private let group = Locked<(pending: [(JournalRecord, CheckedContinuation<Void, Never>)], draining: Bool)>(
        ([], false))

    /// Opens (creating if needed, with its directory) the journal at `path`.
    ///
    /// - Parameters:
    ///   - durability: how far a committed record must survive (see the type's discussion); give it the
    ///     downloader's ``Downloader/Configuration/durability``.
    ///   - onError: called when a later read or write fails (the download goes on; only what a later run can
    ///     resume or skip is affected). By default errors are dropped.
    /// - Throws: when the database cannot be opened or migrated (a clear message: path and SQLite's reason).
    public init(
        path: String, durability: Downloader.Durability = .processCrash,
        onError: @escaping @Sendable (any Error) -> Void = { _ in }
    ) throws {
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
            // Small pages for a new database (no effect on an existing one): a commit writes whole pages to the
            // WAL, and a record is ~200 bytes; with 4 KiB pages the WAL grew three times faster than the files.
            try db.execute(sql: "PRAGMA page_size = 1024")
            try db.execute(sql: "PRAGMA synchronous = \(synchronous)")
            // Fewer, larger checkpoints: the same few b-tree pages change with every record, so checkpointing
            // every 1,000 WAL pages (the default) copies them into the database over and over.
            try db.execute(sql: "PRAGMA wal_autocheckpoint = 20000")
        }
        // Another process (a second `haul get` on the same directory) waits for the lock instead of failing.
        configuration.busyMode = .timeout(10)
        pool = try DatabasePool(path: path, configuration: configuration)
        // Again on the writer: GRDB sets NORMAL there when it turns WAL on, after prepareDatabase.
        try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = \(synchronous)") }
        self.onError = onError
        try Self.migrator.migrate(pool)
        let (records, last) = try pool.read(Self.fetchAll)
        cache = Locked(Dictionary(records.map { ($0.key, $0) }, uniquingKeysWith: { _, last in last }))
        nextSequence = Locked((last ?? 0) + 1)
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
        return migrator
    }

    deinit {
        // Finalized before the pool closes the connection, which would otherwise report them as unfinalized.
        pool.writeWithoutTransaction { _ in statements.finalize() }
    }

    /// The record stored for `key`, if any.
    public func record(for key: JournalKey) -> JournalRecord? {
        cache.withLock { $0[key] }
    }

    /// Stores `record`, replacing the one for its key.
    public func store(_ record: JournalRecord) {
        store([record])
    }

    /// Stores `record` and returns once it is written. Records committed while a write is under way wait for it
    /// (suspended, not blocking a thread) and go together in the next one, which the writing caller also does
    /// before it returns: with many downloads finishing at once, one transaction serves several, and a lone
    /// record is written at once on the caller's thread, with no hand-off to another.
    public func commit(_ record: JournalRecord) async {
        let leads = group.withLock { group in
            defer { group.draining = true }
            return !group.draining
        }
        if leads { return drain(startingWith: record) }
        await withCheckedContinuation { continuation in
            // The writer may have finished since: then this caller writes.
            let queued = group.withLock { group in
                if group.draining { group.pending.append((record, continuation)) }
                defer { group.draining = true }
                return group.draining
            }
            if !queued {
                drain(startingWith: record)
                continuation.resume()
            }
        }
    }

    /// Writes `first` and then whatever was committed meanwhile, until nothing is waiting.
    private func drain(startingWith first: JournalRecord) {
        var records = [first]
        var waiting: [CheckedContinuation<Void, Never>] = []
        while !records.isEmpty {
            store(records)
            for continuation in waiting { continuation.resume() }
            (records, waiting) = group.withLock { group in
                let batch = group.pending
                group.pending = []
                if batch.isEmpty { group.draining = false }
                return (batch.map(\.0), batch.map(\.1))
            }
        }
    }

    /// Stores `records` in one transaction.
    public func store(_ records: [JournalRecord]) {
        let first = nextSequence.withLock { next in
            defer { next += Int64(records.count) }
            return next
        }
        let rows = records.enumerated().map { Self.values(of: $1, sequence: first + Int64($0)) }
        cache.withLock { cache in
            for record in records { cache[record.key] = record }
        }
        write { statements in
            for row in rows { try statements.upsert(row) }
        }
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

    /// Forgets `keys` in one transaction.
    public func remove(_ keys: [JournalKey]) {
        cache.withLock { cache in
            for key in keys { cache.removeValue(forKey: key) }
        }
        write { statements in
            for key in keys { try statements.delete(key) }
        }
    }

    /// SQLite's `synchronous` setting of the writing connection (0 OFF, 1 NORMAL, 2 FULL): for tests.
    package var synchronousSetting: Int? {
        try? pool.write { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") }
    }

    /// Every record in the database, in the order their keys were first stored (read from the file, so it also
    /// shows what another process wrote).
    public func allRecords() -> [JournalRecord] {
        do {
            return try pool.read(Self.fetchAll).records
        } catch {
            onError(error)
            return []
        }
    }

    /// Every record in sequence order, and the last sequence (the largest: the rows come sorted by it).
    private static func fetchAll(_ db: Database) throws -> (records: [JournalRecord], lastSequence: Int64?) {
        let rows = try Row.fetchAll(db, sql: "SELECT * FROM record ORDER BY sequence")
        let records = rows.compactMap { row in
            record(from: row, key: JournalKey(url: row["url"], destination: row["destination"]))
        }
        return (records, rows.last?["sequence"])
    }

    /// Runs `body` in one transaction on the writer connection, through SQLite's own interface with statements
    /// prepared once: GRDB's `write` prepared `BEGIN` and `COMMIT` anew and boxed every argument, which made a
    /// one-record commit cost ~60 µs here, most of the journal's share of a 10,000-file run.
    private func write(_ body: (WriteStatements) throws -> Void) {
        do {
            try pool.writeWithoutTransaction { db in
                try statements.transaction(on: db, body)
            }
        } catch {
            onError(error)
        }
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return encoder
    }()

    private static func record(from row: Row, key: JournalKey) -> JournalRecord? {
        let path: String = row["path"]
        let state: JournalRecord.State
        switch row["state"] as String? {
        case "requested":
            state = .requested
        case "failed":
            state = .failed(message: row["failure"] ?? "")
        case "partial":
            guard let validator: String = row["validator"] else { return nil }
            state = .partial(validator: validator, totalBytes: row["totalBytes"])
        case "verified":
            guard let size: Int64 = row["size"], let sha256: String = row["sha256"] else { return nil }
            state = .verified(size: size, sha256: sha256)
        case "completed":
            guard let size: Int64 = row["size"], let sha256: String = row["sha256"],
                let modified: Int64 = row["modifiedNanoseconds"], let inode: Int64 = row["inode"]
            else { return nil }
            state = .completed(
                size: size, sha256: sha256,
                stamp: FileStamp(size: size, modifiedNanoseconds: modified, inode: UInt64(bitPattern: inode)))
        default:
            return nil
        }
        let request = (row["request"] as String?).flatMap {
            try? JSONDecoder().decode(DownloadRequest.self, from: Data($0.utf8))
        }
        return JournalRecord(key: key, path: path, state: state, request: request)
    }
}

/// The journal's writes as prepared SQLite statements on the writer connection: prepared at the first write, reused
/// for every later one, finalized when the journal goes. Only used inside `DatabasePool.writeWithoutTransaction`,
/// which runs one closure at a time.
private final class WriteStatements: @unchecked Sendable {
    /// One record's columns.
    struct Row {
        var url: String
        var destination: String
        var path: String
        var state: String
        var sequence: Int64
        var validator: String?
        var totalBytes: Int64?
        var size: Int64?
        var sha256: String?
        var modifiedNanoseconds: Int64?
        var inode: Int64?
        var request: String?
        var failure: String?
    }

    private var connection: OpaquePointer?
    private var begin: OpaquePointer?
    private var commit: OpaquePointer?
    private var rollback: OpaquePointer?
    private var insert: OpaquePointer?
    private var remove: OpaquePointer?

    /// Runs `body` between `BEGIN IMMEDIATE` and `COMMIT` (rolled back if it throws).
    func transaction(on db: Database, _ body: (WriteStatements) throws -> Void) throws {
        guard let handle = db.sqliteConnection else { throw DatabaseError(message: "the journal is closed") }
        if connection != handle { try prepare(handle) }
        try run(begin)
        do {
            try body(self)
            try run(commit)
        } catch {
            try? run(rollback)
            throw error
        }
    }

    /// Inserts `row`, or updates the record with its key leaving `sequence` alone (so that allRecords() keeps the
    /// order in which keys were first stored). `updatedAt` is SQLite's clock: formatting a Date in Swift for
    /// every record cost more than the insert.
    func upsert(_ row: Row) throws {
        let statement = insert
        bind(statement, 1, row.url)
        bind(statement, 2, row.destination)
        bind(statement, 3, row.path)
        bind(statement, 4, row.state)
        bind(statement, 5, row.validator)
        bind(statement, 6, row.totalBytes)
        bind(statement, 7, row.size)
        bind(statement, 8, row.sha256)
        bind(statement, 9, row.modifiedNanoseconds)
        bind(statement, 10, row.inode)
        bind(statement, 11, row.request)
        bind(statement, 12, row.failure)
        bind(statement, 13, row.sequence)
        try run(statement)
    }

    func delete(_ key: JournalKey) throws {
        bind(remove, 1, key.url)
        bind(remove, 2, key.destination)
        try run(remove)
    }

    func finalize() {
        for statement in [begin, commit, rollback, insert, remove] { sqlite3_finalize(statement) }
        (begin, commit, rollback, insert, remove, connection) = (nil, nil, nil, nil, nil, nil)
    }

    private func prepare(_ handle: OpaquePointer) throws {
        finalize()
        connection = handle
        func make(_ sql: String) throws -> OpaquePointer? {
            var statement: OpaquePointer?
            let code = sqlite3_prepare_v2(handle, sql, -1, &statement, nil)
            guard code == SQLITE_OK else {
                throw DatabaseError(
                    resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(handle)), sql: sql)
            }
            return statement
        }
        begin = try make("BEGIN IMMEDIATE")
        commit = try make("COMMIT")
        rollback = try make("ROLLBACK")
        insert = try make(
            """
            INSERT INTO record
            (url, destination, path, state, validator, totalBytes, size, sha256, modifiedNanoseconds, inode,
             request, failure, sequence, updatedAt)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, strftime('%Y-%m-%d %H:%M:%f', 'now'))
            ON CONFLICT (url, destination) DO UPDATE SET
            path = excluded.path, state = excluded.state, validator = excluded.validator,
            totalBytes = excluded.totalBytes, size = excluded.size, sha256 = excluded.sha256,
            modifiedNanoseconds = excluded.modifiedNanoseconds, inode = excluded.inode,
            request = excluded.request, failure = excluded.failure, updatedAt = excluded.updatedAt
            """)
        remove = try make("DELETE FROM record WHERE url = ? AND destination = ?")
    }

    /// Steps `statement` to its end and resets it (bindings are cleared, so no string outlives the call).
    private func run(_ statement: OpaquePointer?) throws {
        let code = sqlite3_step(statement)
        sqlite3_reset(statement)
        sqlite3_clear_bindings(statement)
        guard code == SQLITE_DONE else {
            throw DatabaseError(
                resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(connection)),
                sql: sqlite3_sql(statement).map { String(cString: $0) })
        }
    }

    private func bind(_ statement: OpaquePointer?, _ index: Int32, _ value: String?) {
        guard let value else {
            sqlite3_bind_null(statement, index)
            return
        }
        // SQLITE_TRANSIENT: SQLite copies the bytes, the Swift string may go.
        sqlite3_bind_text(statement, index, value, -1, transient)
    }

    private func bind(_ statement: OpaquePointer?, _ index: Int32, _ value: Int64?) {
        guard let value else {
            sqlite3_bind_null(statement, index)
            return
        }
        sqlite3_bind_int64(statement, index, value)
    }
}

private let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
