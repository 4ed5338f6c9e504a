import Foundation
import GRDB
import Haul
import HaulOperations

/// Where the daemon keeps its downloads across restarts: one SQLite database (DIR/.haul/daemon.sqlite) holding each
/// download's URIs, options, place in the waiting order, and how it ended.
///
/// A change is committed before the call that made it is answered, so a call that was answered is never lost, even
/// to a SIGKILL right after it. Secrets are never written: options that are passwords, and header fields that carry
/// secrets (`DownloadRequest.isSecretField(_:)`), stay in memory (a download that needed them comes back as failed,
/// saying so).
public final class DaemonStore: Sendable {
    private let database: DatabaseQueue

    /// One stored download.
    struct Row: Sendable, Equatable {
        var gid: GID
        var uris: [String]
        var options: [String: String]
        /// `waiting`, `paused` (waiting or active when stored), `removing` (removed by a call while it ran, its run
        /// not yet stopped: a restart ends it as removed), or how it ended: `complete`, `error`, `removed`.
        var state: String
        /// Its place among the unfinished ones (the waiting order, the active ones first).
        var rank: Int
        var path: String?
        var length: Int64 = 0
        var completed: Int64 = 0
        var errorCode: Int = 0
        var errorMessage: String = ""
        /// The order it stopped in, once it has.
        var stoppedOrder: Int?
        /// Whether secrets were left out of it (it cannot be fetched again as it was asked).
        var withheldSecrets = false
    }

    /// How many pages of the write-ahead log make a checkpoint (SQLite's default is 1,000).
    static let checkpointPages = 8192

    /// Throws when the store cannot be read: its file is gone, or a read fails (the daemon's `/readyz`).
    public func checkReadable() throws {
        let path = database.path
        guard FileManager.default.fileExists(atPath: path) else {
            throw CocoaError(.fileNoSuchFile, userInfo: [NSFilePathErrorKey: path])
        }
        _ = try database.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master") }
    }

    /// Opens (or creates) the store at `path`.
    public init(path: String) throws {
        var configuration = Configuration()
        configuration.journalMode = .wal
        // A commit survives the process (SIGKILL); a power loss may take the last ones, as it does aria2's session.
        // Only a checkpoint is synced, and on ext4 one sync forces out every file downloaded since the last: the
        // log is let grow to 32 MiB (the random keys of a burst of adds touch a page each) before one is made.
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            try db.execute(sql: "PRAGMA wal_autocheckpoint = \(Self.checkpointPages)")
            try db.execute(sql: "PRAGMA journal_size_limit = \(Self.checkpointPages * 4096)")
        }
        // Owner-only from the start: SQLite gives the -wal and -shm files it makes the database's mode. A store made
        // before with a wider mode is narrowed, its -wal and -shm files too.
        PrivateFile.createIfAbsent(path)
        database = try DatabaseQueue(path: path, configuration: configuration)
        for file in [path, path + "-wal", path + "-shm"] where FileManager.default.fileExists(atPath: file) {
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file)
        }
        var migrator = DatabaseMigrator()
        migrator.registerMigration("downloads") { db in
            try db.execute(
                sql: """
                    CREATE TABLE downloads (
                        gid TEXT PRIMARY KEY NOT NULL,
                        uris TEXT NOT NULL,
                        options TEXT NOT NULL,
                        state TEXT NOT NULL,
                        rank INTEGER NOT NULL,
                        path TEXT,
                        length INTEGER NOT NULL DEFAULT 0,
                        completed INTEGER NOT NULL DEFAULT 0,
                        error_code INTEGER NOT NULL DEFAULT 0,
                        error_message TEXT NOT NULL DEFAULT '',
                        stopped_order INTEGER,
                        withheld_secrets INTEGER NOT NULL DEFAULT 0
                    ) WITHOUT ROWID
                    """)
            try db.execute(sql: "CREATE INDEX downloads_stopped ON downloads(stopped_order)")
        }
        migrator.registerMigration("global options") { db in
            try db.execute(
                sql: "CREATE TABLE global_options (name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID")
        }
        migrator.registerMigration("hosts") { db in
            try db.execute(
                sql: """
                    CREATE TABLE hosts (
                        host TEXT PRIMARY KEY NOT NULL, max_connections INTEGER, paused INTEGER NOT NULL DEFAULT 0
                    ) WITHOUT ROWID
                    """)
        }
        // Rows in the order they were added, each found by its GID through an index of its own: keyed by the random
        // GID, each of a group of 256 adds (and then of their endings) wrote a page of the table of its own, ~1 MiB
        // of log per group. An ending is written over its row where it is.
        migrator.registerMigration("downloads in insertion order") { db in
            try db.execute(
                sql: """
                    CREATE TABLE downloads_by_order (
                        seq INTEGER PRIMARY KEY,
                        gid TEXT NOT NULL UNIQUE,
                        uris TEXT NOT NULL,
                        options TEXT NOT NULL,
                        state TEXT NOT NULL,
                        rank INTEGER NOT NULL,
                        path TEXT,
                        length INTEGER NOT NULL DEFAULT 0,
                        completed INTEGER NOT NULL DEFAULT 0,
                        error_code INTEGER NOT NULL DEFAULT 0,
                        error_message TEXT NOT NULL DEFAULT '',
                        stopped_order INTEGER,
                        withheld_secrets INTEGER NOT NULL DEFAULT 0
                    );
                    INSERT INTO downloads_by_order (gid, uris, options, state, rank, path, length, completed,
                        error_code, error_message, stopped_order, withheld_secrets)
                    SELECT gid, uris, options, state, rank, path, length, completed, error_code, error_message,
                        stopped_order, withheld_secrets
                    FROM downloads ORDER BY stopped_order IS NULL, stopped_order, rank;
                    DROP TABLE downloads;
                    ALTER TABLE downloads_by_order RENAME TO downloads;
                    CREATE INDEX downloads_stopped ON downloads(stopped_order);
                    """)
        }
        try migrator.migrate(database)
    }

    /// The hosts with settings of their own.
    func loadHosts() throws -> [(String, HostSettings)] {
        try reading { db in
            try GRDB.Row.fetchAll(db, sql: "SELECT host, max_connections, paused FROM hosts ORDER BY host").map {
                try (
                    $0.decode(forColumn: "host"),
                    HostSettings(limit: $0.decode(forColumn: "max_connections"), paused: $0.decode(forColumn: "paused"))
                )
            }
        }
    }

    /// Keeps the settings of `host` (none left: forgets it).
    func saveHost(_ host: String, limit: Int?, paused: Bool) throws {
        try writing { db in
            if limit == nil && !paused {
                try db.execute(sql: "DELETE FROM hosts WHERE host = ?", arguments: [host])
            } else {
                try db.execute(
                    sql: "INSERT OR REPLACE INTO hosts (host, max_connections, paused) VALUES (?, ?, ?)",
                    arguments: [host, limit, paused])
            }
        }
    }

    /// The global options changed with `changeGlobalOption`, as given (a cumulative one's values joined by newlines).
    func loadGlobalOptions() throws -> [String: String] {
        try reading { db in
            var options: [String: String] = [:]
            for row in try GRDB.Row.fetchAll(db, sql: "SELECT name, value FROM global_options") {
                let name: String = try row.decode(forColumn: "name")
                options[name] = try row.decode(String.self, forColumn: "value")
            }
            return options
        }
    }

    /// Keeps `options` (the global options a call changed), over those kept before, and forgets those named in
    /// `removed` (changed to a value that is not kept).
    func saveGlobalOptions(_ options: [String: String], removing removed: Set<String> = []) throws {
        try writing { db in
            for name in removed {
                try db.execute(sql: "DELETE FROM global_options WHERE name = ?", arguments: [name])
            }
            for (name, value) in options {
                try db.execute(
                    sql: "INSERT OR REPLACE INTO global_options (name, value) VALUES (?, ?)", arguments: [name, value])
            }
        }
    }

    /// The unfinished downloads, by rank.
    func loadUnfinished() throws -> [Row] {
        try rows("WHERE stopped_order IS NULL ORDER BY rank")
    }

    /// How many stopped downloads there are, and the last one's place in the order they stopped (0 for none).
    func stoppedCount() throws -> (count: Int, last: Int) {
        try reading { db in
            let row = try GRDB.Row.fetchOne(
                db,
                sql: "SELECT COUNT(*), COALESCE(MAX(stopped_order), 0) FROM downloads WHERE stopped_order IS NOT NULL")
            return (try row?.decode(Int.self, atIndex: 0) ?? 0, try row?.decode(Int.self, atIndex: 1) ?? 0)
        }
    }

    /// The stopped downloads from the `offset`-th (the oldest is the 0th), at most `limit`, oldest first.
    func stopped(offset: Int, limit: Int) throws -> [Row] {
        try rows("WHERE stopped_order IS NOT NULL ORDER BY stopped_order LIMIT ? OFFSET ?", [limit, offset])
    }

    /// The stopped download `gid`, if it is stored.
    func stopped(_ gid: GID) throws -> Row? {
        try rows("WHERE gid = ? AND +stopped_order IS NOT NULL", [gid.description]).first
    }

    /// The GIDs of stored stopped downloads starting with `prefix` (lowercase hex), at most `limit`: a range of the
    /// GIDs' index (`+` keeps the planner off the stopped order's, which would read every stopped row).
    func stoppedGIDs(prefix: String, limit: Int) throws -> [GID] {
        try reading { db in
            try String.fetchAll(
                db,
                sql: "SELECT gid FROM downloads WHERE gid >= ? AND gid < ? AND +stopped_order IS NOT NULL LIMIT ?",
                arguments: [prefix, prefix + "g", limit]
            ).compactMap { GID(hex: $0) }
        }
    }

    /// The stopped downloads whose state is in `states` (all for `nil`), newest first, that `matches` takes (it is
    /// asked only of those whose path, URIs or options hold `text`, lowercase): how many, and the page of `limit` from
    /// `offset`. Read one at a time: a search of a long history keeps only its page in memory.
    func history(
        states: Set<String>?, holding text: String, order: HistoryOrder = .newest, offset: Int, limit: Int,
        matching matches: (Row) -> Bool
    ) throws -> (total: Int, page: [Row]) {
        var conditions = ["stopped_order IS NOT NULL"]
        var arguments: [(any DatabaseValueConvertible)?] = []
        if let states {
            conditions.append("state IN (\(states.map { _ in "?" }.joined(separator: ", ")))")
            arguments += states.sorted().map { $0 }
        }
        let filter = "WHERE " + conditions.joined(separator: " AND ")
        if text.isEmpty {
            let total = try reading { db in
                try Int.fetchOne(
                    db, sql: "SELECT COUNT(*) FROM downloads " + filter, arguments: StatementArguments(arguments))
            }
            guard order.key != .stopped else {
                let page = try rows(
                    filter + " ORDER BY \(order.sql(scanning: false)) LIMIT ? OFFSET ?",
                    StatementArguments(arguments + [limit, offset]))
                return (total ?? 0, page)
            }
            // Sorted by anything else, the page comes from one scan of the table and a sort, not from a walk of the
            // stopped order's index looking up every row in the table. The sort keeps the page's row numbers only,
            // then the page's rows are read: the table is in the order rows were added, so a sort whose ties go
            // newest first takes nearly every row it scans into the page it keeps, and whole rows cost it a copy each.
            var pageConditions = conditions
            pageConditions[0] = "+stopped_order IS NOT NULL"
            let sort = " ORDER BY \(order.sql(scanning: true))"
            let page = try rows(
                "WHERE seq IN (SELECT seq FROM downloads WHERE " + pageConditions.joined(separator: " AND ") + sort
                    + " LIMIT ? OFFSET ?)" + sort,
                StatementArguments(arguments + [limit, offset]))
            return (total ?? 0, page)
        }
        // A search reads every row once and sorts the few that match: walking the index of the stopped order instead
        // would look up every row in the table (the unary `+` keeps the planner off it).
        // LIKE is case-blind for ASCII as SQLite's lower() is; the Swift check after it decides.
        // The pattern is ?1, before the states' parameters, which number on from it.
        var scanned = ["+stopped_order IS NOT NULL"]
        scanned.append("(path LIKE ?1 ESCAPE '\\' OR uris LIKE ?1 ESCAPE '\\' OR options LIKE ?1 ESCAPE '\\')")
        scanned += conditions.dropFirst()
        let narrowed = "WHERE " + scanned.joined(separator: " AND ") + " ORDER BY \(order.sql(scanning: true))"
        let pattern =
            "%"
            + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "%", with: "\\%")
            .replacingOccurrences(of: "_", with: "\\_") + "%"
        return try reading { db in
            let cursor = try GRDB.Row.fetchCursor(
                db, sql: "SELECT * FROM downloads " + narrowed, arguments: StatementArguments([pattern] + arguments))
            var total = 0
            var page: [Row] = []
            while let stored = try cursor.next() {
                guard let row = try Self.row(stored), matches(row) else { continue }
                if total >= offset, page.count < limit { page.append(row) }
                total += 1
            }
            return (total, page)
        }
    }

    /// The order of a page of the history.
    struct HistoryOrder: Sendable, Equatable {
        enum Key: String, Sendable { case stopped, path, size }
        var key: Key
        var descending: Bool

        static let newest = HistoryOrder(key: .stopped, descending: true)

        /// The `ORDER BY` clause, ties broken by the newest first so that a page is always the same page; `scanning`
        /// keeps the planner off the index of the stopped order (`+`).
        func sql(scanning: Bool) -> String {
            let direction = descending ? "DESC" : "ASC"
            let stopped = scanning ? "+stopped_order" : "stopped_order"
            switch key {
            case .stopped: return "\(stopped) \(direction)"
            case .path: return "lower(path) \(direction), \(stopped) DESC"
            case .size: return "length \(direction), \(stopped) DESC"
            }
        }
    }

    /// The stopped downloads that failed, in the order they stopped.
    func failed() throws -> [Row] {
        try rows("WHERE stopped_order IS NOT NULL AND state = 'error' ORDER BY stopped_order")
    }

    private func rows(_ clause: String, _ arguments: StatementArguments = []) throws -> [Row] {
        try reading { db in
            try GRDB.Row.fetchAll(db, sql: "SELECT * FROM downloads " + clause, arguments: arguments).compactMap(
                Self.row)
        }
    }

    /// The download a row holds; throws, naming the column and the value, when a value is not of its column's type
    /// (a damaged or edited store: SQLite keeps what it is given).
    private static func row(_ row: GRDB.Row) throws -> Row? {
        guard let gid = GID(hex: try row.decode(forColumn: "gid")) else { return nil }
        return Row(
            gid: gid, uris: strings(try row.decode(forColumn: "uris")),
            options: options(try row.decode(forColumn: "options")), state: try row.decode(forColumn: "state"),
            rank: try row.decode(forColumn: "rank"), path: try row.decode(forColumn: "path"),
            length: try row.decode(forColumn: "length"), completed: try row.decode(forColumn: "completed"),
            errorCode: try row.decode(forColumn: "error_code"),
            errorMessage: try row.decode(forColumn: "error_message"),
            stoppedOrder: try row.decode(forColumn: "stopped_order"),
            withheldSecrets: try row.decode(forColumn: "withheld_secrets"))
    }

    /// The rows of downloads that ended, gathered for a while and written together (``saveSoon(_:onError:)``).
    private struct Pending {
        var rows: [Row] = []
        /// Whether a write of them is on its way, ``gathering`` after the first.
        var scheduled = false
        /// Whether a write is on its way after one failed (``retryDelay(after:)``).
        var retryScheduled = false
        /// How many writes of them failed in a row.
        var failures = 0
        /// What to tell of a failure to write them.
        var onError: (@Sendable (String) -> Void)?
        /// What waits for them to be written (``whenWritten(_:)``).
        var waiting: [@Sendable () -> Void] = []
    }

    private let pending = Locked(Pending())
    /// Held while pending rows are written: whatever is done to the store after them waits until they are in it.
    /// Its value counts the transactions that wrote them (a lock on a value of no size would share the mutex's
    /// address, which ThreadSanitizer takes for a race).
    private let writingPending = Locked(0)
    /// How long ended downloads' rows are gathered before they are written in one transaction: thousands of small
    /// files end each second, and a transaction for each cost the daemon more than the downloads did.
    static let gathering: DispatchTimeInterval = .milliseconds(20)

    /// How long after the `failures`-th write in a row that failed the rows are tried again: a second, doubling up
    /// to a minute (a full disk is not freed at once).
    static func retryDelay(after failures: Int) -> DispatchTimeInterval {
        .seconds(min(1 << min(max(failures, 1) - 1, 6), 60))
    }

    /// Writes `row`, a download that ended, within ``gathering`` together with the others ending meanwhile. Every
    /// other use of the store writes it first (a removal of the download follows its row, never precedes it);
    /// ``flush()`` writes it at once. No call waits on it; a notification of it does (``whenWritten(_:)``), so a
    /// SIGKILL never takes back an ending a client was notified of. A write that fails keeps its rows, to be tried
    /// again (``retryDelay(after:)``) and before every other use of the store; their notifications wait for them.
    func saveSoon(_ row: Row, onError: @escaping @Sendable (String) -> Void) {
        let schedule = pending.withLock { pending in
            pending.rows.append(row)
            pending.onError = onError
            // After a failed write, the retry takes it.
            guard !pending.scheduled, pending.failures == 0 else { return false }
            pending.scheduled = true
            return true
        }
        if schedule {
            DispatchQueue.global().asyncAfter(deadline: .now() + Self.gathering) { [self] in writePending() }
        }
    }

    /// Writes the endings of downloads gathered to be written together, now (the daemon does at close, and before
    /// an answer that can show an ending); returns once every ending given before the call is written or its write
    /// failed.
    public func flush() { writePending() }

    /// Where what waits for endings to be written runs, in the order it asked, never under a lock of the store's or
    /// of whoever made the write (any read or write of the store writes the endings first).
    let afterWrites = DispatchQueue(label: "haul.daemon-store.after-writes")

    /// Runs `body` on ``afterWrites`` once every ending gathered so far is written: at once if none is waiting, else
    /// after the write that takes them.
    func whenWritten(_ body: @escaping @Sendable () -> Void) {
        // Under the writer's lock a write under way has finished: rows still gathered are written by the next.
        writingPending.withLock { _ in
            pending.withLock { pending in
                if pending.rows.isEmpty { afterWrites.async(execute: body) } else { pending.waiting.append(body) }
            }
        }
    }

    /// How many writes of the gathered endings failed in a row (0 once one succeeds): for tests.
    var failedWrites: Int { pending.withLock { $0.failures } }

    /// A failure to write the gathered endings, to be told once the locks are let go.
    private typealias Failure = (message: String, tell: @Sendable (String) -> Void)

    /// Writes the gathered endings; `retrying` says the call is the one a failed write scheduled.
    private func writePending(retrying: Bool = false) {
        let failure = writingPending.withLock { written in writeGathered(retrying: retrying, written: &written) }
        // Told after the lock: the caller's code never runs under it.
        if let failure { failure.tell(failure.message) }
    }

    /// ``writePending(retrying:)`` under ``writingPending`` (`written` its count); returns a failure to tell.
    private func writeGathered(retrying: Bool, written: inout Int) -> Failure? {
        // What waits now waits for these rows: another waits only once its row is gathered, and not during a write
        // (the lock held).
        let (rows, waiting, onError) = pending.withLock { pending in
            pending.scheduled = false
            if retrying { pending.retryScheduled = false }
            // Nothing left of a failure (its rows superseded since): rows to come are gathered as usual.
            if pending.rows.isEmpty { pending.failures = 0 }
            defer { pending.waiting = [] }
            return (pending.rows, pending.waiting, pending.onError)
        }
        guard !rows.isEmpty else {
            release(waiting)
            return nil
        }
        do {
            try database.write { db in try Self.putEndings(rows, in: db) }
            written += 1
        } catch {
            // Kept (rows gathered meanwhile after them) with what waits for them, and tried again later.
            let (failures, schedule) = pending.withLock { pending in
                pending.failures += 1
                pending.waiting.insert(contentsOf: waiting, at: 0)
                defer { pending.retryScheduled = true }
                return (pending.failures, !pending.retryScheduled)
            }
            if schedule {
                // Not kept alive by its retries: a store let go of gives up what it could not write.
                DispatchQueue.global().asyncAfter(deadline: .now() + Self.retryDelay(after: failures)) {
                    [weak self] in self?.writePending(retrying: true)
                }
            }
            // Told as it starts, and as each retry of its own fails (not at every answer that tries first).
            guard failures == 1 || retrying else { return nil }
            let count = "\(rows.count) download\(rows.count == 1 ? "" : "s")"
            return onError.map { ("cannot record how \(count) ended: \(error); trying again", $0) }
        }
        // Released before the failures are forgotten: whoever sees none pending finds them on their way.
        release(waiting)
        pending.withLock { pending in
            pending.rows.removeFirst(rows.count)
            pending.failures = 0
            // Rows gathered while a write failed get a write of their own.
            if !pending.rows.isEmpty, !pending.scheduled {
                pending.scheduled = true
                DispatchQueue.global().asyncAfter(deadline: .now() + Self.gathering) { [self] in writePending() }
            }
        }
        return nil
    }

    /// Writes `rows` (a new download, or one that changed) and removes `removed`, in one transaction.
    func save(_ rows: [Row], removing removed: [GID] = []) throws {
        // An add's rows are new: no ending gathered is of them.
        let superseded: ((Row) -> Bool)? = removed.isEmpty ? nil : { removed.contains($0.gid) }
        try writing(superseding: superseded) { db in try Self.put(rows, removing: removed, in: db) }
    }

    /// Every read of the store: what was gathered to be written is written first.
    private func reading<T>(_ body: (Database) throws -> T) throws -> T {
        writePending()
        return try database.read(body)
    }

    /// Every write of the store but the gathered rows' own: those are written first, so that nothing done after
    /// them (a removal of a download that just ended) lands before them. A write that removes rows drops the
    /// gathered endings `superseded` takes, which a later retry would otherwise write back: the gathered rows' write,
    /// this one and the drop then all under ``writingPending``, so that no retry comes between (the downloads' ends,
    /// which take that lock to be told, wait for it).
    private func writing<T>(superseding superseded: ((Row) -> Bool)? = nil, _ body: (Database) throws -> T) throws
        -> T
    {
        guard let superseded else {
            writePending()
            return try database.write(body)
        }
        let (result, failure) = writingPending.withLock { written -> (Result<T, any Error>, Failure?) in
            let failure = writeGathered(retrying: false, written: &written)
            let result = Result { try database.write(body) }
            if case .success = result { forget(superseded) }
            return (result, failure)
        }
        if let failure { failure.tell(failure.message) }
        return try result.get()
    }

    /// Drops the gathered endings `superseded` takes (under ``writingPending``); what waited for them goes once none
    /// is left.
    private func forget(_ superseded: (Row) -> Bool) {
        let waiting = pending.withLock { pending -> [@Sendable () -> Void] in
            guard !pending.rows.isEmpty else { return [] }
            pending.rows.removeAll(where: superseded)
            guard pending.rows.isEmpty else { return [] }
            pending.failures = 0
            defer { pending.waiting = [] }
            return pending.waiting
        }
        release(waiting)
    }

    /// Sends `waiting` on its way to ``afterWrites`` (called under ``writingPending``: queued in the order of the
    /// writes, run after them).
    private func release(_ waiting: [@Sendable () -> Void]) {
        if !waiting.isEmpty { afterWrites.async { for body in waiting { body() } } }
    }

    private static func put(_ rows: [Row], removing removed: [GID], in db: Database) throws {
        // Prepared once per connection: a group of hundreds of rows is bound and stepped, not parsed each time. A row
        // already stored is changed where it is, keeping its place in the order rows were added.
        let insert = try db.cachedStatement(
            sql: """
                INSERT INTO downloads (gid, uris, options, state, rank, path, length, completed,
                    error_code, error_message, stopped_order, withheld_secrets)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (gid) DO UPDATE SET uris = excluded.uris, options = excluded.options,
                    state = excluded.state, rank = excluded.rank, path = excluded.path, length = excluded.length,
                    completed = excluded.completed, error_code = excluded.error_code,
                    error_message = excluded.error_message, stopped_order = excluded.stopped_order,
                    withheld_secrets = excluded.withheld_secrets
                """)
        for row in rows {
            try insert.execute(
                arguments: [
                    row.gid.description, Self.text(.array(row.uris.map(JSON.string))),
                    Self.text(.object(row.options.mapValues(JSON.string))), row.state, row.rank,
                    row.path, row.length, row.completed, row.errorCode, row.errorMessage, row.stoppedOrder,
                    row.withheldSecrets,
                ])
        }
        for gid in removed {
            try db.execute(sql: "DELETE FROM downloads WHERE gid = ?", arguments: [gid.description])
        }
    }

    /// Writes `rows`, downloads that ended, over their stored rows: only the columns an ending changes (its URIs and
    /// options were written when it was added, and re-encoding them cost more than the rest of the write). A row not
    /// found is written whole.
    private static func putEndings(_ rows: [Row], in db: Database) throws {
        let update = try db.cachedStatement(
            sql: """
                UPDATE downloads SET state = ?, path = ?, length = ?, completed = ?, error_code = ?,
                    error_message = ?, stopped_order = ?
                WHERE gid = ?
                """)
        var missing: [Row] = []
        for row in rows {
            try update.execute(
                arguments: [
                    row.state, row.path, row.length, row.completed, row.errorCode, row.errorMessage, row.stoppedOrder,
                    row.gid.description,
                ])
            if db.changesCount == 0 { missing.append(row) }
        }
        if !missing.isEmpty { try put(missing, removing: [], in: db) }
    }

    /// Sets the ranks of unfinished downloads (their new waiting order) and, where given, their state. A download
    /// that has stopped keeps how it ended (its ending may be written just before, by the download's own end), and one
    /// being removed stays so (a pause of all that comes after the removal does not make it paused).
    func update(ranks: [(GID, Int)], states: [GID: String] = [:]) throws {
        try writing { db in
            for (gid, rank) in ranks {
                try db.execute(sql: "UPDATE downloads SET rank = ? WHERE gid = ?", arguments: [rank, gid.description])
            }
            for (gid, state) in states {
                try db.execute(
                    sql: """
                        UPDATE downloads SET state = ? WHERE gid = ? AND stopped_order IS NULL AND state != 'removing'
                        """,
                    arguments: [state, gid.description])
            }
        }
    }

    /// Sets options kept for an unfinished download (`changeOption`: none of them a secret); one that stopped keeps
    /// its row as it ended, and one being removed its state.
    func updateOptions(of gid: GID, setting changes: [String: String]) throws {
        try writing { db in
            let stored = try String.fetchOne(
                db, sql: "SELECT options FROM downloads WHERE gid = ? AND stopped_order IS NULL",
                arguments: [gid.description])
            guard let stored else { return }
            var options = (try? JSON.parse(Array(stored.utf8)))?.object ?? [:]
            for (name, value) in DownloadPlan.withoutSecrets(changes) { options[name] = .string(value) }
            try db.execute(
                sql: "UPDATE downloads SET options = ? WHERE gid = ? AND stopped_order IS NULL",
                arguments: [Self.text(.object(options)), gid.description])
        }
    }

    /// Sets the URIs kept for an unfinished download (`changeUri`; without user info); one that stopped keeps its row
    /// as it ended.
    func updateURIs(of gid: GID, to uris: [String], withheldSecrets: Bool) throws {
        try writing { db in
            try db.execute(
                sql: "UPDATE downloads SET uris = ?, withheld_secrets = ? WHERE gid = ? AND stopped_order IS NULL",
                arguments: [Self.text(.array(uris.map(JSON.string))), withheldSecrets, gid.description])
        }
    }

    /// Removes the stopped downloads up to the `last` to stop: one that stopped after it (while the purge was on its
    /// way here) is kept, as the history in memory keeps it.
    func purgeStopped(upTo last: Int) throws {
        try writing(superseding: { ($0.stoppedOrder ?? .max) <= last }) { db in
            try db.execute(
                sql: "DELETE FROM downloads WHERE stopped_order IS NOT NULL AND stopped_order <= ?", arguments: [last])
        }
    }

    // URIs and options are kept as JSON text, written and read with the daemon's own JSON (a store written with
    // Foundation's encoder, `/` escaped, reads the same).
    private static func text(_ value: JSON) -> String { String(decoding: value.encoded(), as: UTF8.self) }

    private static func strings(_ text: String) -> [String] {
        (try? JSON.parse(Array(text.utf8)))?.array?.compactMap(\.string) ?? []
    }

    private static func options(_ text: String) -> [String: String] {
        (try? JSON.parse(Array(text.utf8)))?.object?.compactMapValues(\.string) ?? [:]
    }
}
