import Foundation
import GRDB
import HaulOperations
public import Haul

/// The journal in an SQLite database (GRDB, WAL): what `haul get` keeps in `DIR/.haul/journal.sqlite`.
///
/// Each call is one short transaction. In WAL mode with `synchronous = NORMAL` a committed record survives the
/// process being killed at any instant (it is in the WAL file, in the page cache); like the engine's default
/// durability, not a power loss. After a power loss the engine trusts a completed record only while the file's
/// size, modification time and inode still match, so a lost or stale record costs a re-download, never a wrong
/// file.
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

    /// Opens (creating if needed, with its directory) the journal at `path`.
    ///
    /// - Parameter onError: called when a later read or write fails (the download goes on; only what a later
    ///   run can resume or skip is affected). By default errors are dropped.
    /// - Throws: when the database cannot be opened or migrated (a clear message: path and SQLite's reason).
    public init(path: String, onError: @escaping @Sendable (any Error) -> Void = { _ in }) throws {
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        var configuration = Configuration()
        configuration.label = "haul-journal"
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            // Fewer, larger checkpoints: the same few b-tree pages change with every record, so checkpointing
            // every 1,000 WAL pages (the default) copies them into the database over and over.
            try db.execute(sql: "PRAGMA wal_autocheckpoint = 20000")
        }
        // Another process (a second `haul get` on the same directory) waits for the lock instead of failing.
        configuration.busyMode = .timeout(10)
        pool = try DatabasePool(path: path, configuration: configuration)
        self.onError = onError
        try Self.migrator.migrate(pool)
        let records = try pool.read(Self.fetchAll)
        cache = Locked(Dictionary(records.map { ($0.key, $0) }, uniquingKeysWith: { _, last in last }))
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "download") { table in
                table.column("url", .text).notNull()
                table.column("destination", .text).notNull()
                table.column("path", .text).notNull()
                table.column("state", .text).notNull()  // partial | verified | completed
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
        return migrator
    }

    /// The record stored for `key`, if any.
    public func record(for key: JournalKey) -> JournalRecord? {
        cache.withLock { $0[key] }
    }

    /// Stores `record`, replacing the one for its key.
    public func store(_ record: JournalRecord) {
        var values: [(any DatabaseValueConvertible)?] = [record.key.url, record.key.destination, record.path]
        switch record.state {
        case .partial(let validator, let totalBytes):
            values += ["partial", validator, totalBytes, nil, nil, nil, nil]
        case .verified(let size, let sha256):
            values += ["verified", nil, nil, size, sha256, nil, nil]
        case .completed(let size, let sha256, let stamp):
            values += [
                "completed", nil, nil, size, sha256, stamp.modifiedNanoseconds, Int64(bitPattern: stamp.inode),
            ]
        }
        values.append(Date())
        cache.withLock { $0[record.key] = record }
        write(
            sql: """
                INSERT OR REPLACE INTO download
                (url, destination, path, state, validator, totalBytes, size, sha256, modifiedNanoseconds, inode,
                 updatedAt)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, arguments: StatementArguments(values))
    }

    /// Forgets `key`.
    public func remove(_ key: JournalKey) {
        cache.withLock { _ = $0.removeValue(forKey: key) }
        write(sql: "DELETE FROM download WHERE url = ? AND destination = ?", arguments: [key.url, key.destination])
    }

    /// Every record in the database, in no particular order (read from the file: for inspection and tests).
    public func allRecords() -> [JournalRecord] {
        do {
            return try pool.read(Self.fetchAll)
        } catch {
            onError(error)
            return []
        }
    }

    private static func fetchAll(_ db: Database) throws -> [JournalRecord] {
        try Row.fetchAll(db, sql: "SELECT * FROM download").compactMap { row in
            record(from: row, key: JournalKey(url: row["url"], destination: row["destination"]))
        }
    }

    private func write(sql: String, arguments: StatementArguments) {
        do {
            // A cached statement in its own implicit transaction: the cheapest durable write SQLite has. (Group
            // commit across downloads was tried and measured no gain: the engine calls from at most as many
            // threads as cores, 2 here, so writes seldom overlap.)
            try pool.writeWithoutTransaction { db in
                try db.cachedStatement(sql: sql).execute(arguments: arguments)
            }
        } catch {
            onError(error)
        }
    }

    private static func record(from row: Row, key: JournalKey) -> JournalRecord? {
        let path: String = row["path"]
        let state: JournalRecord.State
        switch row["state"] as String? {
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
        return JournalRecord(key: key, path: path, state: state)
    }
}
