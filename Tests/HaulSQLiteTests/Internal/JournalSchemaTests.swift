import Foundation
import GRDB
import HaulTestSupport
import Testing

@testable import HaulSQLite

/// A new journal gets its tables in one step; a journal migrated step by step from the first schema must end with the
/// same ones, or a record written by one would read differently in the other.
@Suite("SQLite journal's schema")
struct JournalSchemaTests {
    /// What SQLite says of every table and index, by name: columns with their types, constraints and key positions,
    /// whether rows have no rowid, and each index's columns and condition.
    static func shape(_ db: Database) throws -> [String: [String]] {
        var shape: [String: [String]] = [:]
        let objects = try Row.fetchAll(
            db, sql: "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name")
        for object in objects {
            let name: String = object["name"]
            let sql: String = object["sql"] ?? ""
            if object["type"] == "table" {
                shape[name] =
                    try Row.fetchAll(db, sql: "PRAGMA table_xinfo(\(name.quotedDatabaseIdentifier))").map {
                        row in
                        "\(row["name"] ?? "") \(row["type"] ?? "") notnull=\(row["notnull"] ?? 0) pk=\(row["pk"] ?? 0)"
                    } + ["without rowid: \(sql.uppercased().contains("WITHOUT ROWID"))"]
            } else {
                let columns = try Row.fetchAll(db, sql: "PRAGMA index_info(\(name.quotedDatabaseIdentifier))").map {
                    row in "\(row["name"] ?? "")"
                }
                let condition = sql.range(of: " WHERE ").map { String(sql[$0.upperBound...]) } ?? ""
                shape[name] = columns + ["where: \(condition)"]
            }
        }
        return shape
    }

    @Test("a new journal's tables are those the migrations end with, and every migration counts as run")
    func newJournalMatchesMigrated() throws {
        let migrated = try DatabaseQueue()
        try JournalSchema.migrator.migrate(migrated)
        let created = try DatabaseQueue()
        try JournalSchema.migrate(created)

        let migratedShape = try migrated.read(Self.shape)
        let createdShape = try created.read(Self.shape)
        #expect(
            Set(migratedShape.keys) == [
                "grdb_migrations", "record", "record_file", "committedBatch", "removal", "changeOrder",
            ])
        #expect(createdShape == migratedShape)
        #expect(try created.read(JournalSchema.migrator.appliedMigrations) == JournalSchema.migrator.migrations)
        #expect(try created.read(JournalSchema.migrator.hasCompletedMigrations))
    }

    @Test("a journal opened on a new file gets its tables in one step, not through every migration")
    func newJournalFileTakesTheShortcut() throws {
        let dir = try TemporaryDirectory()
        let path = dir.url.appendingPathComponent("new.sqlite").path
        try SQLiteJournal(path: path).finish()
        // SQLite counts the changes made to a database's schema: the tables made at once take fewer than the steps.
        let opened = try DatabaseQueue(path: path).read { db in try Int.fetchOne(db, sql: "PRAGMA schema_version") }
        let migrated = try DatabaseQueue()
        try JournalSchema.migrator.migrate(migrated)
        let stepByStep = try migrated.read { db in try Int.fetchOne(db, sql: "PRAGMA schema_version") }
        #expect(try #require(opened) < #require(stepByStep))
    }

    /// The tables the first version of the journal made, recorded as its one migration: what an old journal holds
    /// before its rows.
    static let firstSchema = """
        CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
        INSERT INTO grdb_migrations VALUES ('v1');
        CREATE TABLE download (
            url TEXT NOT NULL, destination TEXT NOT NULL, path TEXT NOT NULL, state TEXT NOT NULL,
            validator TEXT, totalBytes INTEGER, size INTEGER, sha256 TEXT,
            modifiedNanoseconds INTEGER, inode INTEGER, updatedAt DATETIME NOT NULL,
            PRIMARY KEY (url, destination));

        """

    @Test("a database with the first schema is migrated, not created anew: its rows are kept")
    func olderDatabaseIsMigrated() throws {
        let database = try DatabaseQueue()
        try database.write { db in
            try db.execute(
                sql: Self.firstSchema + """
                    INSERT INTO download VALUES ('http://h/a', '/d/', '/d/a', 'requested', NULL, NULL, NULL, NULL,
                        NULL, NULL, '2026-01-01 00:00:00.000');
                    """)
        }
        try JournalSchema.migrate(database)
        let fresh = try DatabaseQueue()
        try JournalSchema.migrate(fresh)
        #expect(try database.read(Self.shape) == fresh.read(Self.shape))
        #expect(try database.read { db in try String.fetchAll(db, sql: "SELECT url FROM record") } == ["http://h/a"])
    }

    @Test("migrating a journal that is current changes nothing")
    func currentJournalIsLeftAlone() throws {
        let database = try DatabaseQueue()
        try JournalSchema.migrate(database)
        try database.write { db in
            try db.execute(
                sql: """
                    INSERT INTO record (url, destination, sequence, path, state, updatedAt)
                    VALUES ('http://h/a', '/d/', 1, '/d/a', 'requested', '2026-01-01 00:00:00.000')
                    """)
        }
        let before = try database.read(Self.shape)
        try JournalSchema.migrate(database)
        #expect(try database.read(Self.shape) == before)
        #expect(try database.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM record") } == 1)
    }
}
