import Foundation
import GRDB

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The journal's tables, and what earlier versions left beside them.
enum JournalSchema {
    /// Brings the database `writer` opens to the current schema: a new database gets the tables the migrations end
    /// with, in one transaction, and is recorded as having run them all (so any version of Haul opens it as one it
    /// migrated itself); an older one runs the migrations it lacks.
    ///
    /// The shortcut is for speed only: the migrations in a transaction each cost a new journal about 3 ms of the
    /// ~30 ms a one-file `haul get` takes, one transaction under 1 ms. `JournalSchemaTests` holds the two ways to the
    /// same tables.
    static func migrate(_ writer: some DatabaseWriter) throws {
        let migrator = Self.migrator
        try writer.write { db in
            // New: nothing in it yet, not even the record of migrations run.
            guard try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master") == 0 else { return }
            try db.execute(sql: currentSchema)
            for identifier in migrator.migrations {
                try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES (?)", arguments: [identifier])
            }
        }
        try migrator.migrate(writer)
    }

    /// Refuses the database at `path` when it is another program's (one with tables, none of them the journal's
    /// records under migrations Haul ran), or a journal a newer version of Haul has migrated past what this one knows.
    /// Opening the first as a journal would switch it to WAL and add the journal's tables to it, changes its program
    /// did not ask for; writing the second by this version's rules could undo what the newer one relies on. Read with
    /// a connection of its own, which changes nothing.
    static func refuseUnusable(at path: String) throws {
        var info = stat()
        guard stat(path, &info) == 0, info.st_size > 0 else { return }
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        let refusal = try DatabaseQueue(path: path, configuration: configuration).read {
            db -> (JournalOpenError.Reason, [String])? in
            let tables = try String.fetchAll(
                db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
            guard !tables.isEmpty else { return nil }
            // Haul's first migration made `download`, which v2 made `record`; GRDB notes each migration run.
            guard tables.contains("grdb_migrations"), tables.contains("record") || tables.contains("download") else {
                return (.notAJournal, tables.sorted())
            }
            let applied = try String.fetchSet(db, sql: "SELECT identifier FROM grdb_migrations")
            guard applied.contains("v1") else { return (.notAJournal, tables.sorted()) }
            let unknown = applied.subtracting(migrator.migrations)
            return unknown.isEmpty ? nil : (.newerVersion, unknown.sorted())
        }
        guard let (reason, names) = refusal else { return }
        let shown = names.prefix(5).map { "'\($0)'" }.joined(separator: ", ") + (names.count > 5 ? ", ..." : "")
        throw JournalOpenError(reason: reason, path: path, detail: shown)
    }

    /// The tables, as the migrations below leave them (columns in the order they have there).
    static let currentSchema = """
        CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
        CREATE TABLE record (
            url TEXT NOT NULL, destination TEXT NOT NULL, sequence INTEGER NOT NULL,
            path TEXT NOT NULL, state TEXT NOT NULL, validator TEXT, totalBytes INTEGER, size INTEGER,
            sha256 TEXT, modifiedNanoseconds INTEGER, inode INTEGER, request TEXT, failure TEXT,
            updatedAt TEXT NOT NULL, missingRanges TEXT, ticket INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (url, destination)
        ) WITHOUT ROWID;
        CREATE INDEX record_file ON record(path) WHERE state IN ('partial', 'completed');
        CREATE TABLE committedBatch (instance TEXT PRIMARY KEY, batch INTEGER NOT NULL) WITHOUT ROWID;
        \(orderTables)
        """

    /// What migration v8 adds beside the `ticket` column: the removals' tickets, and the highest ticket committed.
    private static let orderTables = """
        CREATE TABLE removal (
            url TEXT NOT NULL, destination TEXT NOT NULL, ticket INTEGER NOT NULL,
            PRIMARY KEY (url, destination)
        ) WITHOUT ROWID;
        CREATE TABLE changeOrder (last INTEGER NOT NULL);
        INSERT INTO changeOrder (last) VALUES (0);
        """

    /// Every step from the first schema on; a database that has run some runs the rest.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "download") { table in
                table.column("url", .text).notNull()
                table.column("destination", .text).notNull()
                table.column("path", .text).notNull()
                table.column("state", .text).notNull()  // requested | partial | completed | failed
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
        // When each change was written: the order of changes in logs beside the database, which v6 leaves behind.
        migrator.registerMigration("v3: changedAt") { db in
            try db.execute(sql: "ALTER TABLE record ADD COLUMN changedAt INTEGER")
        }
        // A segmented partial's missing byte ranges, as text (`WriteStatements.Row.rangesText(_:)`); NULL for every
        // other record, which is what rows from before it read as.
        migrator.registerMigration("v4: missingRanges") { db in
            try db.execute(sql: "ALTER TABLE record ADD COLUMN missingRanges TEXT")
        }
        // The files' records by path (`records(forFileAt:)`): a download to a path its own key does not know takes over
        // what another URL left there. Partial, so that the records of requests and failures cost it nothing.
        migrator.registerMigration("v5: records of files by path") { db in
            try db.execute(sql: "CREATE INDEX record_file ON record(path) WHERE state IN ('partial', 'completed')")
        }
        // The database orders changes (a later commit wins), so the wall clock's time of each change goes.
        migrator.registerMigration("v6: without changedAt") { db in
            try db.execute(sql: "ALTER TABLE record DROP COLUMN changedAt")
        }
        // The last batch of its pending log each open journal committed, by the journal's instance name: the log of a
        // journal killed after a commit and before restarting its log holds a committed batch, which must not be
        // committed again over what others committed since.
        migrator.registerMigration("v7: committed batches") { db in
            try db.execute(
                sql: "CREATE TABLE committedBatch (instance TEXT PRIMARY KEY, batch INTEGER NOT NULL) WITHOUT ROWID")
        }
        // The order of changes by the tickets of `ChangeOrder` (the change written last wins, whenever it is
        // committed): each record's ticket, the tickets of removals, and the highest ticket committed. Rows from
        // before have ticket 0: older than any change made from now on.
        migrator.registerMigration("v8: tickets") { db in
            try db.execute(sql: "ALTER TABLE record ADD COLUMN ticket INTEGER NOT NULL DEFAULT 0")
            try db.execute(sql: orderTables)
        }
        return migrator
    }

    /// The first log of changes beside the database at `path` that an earlier version of Haul wrote (it kept changes
    /// in `NAME-log.*` files and folded them into the database later), if one holds any change; empty ones, and the
    /// logs it made ahead of their use (`NAME-newlog.*`, never written to before being named), are deleted.
    ///
    /// Such a log is in use by that version's process, or was left by one that was killed: its changes are reached
    /// only by that version, so the journal does not open over them (see ``JournalOpenError/Reason/olderLog``).
    static func olderLog(besides path: String) -> String? {
        let directory = (path as NSString).deletingLastPathComponent
        let name = (path as NSString).lastPathComponent
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: directory.isEmpty ? "." : directory)) ?? []
        for entry in entries.sorted() where entry.hasPrefix(name + "-log.") || entry.hasPrefix(name + "-newlog.") {
            let logPath = (directory as NSString).appendingPathComponent(entry)
            // Not a regular file (a FIFO or a link named like one): no version's log, and not this journal's to delete.
            guard let holds = holdsChanges(logPath) else { continue }
            if entry.hasPrefix(name + "-newlog.") || !holds {
                unlink(logPath)
            } else {
                return logPath
            }
        }
        return nil
    }

    /// Whether the log at `path` has a first frame: its first four bytes, the frame's length, are not zero (the
    /// space such a log reserved ahead reads as zeros); `nil` for what is not a regular file (opened without waiting
    /// for a FIFO's writer).
    private static func holdsChanges(_ path: String) -> Bool? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard descriptor >= 0 else { return errno == ELOOP ? nil : false }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        var length: UInt32 = 0
        let read = pread(descriptor, &length, 4, 0)
        return read != 0 && (read != 4 || length != 0)
    }
}
