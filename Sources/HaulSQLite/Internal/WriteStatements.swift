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
        /// A segmented partial's missing byte ranges in ``rangesText(_:)``'s form; `nil` for any other record (and in
        /// rows from before the column was added).
        var missingRanges: String?
        /// The ticket of the change the row holds, as read from the database (``ChangeOrder``); a row to write takes
        /// its change's instead.
        var ticket: Int64 = 0
    }

    private var connection: OpaquePointer?
    private var begin: OpaquePointer?
    private var commit: OpaquePointer?
    private var rollback: OpaquePointer?
    private var insert: OpaquePointer?
    private var remove: OpaquePointer?
    private var noteRemoval: OpaquePointer?
    private var noteTicket: OpaquePointer?
    private var dropRemovals: OpaquePointer?
    private var clock: OpaquePointer?
    private var noteBatch: OpaquePointer?
    private var forgetBatches: OpaquePointer?
    /// SQLite's clock when the transaction began: every row of a transaction gets it as `updatedAt`, formatted once.
    private var now = ""
    /// The sequence the last new key got: the highest in the table when the statements were prepared, then counted
    /// here (a query of the highest per write would read the whole table).
    private var nextSequence: Int64 = 0

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
    /// order in which keys were first stored): a new key gets the next sequence of this connection's. `updatedAt` is
    /// SQLite's clock at the start of the transaction.
    ///
    /// The change written last wins, by `ticket` (``ChangeOrder``): the row changes only if the record's change, or
    /// the record's removal, has a lower ticket than this one. The rule is this statement's and ``delete(_:ticket:)``'s.
    func upsert(_ row: Row, ticket: Int64) throws {
        let statement = insert
        row.url.bind(statement, 1)
        row.destination.bind(statement, 2)
        row.path.bind(statement, 3)
        row.state.bind(statement, 4)
        row.validator.bind(statement, 5)
        bind(statement, 6, row.totalBytes)
        bind(statement, 7, row.size)
        row.sha256.bind(statement, 8)
        bind(statement, 9, row.modifiedNanoseconds)
        bind(statement, 10, row.inode)
        row.request.bind(statement, 11)
        row.failure.bind(statement, 12)
        nextSequence += 1
        bind(statement, 13, nextSequence)
        now.bind(statement, 14)
        row.missingRanges.bind(statement, 15)
        sqlite3_bind_int64(statement, 16, ticket)
        try run(statement)
    }

    /// Deletes the tombstones with tickets up to `ticket`: no change at or below it is still to be committed.
    func dropRemovals(upTo ticket: Int64) throws {
        sqlite3_bind_int64(dropRemovals, 1, ticket)
        try run(dropRemovals)
    }

    /// Notes in the transaction that its changes' tickets reach `ticket`: a journal opening lifts the order file's
    /// counter above it (``ChangeOrder/lift(to:)``), should that file be missing.
    func noteTickets(upTo ticket: Int64) throws {
        sqlite3_bind_int64(noteTicket, 1, ticket)
        try run(noteTicket)
    }

    /// Notes in the transaction that journal `instance` committed its pending log's batch `batch` (see
    /// `PendingWrites`): that log is never committed again, even if its journal is killed before restarting it.
    func noteCommitted(instance: String, batch: UInt64) throws {
        instance.bind(noteBatch, 1)
        bind(noteBatch, 2, Int64(bitPattern: batch))
        try run(noteBatch)
    }

    /// Forgets what ``noteCommitted(instance:batch:)`` noted for `instance` (its logs are gone).
    func forget(instance: String) throws {
        instance.bind(forgetBatches, 1)
        try run(forgetBatches)
    }

    /// Deletes the record of `key`, unless its change has a higher ticket, and keeps the removal's ticket
    /// (a tombstone): a change to the key written before the removal and committed after it does not bring the record
    /// back. Tombstones go when no change older than them can still come (``SQLiteJournal``, at open).
    func delete(_ key: JournalKey, ticket: Int64) throws {
        for statement in [remove, noteRemoval] {
            key.url.bind(statement, 1)
            key.destination.bind(statement, 2)
            sqlite3_bind_int64(statement, 3, ticket)
            try run(statement)
        }
    }

    func finalize() {
        for statement in [
            begin, commit, rollback, insert, remove, noteRemoval, noteTicket, dropRemovals, clock, noteBatch,
            forgetBatches,
        ] {
            sqlite3_finalize(statement)
        }
        (begin, commit, rollback, insert, remove, clock, connection) = (nil, nil, nil, nil, nil, nil, nil)
        (noteRemoval, noteTicket, dropRemovals, noteBatch, forgetBatches) = (nil, nil, nil, nil, nil)
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
             request, failure, sequence, updatedAt, missingRanges, ticket)
            SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16
            WHERE NOT EXISTS (SELECT 1 FROM removal WHERE url = ?1 AND destination = ?2 AND ticket > ?16)
            ON CONFLICT (url, destination) DO UPDATE SET
            path = excluded.path, state = excluded.state, validator = excluded.validator,
            totalBytes = excluded.totalBytes, size = excluded.size, sha256 = excluded.sha256,
            modifiedNanoseconds = excluded.modifiedNanoseconds, inode = excluded.inode,
            request = excluded.request, failure = excluded.failure, updatedAt = excluded.updatedAt,
            missingRanges = excluded.missingRanges, ticket = excluded.ticket
            WHERE excluded.ticket > record.ticket
            """)
        remove = try make("DELETE FROM record WHERE url = ?1 AND destination = ?2 AND ticket < ?3")
        noteRemoval = try make(
            """
            INSERT INTO removal (url, destination, ticket) VALUES (?1, ?2, ?3)
            ON CONFLICT (url, destination) DO UPDATE SET ticket = excluded.ticket WHERE excluded.ticket > removal.ticket
            """)
        noteTicket = try make("UPDATE changeOrder SET last = ?1 WHERE last < ?1")
        dropRemovals = try make("DELETE FROM removal WHERE ticket <= ?1")
        clock = try make("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")
        noteBatch = try make(
            """
            INSERT INTO committedBatch (instance, batch) VALUES (?, ?)
            ON CONFLICT (instance) DO UPDATE SET batch = excluded.batch
            """)
        forgetBatches = try make("DELETE FROM committedBatch WHERE instance = ?")
        let last = try make("SELECT coalesce(max(sequence), 0) FROM record")
        defer { sqlite3_finalize(last) }
        nextSequence = sqlite3_step(last) == SQLITE_ROW ? sqlite3_column_int64(last, 0) : 0
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

/// Text the journal's statements bind: a Swift string (SQLite copies it), or nothing (NULL).
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

extension Optional: BindableText where Wrapped: BindableText {
    func bind(_ statement: OpaquePointer?, _ index: Int32) {
        guard let value = self else {
            sqlite3_bind_null(statement, index)
            return
        }
        value.bind(statement, index)
    }
}
