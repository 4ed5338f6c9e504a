import Foundation
import GRDB
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
        write { db in
            // An upsert that leaves `sequence` alone: allRecords() keeps the order in which keys were first stored.
            let statement = try db.cachedStatement(
                sql: """
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
            for row in rows { try statement.execute(arguments: StatementArguments(row)) }
        }
    }

    private static func values(of record: JournalRecord, sequence: Int64) -> [(any DatabaseValueConvertible)?] {
        var values: [(any DatabaseValueConvertible)?] = [record.key.url, record.key.destination, record.path]
        var failure: String?
        switch record.state {
        case .requested:
            values += ["requested", nil, nil, nil, nil, nil, nil]
        case .partial(let validator, let totalBytes):
            values += ["partial", validator, totalBytes, nil, nil, nil, nil]
        case .verified(let size, let sha256):
            values += ["verified", nil, nil, size, sha256, nil, nil]
        case .completed(let size, let sha256, let stamp):
            values += [
                "completed", nil, nil, size, sha256, stamp.modifiedNanoseconds, Int64(bitPattern: stamp.inode),
            ]
        case .failed(let message):
            values += ["failed", nil, nil, nil, nil, nil, nil]
            failure = message
        }
        let request = record.request.flatMap { try? encoder.encode($0) }.map { String(decoding: $0, as: UTF8.self) }
        // updatedAt is SQLite's own clock (formatting a Date in Swift for every record cost more than the insert).
        values += [request, failure, sequence]
        return values
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
        write { db in
            let statement = try db.cachedStatement(sql: "DELETE FROM record WHERE url = ? AND destination = ?")
            for key in keys { try statement.execute(arguments: [key.url, key.destination]) }
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

    private func write(_ statements: (Database) throws -> Void) {
        do {
            // Cached statements in one transaction: the cheapest durable write SQLite has.
            try pool.write(statements)
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
