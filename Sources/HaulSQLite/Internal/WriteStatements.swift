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
        /// A segmented partial's missing byte ranges in ``rangesText(_:)``'s form; `nil` for any other record (and in
        /// rows from before the column was added).
        var missingRanges: String?
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
    ///
    /// A change older than the record it would replace is dropped, and so is a removal older than the record:
    /// logs reach the database in the order journals fold them (a killed process's log only when the next journal
    /// opens), not in the order their changes happened, and the newest change to a key must win.
    func upsert(_ row: Row) throws {
        try upsert(
            row.url, row.destination, row.path, row.state, row.validator, row.sha256, row.request, row.failure,
            totalBytes: row.totalBytes, size: row.size, modified: row.modifiedNanoseconds, inode: row.inode,
            sequence: row.sequence, changedAt: row.changedAt, missingRanges: row.missingRanges)
    }

    /// ``upsert(_:)-(Row)`` of a change straight from a log's bytes (valid until this returns: the statement is
    /// reset and its bindings cleared before it does).
    func upsert(_ change: RawChange) throws {
        try upsert(
            change.url, change.destination, change.path, change.state, change.validator, change.sha256,
            change.request, change.failure, totalBytes: change.totalBytes, size: change.size,
            modified: change.modifiedNanoseconds, inode: change.inode, sequence: change.sequence,
            changedAt: change.time, missingRanges: change.missingRanges)
    }

    /// The insert's columns, bound in its order, whether the text is strings or a log's bytes.
    private func upsert(
        _ url: some BindableText, _ destination: some BindableText, _ path: some BindableText,
        _ state: some BindableText, _ validator: some BindableText, _ sha256: some BindableText,
        _ request: some BindableText, _ failure: some BindableText, totalBytes: Int64?, size: Int64?,
        modified: Int64?, inode: Int64?, sequence: Int64, changedAt: Int64?, missingRanges: some BindableText
    ) throws {
        let statement = insert
        url.bind(statement, 1)
        destination.bind(statement, 2)
        path.bind(statement, 3)
        state.bind(statement, 4)
        validator.bind(statement, 5)
        bind(statement, 6, totalBytes)
        bind(statement, 7, size)
        sha256.bind(statement, 8)
        bind(statement, 9, modified)
        bind(statement, 10, inode)
        request.bind(statement, 11)
        failure.bind(statement, 12)
        bind(statement, 13, sequence)
        bind(statement, 14, changedAt)
        now.bind(statement, 15)
        missingRanges.bind(statement, 16)
        try run(statement)
    }

    /// ``delete(_:time:)`` of a removal straight from a log's bytes.
    func delete(_ change: RawChange) throws {
        try delete(change.url, change.destination, time: change.time)
    }

    func delete(_ key: JournalKey, time: Int64?) throws {
        try delete(key.url, key.destination, time: time)
    }

    private func delete(_ url: some BindableText, _ destination: some BindableText, time: Int64?) throws {
        url.bind(remove, 1)
        destination.bind(remove, 2)
        bind(remove, 3, time)
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
             request, failure, sequence, changedAt, updatedAt, missingRanges)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (url, destination) DO UPDATE SET
            path = excluded.path, state = excluded.state, validator = excluded.validator,
            totalBytes = excluded.totalBytes, size = excluded.size, sha256 = excluded.sha256,
            modifiedNanoseconds = excluded.modifiedNanoseconds, inode = excluded.inode,
            request = excluded.request, failure = excluded.failure, changedAt = excluded.changedAt,
            updatedAt = excluded.updatedAt, missingRanges = excluded.missingRanges
            WHERE excluded.changedAt IS NULL OR record.changedAt IS NULL OR excluded.changedAt >= record.changedAt
            """)
        remove = try make(
            "DELETE FROM record WHERE url = ?1 AND destination = ?2 AND (?3 IS NULL OR changedAt IS NULL OR changedAt <= ?3)"
        )
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

    private func bind(_ statement: OpaquePointer?, _ index: Int32, _ value: Int64?) {
        guard let value else {
            sqlite3_bind_null(statement, index)
            return
        }
        sqlite3_bind_int64(statement, index, value)
    }
}

extension WriteStatements.Row {
    /// `ranges` as the `missingRanges` column and the log keep them: `lower-upper` pairs (upper bound exclusive, in
    /// decimal) joined by commas, `"0-1048576,2097152-4194304"`; no ranges is the empty string. Text rather than a
    /// blob or a table of its own: a segmented download has a few ranges, a row and a frame stay readable with
    /// `sqlite3`, and the same string goes into the log and the database without another encoding. Bounds are byte
    /// offsets, never negative: a negative one would not read back (its record would be dropped as malformed).
    static func rangesText(_ ranges: [Range<Int64>]) -> String {
        ranges.map { "\($0.lowerBound)-\($0.upperBound)" }.joined(separator: ",")
    }

    /// The ranges of ``rangesText(_:)``'s text; `nil` for text it does not make (damaged, or written by something
    /// else), which the caller treats as a malformed row. Strict (decimal digits only, no sign, every bound within
    /// `Int64`, lower not above upper) so that nothing reaches `Range`'s precondition, which would crash.
    static func ranges(fromText text: String) -> [Range<Int64>]? {
        guard !text.isEmpty else { return [] }
        var ranges: [Range<Int64>] = []
        for pair in text.split(separator: ",", omittingEmptySubsequences: false) {
            let bounds = pair.split(separator: "-", omittingEmptySubsequences: false)
            guard bounds.count == 2, let lower = bound(bounds[0]), let upper = bound(bounds[1]), lower <= upper else {
                return nil
            }
            ranges.append(lower..<upper)
        }
        return ranges
    }

    /// A bound of ``ranges(fromText:)``: decimal digits only (`Int64(_:)` would also take a sign).
    private static func bound(_ digits: Substring) -> Int64? {
        guard !digits.isEmpty, digits.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else {
            return nil
        }
        return Int64(digits)
    }
}

private let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// Text the journal's statements bind: a Swift string (SQLite copies it), or bytes of a log that stay where they are
/// until the statement is reset (not copied), or nothing (NULL).
protocol BindableText {
    func bind(_ statement: OpaquePointer?, _ index: Int32)
}

extension String: BindableText {
    func bind(_ statement: OpaquePointer?, _ index: Int32) {
        // SQLITE_TRANSIENT: SQLite copies the bytes, the Swift string may go. Through the string's own UTF-8
        // storage with its length: passing the String as a C string made a null-terminated copy of each one first.
        // (An empty buffer may have no address, which SQLite would bind as NULL.)
        guard !isEmpty else {
            sqlite3_bind_text(statement, index, "", 0, transient)
            return
        }
        var text = self
        text.withUTF8 { bytes in
            _ = bytes.withMemoryRebound(to: CChar.self) {
                sqlite3_bind_text(statement, index, $0.baseAddress, Int32($0.count), transient)
            }
        }
    }
}

extension UnsafeRawBufferPointer: BindableText {
    func bind(_ statement: OpaquePointer?, _ index: Int32) {
        // SQLITE_STATIC (a nil destructor): SQLite reads the bytes where they are. An empty buffer may have no
        // address, which SQLite would bind as NULL.
        guard let start = baseAddress, !isEmpty else {
            sqlite3_bind_text(statement, index, "", 0, transient)
            return
        }
        sqlite3_bind_text(statement, index, start.assumingMemoryBound(to: CChar.self), Int32(count), nil)
    }
}

extension Optional: BindableText where Wrapped: BindableText {
    func bind(_ statement: OpaquePointer?, _ index: Int32) {
        guard let value = self else {
            sqlite3_bind_null(statement, index)
            return
        }
        value.bind(statement, index)
    }
}
