import GRDB
import GRDBSQLite
import Haul
import HaulOperations

/// The journal's look-ups: a connection of its own to the database with the look-up prepared on it once, used by
/// one caller at a time. A look-up is one search of the table's key, whatever the number of rows. Not through the
/// pool: there GRDB's share of a look-up (a reader taken from the pool, a hop onto its queue, a check of the schema,
/// the statement found by its SQL) is several times SQLite's (bench/journal/lookup.sh, "look-up").
final class RecordQuery: Sendable {
    /// The connection and its statement; `nil` once closed.
    private let handles:
        Locked<
            (
                connection: OpaquePointer, lookup: OpaquePointer, exists: OpaquePointer, files: OpaquePointer,
                committed: OpaquePointer, newest: OpaquePointer
            )?
        >

    /// The columns in the order ``row(for:)`` reads them.
    private static let lookup = """
        SELECT path, state, sequence, validator, totalBytes, size, sha256, modifiedNanoseconds, inode, request,
               failure, missingRanges, ticket
        FROM record WHERE url = ? AND destination = ?
        """
    private static let exists = "SELECT EXISTS (SELECT 1 FROM record)"
    private static let committed = "SELECT coalesce(max(batch), 0) FROM committedBatch WHERE instance = ?"
    /// The partial and completed records of one path (the index `record_file`), their keys after the same columns.
    private static let files = """
        SELECT path, state, sequence, validator, totalBytes, size, sha256, modifiedNanoseconds, inode, request,
               failure, missingRanges, ticket, url, destination
        FROM record WHERE path = ? AND state IN ('partial', 'completed')
        """
    /// The highest ticket the database holds for a key: its record's or its removal's (0 for none).
    private static let newest = """
        SELECT max(coalesce((SELECT ticket FROM record WHERE url = ?1 AND destination = ?2), 0),
                   coalesce((SELECT ticket FROM removal WHERE url = ?1 AND destination = ?2), 0))
        """

    /// Opens a connection to the database at `path`, which must exist, migrated (the statements are prepared now).
    init(path: String) throws {
        var connection: OpaquePointer?
        // No mutex of SQLite's own: the lock around every use serializes them.
        let code = sqlite3_open_v2(path, &connection, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nil)
        guard code == SQLITE_OK, let connection else {
            let message = connection.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close_v2(connection)
            throw DatabaseError(resultCode: ResultCode(rawValue: code), message: message)
        }
        // A checkpoint or WAL recovery by another connection is waited for, as the pool's connections wait.
        sqlite3_busy_timeout(connection, 10_000)
        do {
            handles = Locked(
                (
                    connection, try Self.prepare(Self.lookup, on: connection),
                    try Self.prepare(Self.exists, on: connection), try Self.prepare(Self.files, on: connection),
                    try Self.prepare(Self.committed, on: connection), try Self.prepare(Self.newest, on: connection)
                ))
        } catch {
            sqlite3_close_v2(connection)
            throw error
        }
    }

    deinit {
        close()
    }

    /// The row of `key`, if any.
    func row(for key: JournalKey) throws -> WriteStatements.Row? {
        try handles.withLock { handles -> WriteStatements.Row? in
            guard case let (connection, statement, _, _, _, _)? = handles else { return nil }
            // Reset at once, so that the statement holds no read lock on the WAL between look-ups (a checkpoint would
            // wait for it), and cleared, so that no string outlives the call.
            defer {
                sqlite3_reset(statement)
                sqlite3_clear_bindings(statement)
            }
            let code = Self.step(statement, for: key)
            guard code == SQLITE_ROW else {
                if code == SQLITE_DONE { return nil }
                throw Self.error(code, on: connection, sql: Self.lookup)
            }
            return Self.row(statement, url: key.url, destination: key.destination)
        }
    }

    /// The rows of the partial and completed files at `path`, under any key.
    func fileRows(at path: String) throws -> [WriteStatements.Row] {
        try handles.withLock { handles -> [WriteStatements.Row] in
            guard case let (connection, _, _, statement, _, _)? = handles else { return [] }
            defer {
                sqlite3_reset(statement)
                sqlite3_clear_bindings(statement)
            }
            path.bind(statement, 1)
            var rows: [WriteStatements.Row] = []
            while true {
                let code = sqlite3_step(statement)
                if code == SQLITE_DONE { return rows }
                guard code == SQLITE_ROW else { throw Self.error(code, on: connection, sql: Self.files) }
                let text = { (column: Int32) in sqlite3_column_text(statement, column).map { String(cString: $0) } }
                rows.append(Self.row(statement, url: text(13) ?? "", destination: text(14) ?? ""))
            }
        }
    }

    /// The row a stepped statement holds in the columns of ``lookup``, for the key given.
    private static func row(_ statement: OpaquePointer, url: String, destination: String) -> WriteStatements.Row {
        func text(_ column: Int32) -> String? {
            sqlite3_column_text(statement, column).map { String(cString: $0) }
        }
        func integer(_ column: Int32) -> Int64? {
            sqlite3_column_type(statement, column) == SQLITE_NULL ? nil : sqlite3_column_int64(statement, column)
        }
        return WriteStatements.Row(
            url: url, destination: destination, path: text(0) ?? "", state: text(1) ?? "",
            sequence: integer(2) ?? 0, validator: text(3), totalBytes: integer(4), size: integer(5),
            sha256: text(6), modifiedNanoseconds: integer(7), inode: integer(8), request: text(9),
            failure: text(10), missingRanges: text(11), ticket: integer(12) ?? 0)
    }

    /// Whether the table has a row.
    func hasRecords() throws -> Bool {
        try handles.withLock { handles -> Bool in
            guard case let (connection, _, statement, _, _, _)? = handles else { return false }
            defer { sqlite3_reset(statement) }
            let code = sqlite3_step(statement)
            guard code == SQLITE_ROW else { throw Self.error(code, on: connection, sql: Self.exists) }
            return sqlite3_column_int64(statement, 0) != 0
        }
    }

    /// The last batch of its pending log that journal `instance` noted as committed (0 for none).
    func committedBatch(of instance: String) throws -> UInt64 {
        try handles.withLock { handles -> UInt64 in
            guard case let (connection, _, _, _, statement, _)? = handles else { return 0 }
            defer {
                sqlite3_reset(statement)
                sqlite3_clear_bindings(statement)
            }
            instance.bind(statement, 1)
            let code = sqlite3_step(statement)
            guard code == SQLITE_ROW else { throw Self.error(code, on: connection, sql: Self.committed) }
            return UInt64(bitPattern: sqlite3_column_int64(statement, 0))
        }
    }

    /// The highest ticket the database holds for `key`, of its record or of its removal; 0 for none. A change with a
    /// lower ticket will not be applied when it is committed (``WriteStatements/upsert(_:ticket:)``).
    func newestTicket(for key: JournalKey) throws -> Int64 {
        try handles.withLock { handles -> Int64 in
            guard case let (connection, _, _, _, _, statement)? = handles else { return 0 }
            defer {
                sqlite3_reset(statement)
                sqlite3_clear_bindings(statement)
            }
            let code = Self.step(statement, for: key)
            guard code == SQLITE_ROW else { throw Self.error(code, on: connection, sql: Self.newest) }
            return sqlite3_column_int64(statement, 0)
        }
    }

    /// Finalizes the statements and closes the connection; look-ups then find nothing. Closing again does nothing.
    func close() {
        guard case let (connection, lookup, exists, files, committed, newest)? = handles.withLock({ $0.take() }) else {
            return
        }
        sqlite3_finalize(newest)
        sqlite3_finalize(committed)
        sqlite3_finalize(lookup)
        sqlite3_finalize(exists)
        sqlite3_finalize(files)
        sqlite3_close_v2(connection)
    }

    /// Binds `key` to a statement's first two parameters and steps it.
    private static func step(_ statement: OpaquePointer, for key: JournalKey) -> Int32 {
        key.url.bind(statement, 1)
        key.destination.bind(statement, 2)
        return sqlite3_step(statement)
    }

    private static func prepare(_ sql: String, on connection: OpaquePointer) throws -> OpaquePointer {
        var statement: OpaquePointer?
        let code = sqlite3_prepare_v3(connection, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard code == SQLITE_OK, let statement else { throw error(code, on: connection, sql: sql) }
        return statement
    }

    private static func error(_ code: Int32, on connection: OpaquePointer, sql: String) -> DatabaseError {
        DatabaseError(
            resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(connection)), sql: sql)
    }
}
