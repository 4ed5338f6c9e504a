import GRDB
import GRDBSQLite
import Haul

/// The journal's writes as prepared SQLite statements on the writer connection: prepared at the first write, reused
/// for every later one, finalized when the journal goes. Only used inside `DatabasePool.writeWithoutTransaction`,
/// which runs one closure at a time.
final class WriteStatements: @unchecked Sendable {  // used by one writer closure at a time (see above)
    /// One record's columns.
    struct Row: Equatable {
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
        /// When the change was written (wall clock, nanoseconds since 1970); `nil` in rows from before it was kept.
        var changedAt: Int64?
    }

    private var connection: OpaquePointer?
    private var begin: OpaquePointer?
    private var commit: OpaquePointer?
    private var rollback: OpaquePointer?
    private var insert: OpaquePointer?
    private var remove: OpaquePointer?
    private var clock: OpaquePointer?
    /// SQLite's clock when the transaction began: every row of a fold gets it as `updatedAt`, formatted once
    /// rather than once per row (a tenth of a fold's time).
    private var now = ""

    /// Runs `body` between `BEGIN IMMEDIATE` and `COMMIT` (rolled back if it throws).
    func transaction(on db: Database, _ body: (WriteStatements) throws -> Void) throws {
        guard let handle = db.sqliteConnection else { throw DatabaseError(message: "the journal is closed") }
        if connection != handle { try prepare(handle) }
        try run(begin)
        now = sqlite3_step(clock) == SQLITE_ROW ? sqlite3_column_text(clock, 0).map { String(cString: $0) } ?? "" : ""
        sqlite3_reset(clock)
        do {
            try body(self)
            try run(commit)
        } catch {
            try? run(rollback)
            throw error
        }
    }

    /// Inserts `row`, or updates the record with its key leaving `sequence` alone (so that allRecords() keeps the
    /// order in which keys were first stored). `updatedAt` is SQLite's clock at the start of the transaction.
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
        bind(statement, 14, row.changedAt)
        bind(statement, 15, now)
        try run(statement)
    }

    /// ``upsert(_:)-(Row)`` of a change straight from a log's bytes (valid until this returns: the statement is
    /// reset and its bindings cleared before it does).
    func upsert(_ change: RawChange) throws {
        let statement = insert
        bind(statement, 1, change.url)
        bind(statement, 2, change.destination)
        bind(statement, 3, change.path)
        bind(statement, 4, change.state)
        bind(statement, 5, change.validator)
        bind(statement, 6, change.totalBytes)
        bind(statement, 7, change.size)
        bind(statement, 8, change.sha256)
        bind(statement, 9, change.modifiedNanoseconds)
        bind(statement, 10, change.inode)
        bind(statement, 11, change.request)
        bind(statement, 12, change.failure)
        bind(statement, 13, change.sequence)
        bind(statement, 14, change.time)
        bind(statement, 15, now)
        try run(statement)
    }

    /// ``delete(_:)-(JournalKey)`` of a removal straight from a log's bytes.
    func delete(_ change: RawChange) throws {
        bind(remove, 1, change.url)
        bind(remove, 2, change.destination)
        try run(remove)
    }

    func delete(_ key: JournalKey) throws {
        bind(remove, 1, key.url)
        bind(remove, 2, key.destination)
        try run(remove)
    }

    func finalize() {
        for statement in [begin, commit, rollback, insert, remove, clock] { sqlite3_finalize(statement) }
        (begin, commit, rollback, insert, remove, clock, connection) = (nil, nil, nil, nil, nil, nil, nil)
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
             request, failure, sequence, changedAt, updatedAt)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (url, destination) DO UPDATE SET
            path = excluded.path, state = excluded.state, validator = excluded.validator,
            totalBytes = excluded.totalBytes, size = excluded.size, sha256 = excluded.sha256,
            modifiedNanoseconds = excluded.modifiedNanoseconds, inode = excluded.inode,
            request = excluded.request, failure = excluded.failure, changedAt = excluded.changedAt,
            updatedAt = excluded.updatedAt
            """)
        remove = try make("DELETE FROM record WHERE url = ? AND destination = ?")
        clock = try make("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")
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
        // SQLITE_TRANSIENT: SQLite copies the bytes, the Swift string may go. Through the string's own UTF-8
        // storage with its length: passing the String as a C string made a null-terminated copy of each one first.
        // (An empty buffer may have no address, which SQLite would bind as NULL.)
        guard !value.isEmpty else {
            sqlite3_bind_text(statement, index, "", 0, transient)
            return
        }
        var text = value
        text.withUTF8 { bytes in
            _ = bytes.withMemoryRebound(to: CChar.self) {
                sqlite3_bind_text(statement, index, $0.baseAddress, Int32($0.count), transient)
            }
        }
    }

    /// Binds text that stays where it is until the statement is reset (`SQLITE_STATIC`: SQLite makes no copy).
    private func bind(_ statement: OpaquePointer?, _ index: Int32, _ value: UnsafeRawBufferPointer?) {
        guard let value else {
            sqlite3_bind_null(statement, index)
            return
        }
        // An empty buffer may have no address, which SQLite would bind as NULL.
        guard let start = value.baseAddress, !value.isEmpty else {
            sqlite3_bind_text(statement, index, "", 0, transient)
            return
        }
        sqlite3_bind_text(statement, index, start.assumingMemoryBound(to: CChar.self), Int32(value.count), nil)
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
