import Foundation
import GRDB
import GRDBSQLite
import HaulOperations
import Synchronization
public import Haul

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The journal in an SQLite database (GRDB, WAL): what `haul get` keeps in `DIR/.haul/journal.sqlite`.
///
/// A write is an append to a log beside the database (`journal.sqlite-log.*`, one per open journal): on Linux a
/// copy into the log's shared mapping, elsewhere one `write(2)`. Every 4,096 changes the journal starts a new log
/// (made ahead, its space reserved and its pages made writable, on that thread) and folds the full one into the
/// database in one transaction, in the background on a thread of the lowest priority (in time the downloads leave
/// idle), then deletes it; closing the journal folds the rest, and a log left
/// by a killed process is folded by the next journal that opens the database. A transaction per download (BEGIN, WAL
/// pages, COMMIT, four `fcntl` locks) would cost a large share of a batch of small files (bench/journal). How far a written
/// record survives follows `durability`, like the engine's files:
/// - `Downloader.Durability.processCrash` (the default): nothing is `fsync`ed (`synchronous = OFF` for the
///   database). A record survives the process being killed at any instant: it is in the log, in the page cache.
///   On ext4 one `fsync` forces out every file written since the last one, which a batch of small downloads would
///   pay for again and again. After a power loss the database may be unreadable; opening it then fails with a
///   message naming it (delete it: only resumability is lost).
/// - `Downloader.Durability.powerLoss`: every append is `fsync`ed and the database is `synchronous = FULL`.
///
/// A look-up is one query by the table's key, so what the journal holds in memory grows with the changes not folded
/// yet (a few thousand), never with the number of records: a rerun of a list of a million downloads skips each
/// completed one at the same cost.
///
/// Other processes: a journal opened while another is open on the same database sees what that one had written
/// (its log is read, not folded); what it writes later is seen by journals opened after, and may be seen by this one
/// once it is folded into the database.
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
    /// The writer connection's prepared statements (used only inside the pool's writer, one caller at a time).
    private let statements: WriteStatements
    /// The look-ups' connection.
    private let query: RecordQuery
    /// Whether a look-up asks the database: not when it was empty at open and this instance does not remember its
    /// writes (then nothing there is anything a look-up may answer with).
    private let queriesDatabase: Bool
    private let path: String
    /// Whether every append is `fsync`ed (`Downloader.Durability.powerLoss`).
    private let syncEachAppend: Bool
    /// This journal's changes not folded yet and its log, under one lock so that the log has the changes in the
    /// order look-ups see them.
    private let state: Locked<State>
    /// The `sequence` the next new key gets (taken before the lock: a change is encoded before it is held).
    private let nextSequence: Atomic<Int64>

    private struct State {
        /// What the other journals open at open had changed (their logs' changes in time order over the database's
        /// rows), for the keys their logs hold, `nil` for a key they removed: read once, as large as those logs. A key
        /// this journal writes leaves it (``writes``, then the database, has the newer record).
        var others: [CacheKey: JournalRecord?]
        /// This journal's changes that may not be in the database yet, by log: a look-up finds them before the
        /// database, and they go once their log is folded.
        var writes: UnfoldedWrites
        /// This journal's current log, where every change goes first.
        var log: IntentLog
        /// The number of ``log`` among this journal's logs, which ``writes`` knows its changes by.
        var generation = 0
        /// The changes in `log`, which decides when it is folded.
        var changes = 0
        /// Full logs not folded yet with their numbers, oldest first: they must reach the database in this order (a
        /// later change to a key wins), whichever caller's job gets onto the folding queue first.
        var unfolded: [(log: IntentLog, generation: Int)] = []
        /// Whether the journal was finished (its log folded).
        var finished = false
        /// How many logs were folded into the database (and left memory).
        var folds = 0
        /// A log made ahead on the folding thread (``prepareSpare()``), which the next rotation starts.
        var spare: IntentLog?
        /// Whether a spare is being made, or cannot be (then rotations make their logs themselves).
        var makingSpare = false
        var sparesFail = false
    }

    /// A key with its hash worked out once, when the caller makes it, outside the lock: growing a dictionary of
    /// keys rehashes every key under the lock (5 ms a run for 10,000 string pairs, the other loop waiting), and a
    /// probe compared the strings of every key it passed (URLs of one length: a `memcmp` each) where the hashes
    /// differ.
    struct CacheKey: Hashable {
        let key: JournalKey
        let hash: Int

        init(_ key: JournalKey) {
            self.key = key
            hash = key.hashValue
        }

        func hash(into hasher: inout Hasher) { hasher.combine(hash) }
        static func == (lhs: Self, rhs: Self) -> Bool { lhs.hash == rhs.hash && lhs.key == rhs.key }
    }

    /// Folds full logs into the database one after another, off the writing callers' threads, at the lowest
    /// priority: in time the downloads leave idle.
    private let folding = BackgroundThread(name: "haul.journal.fold")
    /// A log is folded into the database once it holds this many changes.
    private let foldThreshold: Int
    private let afterRotating: (@Sendable () -> Void)?
    /// Whether look-ups see this instance's writes (see the `remembersWrites` parameter of the package initialiser).
    private let remembersWrites: Bool
    /// Whether other journals open at open had changed anything (``State/others`` was not empty then).
    private let othersAtOpen: Bool
    /// ``foldThreshold`` unless a test sets another: 4,096 changes, a log of ~1 MB. Folding in the background while
    /// downloads run fills gaps the network leaves, where one fold of everything at close would run alone at the end
    /// (bench/journal). The fold reads the log back; until it commits, look-ups find the log's changes in memory.
    package static let defaultFoldThreshold = 4096

    /// Opens (creating if needed, with its directory) the journal at `path`.
    ///
    /// - Parameters:
    ///   - path: the database file; its directory is created if missing.
    ///   - durability: how far a committed record must survive (see the type's discussion); give it the
    ///     downloader's `Downloader.Configuration.durability`.
    ///   - onError: called when a later read or write fails (the download goes on; only what a later run can
    ///     resume or skip is affected). By default errors are dropped.
    /// - Throws: ``JournalOpenError`` when the database cannot be opened or migrated (its reason, and a message
    ///   naming the path).
    public convenience init(
        path: String, durability: Downloader.Durability = .processCrash,
        onError: @escaping @Sendable (any Error) -> Void = { _ in }
    ) throws {
        try self.init(path: path, durability: durability, foldThreshold: Self.defaultFoldThreshold, onError: onError)
    }

    /// Opens the journal at `path`, folding its log into the database every `foldThreshold` changes.
    ///
    /// Without `remembersWrites`, ``record(for:)`` answers for a key written since the journal was opened either
    /// as unknown or with what was written (never with an older record): unknown until the log holding the write is
    /// folded, then from the database (always unknown when the database was empty at open: then no look-up asks it,
    /// and no key is kept). Its write still reaches the log and the database. That suits a process that looks each
    /// download up once, before it writes it, and never after, which `haul get` is: it keeps the keys of the logs not
    /// folded yet, not their records (bench/compare, s3: peak RSS).
    ///
    /// `afterRotating` (tests): called by a writer that started a new log, after it let go of the lock and before
    /// it queues the full log's fold.
    package init(
        path: String, durability: Downloader.Durability = .processCrash,
        foldThreshold: Int = SQLiteJournal.defaultFoldThreshold, remembersWrites: Bool = true,
        onError: @escaping @Sendable (any Error) -> Void = { _ in }, afterRotating: (@Sendable () -> Void)? = nil
    ) throws {
        self.foldThreshold = max(1, foldThreshold)
        self.afterRotating = afterRotating
        self.remembersWrites = remembersWrites
        // Owner-only from the start, the directory made for it too (SQLite gives its -wal and -shm files the
        // database's mode): requests are stored with their URLs and header fields, which are nobody else's business
        // even without credentials (those are never encoded).
        try JournalOpenError.mapping(path) {
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
        }
        let descriptor = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        if descriptor >= 0 { close(descriptor) }
        var configuration = Configuration()
        configuration.label = "haul-journal"
        let synchronous = durability == .powerLoss ? "FULL" : "OFF"
        configuration.prepareDatabase { db in
            // Changes arrive in folds of thousands, so pages are SQLite's default 4 KiB (no effect on an existing
            // database): a fold of 4,096 records then writes ~4 times fewer WAL frames than with the 1 KiB pages
            // that suited one transaction per record.
            try db.execute(sql: "PRAGMA page_size = 4096")
            try db.execute(sql: "PRAGMA synchronous = \(synchronous)")
            #if canImport(Darwin)
            // fsync(2) on Darwin leaves the data in the drive's cache: F_FULLFSYNC for the database and its checkpoints
            // (SQLite's own switches for it), as for the downloads' files.
            if synchronous == "FULL" {
                try db.execute(sql: "PRAGMA fullfsync = ON")
                try db.execute(sql: "PRAGMA checkpoint_fullfsync = ON")
            }
            #endif
            // Checkpoints (WAL into the database) happen in the folds, in the background, every ~4 MiB of WAL;
            // the one left for closing the journal is small.
            try db.execute(sql: "PRAGMA wal_autocheckpoint = 1000")
        }
        // Another process (a second `haul get` on the same directory) waits for the lock instead of failing.
        configuration.busyMode = .timeout(10)
        pool = try JournalOpenError.mapping(path) {
            try Self.openPool(path: path, configuration: configuration, synchronous: synchronous)
        }
        self.onError = onError
        self.path = path
        let statements = WriteStatements()
        self.statements = statements
        // Logs of journals that were never closed (a killed process): into the database, then gone.
        let others = IntentLog.others(of: path, takingDead: true)
        defer { for descriptor in others.dead.descriptors { close(descriptor) } }
        let pool = pool
        try JournalOpenError.mapping(path) { try Self.apply(others.dead.operations, on: pool, with: statements) }
        for dead in others.dead.paths { unlink(dead) }
        let query = try JournalOpenError.mapping(path) { try RecordQuery(path: path) }
        self.query = query
        // Empty at open, and this instance's own folded writes are not to be read back: no look-up can find a
        // record in the database (bench/compare, list rows: a first run's look-ups would queue on one connection).
        queriesDatabase = try remembersWrites || JournalOpenError.mapping(path) { try query.lastSequence() } > 0
        let (otherRecords, lastSequence) = try JournalOpenError.mapping(path) {
            try Self.resolve(others.live, with: query)
        }
        syncEachAppend = durability == .powerLoss
        nextSequence = Atomic(lastSequence + 1)
        let log = try JournalOpenError.mapping(path) {
            try IntentLog(databasePath: path, reserving: Self.preparedLogSize)
        }
        othersAtOpen = !otherRecords.isEmpty
        state = Locked(State(others: otherRecords, writes: UnfoldedWrites(generation: 0), log: log))
        // The downloads start writing at once; the pages they will write are made writable meanwhile.
        folding.async { [state] in
            if !state.withLock({ $0.finished }) { log.prefault() }
        }
    }

    /// Opens the database, in WAL mode and migrated, waiting up to `patience` for another process that holds it.
    ///
    /// Processes opening one journal take turns, by an exclusive `flock` on its directory for the length of the
    /// open: two that found no migration applied would otherwise both run them, and the second fail ("table
    /// already exists"). The busy timeout covers the waits after that, but not all: SQLite can answer `SQLITE_BUSY`
    /// straight away (turning WAL on while another connection reads), so those attempts are made again, as a whole,
    /// until `patience` runs out.
    private static func openPool(
        path: String, configuration: Configuration, synchronous: String, patience: Duration = .seconds(10)
    ) throws -> DatabasePool {
        let deadline = ContinuousClock.now + patience
        let directory = (path as NSString).deletingLastPathComponent
        let lock = open(directory.isEmpty ? "." : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { if lock >= 0 { close(lock) } }  // closing lets the next one in
        while lock >= 0, flock(lock, LOCK_EX | LOCK_NB) != 0, errno == EWOULDBLOCK || errno == EINTR {
            guard ContinuousClock.now < deadline else {
                throw DatabaseError(resultCode: .SQLITE_BUSY, message: "another process is opening the journal")
            }
            Thread.sleep(forTimeInterval: 0.005)
        }
        while true {
            do {
                let pool = try DatabasePool(path: path, configuration: configuration)
                // Again on the writer: GRDB sets NORMAL there when it turns WAL on, after prepareDatabase.
                try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = \(synchronous)") }
                try migrator.migrate(pool)
                return pool
            } catch let error as DatabaseError
                where error.resultCode == .SQLITE_BUSY || error.resultCode == .SQLITE_LOCKED
            {
                guard ContinuousClock.now < deadline else { throw error }
                Thread.sleep(forTimeInterval: 0.02)
            }
        }
    }

    /// What a log made ahead reserves and prefaults: about a fold's 4,096 changes of downloads (~1 MB).
    private static let preparedLogSize = 1 << 20

    private static var migrator: DatabaseMigrator {
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
        // When each change was written, so that the changes still in another open journal's log can be ordered
        // against the database's rows.
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
        return migrator
    }

    deinit {
        finish()
    }

    /// Folds what is left of the log into the database now, as the journal's end would: for a process that exits
    /// without releasing the journal (the `haul` command, which leaves freeing its memory to the system). The
    /// journal must not be written to afterwards. Finishing again does nothing.
    package func finish() {
        let last = state.withLock { state -> (log: IntentLog, generation: Int)? in
            guard !state.finished else { return nil }
            state.finished = true
            return (state.log, state.generation)
        }
        guard let last else { return }
        folding.drain()  // the full logs, oldest first, before the last one
        // Full logs whose job is not queued yet (a write racing with the end) are older than the last one too.
        let (left, spare) = state.withLock { state in
            defer { (state.unfolded, state.spare) = ([], nil) }
            return (state.unfolded, state.spare)
        }
        spare?.remove()
        for full in left + [last] {
            Self.fold(
                full.log, generation: full.generation, into: pool, with: statements, state: state, onError: onError)
        }
        // Finalized before the pool closes the connection, which would otherwise report them as unfinalized.
        pool.writeWithoutTransaction { _ in statements.finalize() }
        folding.stop()
    }

    /// The record stored for `key`, if any: this journal's own change if its log is not folded yet, else what
    /// another journal open at open had changed, else the database's row (one query by the table's key, however
    /// many rows it holds; the request decoded only for a record that has one, which a completed one does not).
    ///
    /// An instance opened without remembering its writes (`haul get`) answers for a key it wrote either as unknown
    /// or with that write, never with an older record.
    public func record(for key: JournalKey) -> JournalRecord? {
        let cacheKey = CacheKey(key)
        if let known = state.withLock({ $0.writes.change(for: cacheKey) ?? $0.others[cacheKey] }) { return known }
        guard queriesDatabase else { return nil }
        do {
            return try query.row(for: key).flatMap(Self.record(from:))
        } catch {
            onError(error)
            return nil
        }
    }

    /// The records of the partial and completed files at `path`, under any key: this journal's own changes not
    /// folded yet, then what other journals open at open had changed, then the database's rows (one search of an
    /// index by path). Like ``record(for:)``, an instance that does not remember its writes may answer without them.
    public func records(forFileAt path: String) -> [JournalRecord] {
        // Nothing to look at: the database was empty at open, this instance keeps no records of its writes, and no
        // other journal was open (`haul get`'s first run).
        if !queriesDatabase && !remembersWrites && !othersAtOpen { return [] }
        while true {
            // A fold between reading the database and looking at memory would leave neither with its changes: then
            // the database is read again.
            let folds = state.withLock { $0.folds }
            // Decoded before the lock (a partial's request is JSON).
            let rows: [(key: CacheKey, record: JournalRecord)]
            do {
                rows = try (queriesDatabase ? query.fileRows(at: path) : []).compactMap { row in
                    Self.record(from: row).map { (CacheKey($0.key), $0) }
                }
            } catch {
                onError(error)
                rows = []
            }
            let found = state.withLock { state -> [JournalRecord]? in
                guard state.folds == folds else { return nil }
                var records: [JournalKey: JournalRecord] = [:]
                // A key changed in memory has its newer record there, or none.
                for (key, record) in rows where state.writes.change(for: key) == nil && state.others[key] == nil {
                    records[key.key] = record
                }
                for (key, record) in state.others where state.writes.change(for: key) == nil {
                    if let record, record.path == path, record.state.isFile { records[key.key] = record }
                }
                for record in state.writes.fileRecords(at: path) { records[record.key] = record }
                return Array(records.values)
            }
            if let found { return found }
        }
    }

    /// How many records the journal holds in memory (this journal's changes not folded yet, and the other open
    /// journals' read at open), for tests: it must not grow with the database.
    package var recordsInMemory: Int {
        state.withLock { $0.writes.count + $0.others.count }
    }

    /// Stores `record`, replacing the one for its key.
    public func store(_ record: JournalRecord) {
        let key = CacheKey(record.key)
        var frames: [UInt8] = []
        frames.reserveCapacity(384)
        encodeUpsert(record, time: IntentLog.now(), into: &frames)
        write(frames, changes: 1) { remember(record, at: key, in: &$0) }
    }

    /// Stores `records` with one write to the log (all or none survive a kill).
    public func store(_ records: [JournalRecord]) {
        guard !records.isEmpty else { return }
        let keys = records.map { CacheKey($0.key) }
        var frames: [UInt8] = []
        let time = IntentLog.now()
        for (index, record) in records.enumerated() {
            encodeUpsert(record, time: time, continued: index < records.count - 1, into: &frames)
        }
        write(frames, changes: records.count) { state in
            for (key, record) in zip(keys, records) { remember(record, at: key, in: &state) }
        }
    }

    /// Notes a change just written for look-ups until its log is folded: the record (`nil` for a removal), or, in an
    /// instance that does not remember its writes, `nil` (unknown rather than stale: the database and the other
    /// journals' logs may have an older record for it until then).
    private func remember(_ record: JournalRecord?, at key: CacheKey, in state: inout State) {
        // A journal that neither remembers its writes nor reads the database answers nothing of its own writes.
        if remembersWrites || queriesDatabase { state.writes.note(remembersWrites ? record : nil, at: key) }
        if !state.others.isEmpty { state.others.removeValue(forKey: key) }
    }

    /// Appends the frame of an upsert of `record` with the next sequence (which the database ignores for a key it
    /// has). Before the lock, like the JSON of its request: neither needs it. `continued` for every record of a batch
    /// but its last.
    private func encodeUpsert(
        _ record: JournalRecord, time: Int64, continued: Bool = false, into frames: inout [UInt8]
    ) {
        let sequence = nextSequence.wrappingAdd(1, ordering: .relaxed).oldValue
        IntentLog.frame(
            upserting: record, sequence: sequence, request: Self.json(record.request), time: time,
            continued: continued, into: &frames)
    }

    /// Stores `record` like ``store(_:)-(JournalRecord)``: its append to the log is a copy into memory (on Linux)
    /// or one `write(2)`, not worth suspending for.
    public func commit(_ record: JournalRecord) async {
        store(record)
    }

    /// Forgets `key`.
    public func remove(_ key: JournalKey) {
        remove([key])
    }

    /// Forgets `keys` with one write to the log.
    public func remove(_ keys: [JournalKey]) {
        guard !keys.isEmpty else { return }
        let cacheKeys = keys.map(CacheKey.init)
        var frames: [UInt8] = []
        let time = IntentLog.now()
        for (index, key) in keys.enumerated() {
            IntentLog.frame(
                removingURL: key.url, destination: key.destination, time: time, continued: index < keys.count - 1,
                into: &frames)
        }
        write(frames, changes: keys.count) { state in
            for key in cacheKeys { remember(nil, at: key, in: &state) }
        }
    }

    /// A request as the log and the database keep it (JSON: slow, so never under the lock).
    private static func json(_ request: DownloadRequest?) -> String? {
        request.flatMap { try? encoder.encode($0) }.map { String(decoding: $0, as: UTF8.self) }
    }

    /// Appends `frames` (encoded by the caller, before the lock) to the log and notes `change`, the same changes,
    /// under the lock, so that the log's order is the order look-ups see; folds the log once full. The lock is
    /// held for a copy and a dictionary update only: the two event loops commit at once often enough that a longer
    /// hold put one of them to sleep on the mutex. With `Downloader.Durability.powerLoss` the log is `fsync`ed after
    /// the lock is released, so that writers share the disk's time rather than queue for it.
    private func write(_ frames: [UInt8], changes: Int, _ change: (inout State) -> Void) {
        let (log, rotated, wantsSpare, failure) = state.withLock {
            state -> (IntentLog, Bool, Bool, (any Error)?) in
            change(&state)
            let log = state.log
            do {
                try log.append(frames)
            } catch {
                // Not in the log, so never folded: only what a later run can skip or resume is affected.
                return (log, false, false, error)
            }
            state.changes += changes
            let rotated = state.changes >= foldThreshold && rotate(&state)
            // Half way through a log, the next one is made, for the rotation to find ready.
            let wantsSpare =
                state.changes >= foldThreshold / 2 && state.spare == nil && !state.makingSpare && !state.sparesFail
            if wantsSpare { state.makingSpare = true }
            return (log, rotated, wantsSpare, nil)
        }
        if let failure { return onError(failure) }
        if syncEachAppend {
            do { try log.sync() } catch { onError(error) }
        }
        if rotated {
            afterRotating?()
            foldOldestLater()
        }
        if wantsSpare { prepareSpare() }
    }

    /// Makes the log the next rotation starts, on the folding thread: created under its hidden name, its space
    /// reserved and its pages made writable there rather than by a download's thread holding the lock (creating,
    /// locking and naming a file, `fallocate`, and a page fault per 4 KiB appended).
    private func prepareSpare() {
        let (state, path) = (state, path)
        folding.async {
            if state.withLock({ $0.finished }) { return }
            let spare = try? IntentLog(databasePath: path, reserving: Self.preparedLogSize, named: false)
            spare?.prefault()
            let unused = state.withLock { state -> IntentLog? in
                state.makingSpare = false
                guard let spare else {
                    state.sparesFail = true
                    return nil
                }
                guard !state.finished, state.spare == nil else { return spare }
                state.spare = spare
                return nil
            }
            unused?.remove()
        }
    }

    /// Starts a new log and puts the full one last in ``State/unfolded``; `false` (the changes go on into the same
    /// log) if no new log can be made.
    private func rotate(_ state: inout State) -> Bool {
        guard state.changes > 0 else { return false }
        do {
            let fresh: IntentLog
            if let spare = state.spare {
                state.spare = nil
                do {
                    try spare.name()
                } catch {
                    spare.remove()
                    throw error
                }
                fresh = spare
            } else {
                fresh = try IntentLog(databasePath: path)
            }
            state.unfolded.append((state.log, state.generation))
            state.log = fresh
            state.generation += 1
            state.writes.start(state.generation)
            state.changes = 0
            return true
        } catch {
            onError(error)
            return false
        }
    }

    /// Queues a fold of the oldest full log (one job per rotation, so every full log gets one; the jobs run one at
    /// a time and each takes the oldest left, so logs are folded in the order they were written). The queued work
    /// holds no reference to the journal, whose deinit waits for it.
    private func foldOldestLater() {
        let (state, pool, statements, onError) = (state, pool, statements, onError)
        folding.async {
            guard let full = state.withLock({ $0.unfolded.isEmpty ? nil : $0.unfolded.removeFirst() }) else { return }
            Self.fold(
                full.log, generation: full.generation, into: pool, with: statements, state: state, onError: onError)
        }
    }

    /// Reads back the changes of a log no longer appended to, writes them into the database in one transaction,
    /// then deletes the log and lets look-ups find its changes in the database. If the write fails the log stays,
    /// and the next journal to open the database replays it; its changes stay in memory meanwhile.
    private static func fold(
        _ log: IntentLog, generation: Int, into pool: DatabasePool, with statements: WriteStatements,
        state: Locked<State>, onError: @Sendable (any Error) -> Void
    ) {
        do {
            try pool.writeWithoutTransaction { db in
                try statements.transaction(on: db) { statements in
                    try log.forEachChange { change in
                        if change.isUpsert { try statements.upsert(change) } else { try statements.delete(change) }
                    }
                }
            }
            log.remove()
        } catch {
            return onError(error)
        }
        // Only once committed: a look-up that no longer finds a change here must find it in the database. What is
        // forgotten is freed when the lock has been let go.
        _ = state.withLock { state in
            state.folds += 1
            return state.writes.folded(generation)
        }
    }

    private static func apply(
        _ operations: [JournalOperation], on pool: DatabasePool, with statements: WriteStatements
    ) throws {
        guard !operations.isEmpty else { return }
        try pool.writeWithoutTransaction { db in
            try statements.transaction(on: db) { statements in
                for operation in operations { try apply(operation, to: statements) }
            }
        }
    }

    private static func apply(_ operation: JournalOperation, to statements: WriteStatements) throws {
        switch operation {
        case .upsert(let row): try statements.upsert(row)
        case .remove(let url, let destination, let time):
            try statements.delete(JournalKey(url: url, destination: destination), time: time)
        }
    }

    /// `rows` (in sequence order) with `operations` (in time order) applied as the database applies them (an upsert
    /// keeps the sequence a key already has; a change older than a key's row is ignored: that row came later, from a
    /// journal that has folded its log since). (An older change to a key removed later comes back: a removal leaves
    /// no time behind.)
    private static func overlay(_ operations: [JournalOperation], on rows: [RecordRow]) -> [RecordRow] {
        guard !operations.isEmpty else { return rows }
        var byKey = Dictionary(
            rows.map { (JournalKey(url: $0.url, destination: $0.destination), $0) }, uniquingKeysWith: { $1 })
        for operation in operations {
            switch operation {
            case .upsert(var row):
                let key = JournalKey(url: row.url, destination: row.destination)
                if let existing = byKey[key] {
                    if let newer = existing.changedAt, let time = row.changedAt, newer > time { continue }
                    row.sequence = existing.sequence
                }
                byKey[key] = row
            case .remove(let url, let destination, let time):
                let key = JournalKey(url: url, destination: destination)
                if let newer = byKey[key]?.changedAt, newer > time { continue }
                byKey[key] = nil
            }
        }
        return byKey.values.sorted { $0.sequence < $1.sequence }
    }

    /// SQLite's `synchronous` setting of the writing connection (0 OFF, 1 NORMAL, 2 FULL): for tests.
    package var synchronousSetting: Int? {
        try? pool.write { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") }
    }

    /// Every record, in the order their keys were first stored: this journal's log folded first, then the
    /// database read from the file with the logs of other open journals on it applied (so it also shows what
    /// another process wrote).
    public func allRecords() -> [JournalRecord] {
        // This journal's log into the database (changes are appended whole under the lock, so a rotated log is
        // complete).
        if state.withLock({ rotate(&$0) }) { foldOldestLater() }
        folding.drain()
        do {
            let others = IntentLog.others(of: path, takingDead: false).live
            return Self.overlay(others, on: try pool.read(Self.fetchRows)).compactMap(Self.record(from:))
        } catch {
            onError(error)
            return []
        }
    }

    /// The records of the keys other open journals' logs changed (`operations`, in time order) as those changes
    /// leave them over the database's rows (``overlay(_:on:)``), `nil` for a key they removed; and the highest
    /// sequence in the database or the logs, which the next new key goes after.
    private static func resolve(
        _ operations: [JournalOperation], with query: RecordQuery
    ) throws -> (records: [CacheKey: JournalRecord?], lastSequence: Int64) {
        var lastSequence = try query.lastSequence()
        var keys: [JournalKey] = []
        var seen = Set<JournalKey>()
        for operation in operations {
            let key: JournalKey
            switch operation {
            case .upsert(let row):
                key = JournalKey(url: row.url, destination: row.destination)
                lastSequence = max(lastSequence, row.sequence)
            case .remove(let url, let destination, _):
                key = JournalKey(url: url, destination: destination)
            }
            if seen.insert(key).inserted { keys.append(key) }
        }
        var records: [CacheKey: JournalRecord?] = [:]
        for key in keys { records.updateValue(nil, forKey: CacheKey(key)) }
        let rows = try keys.compactMap { try query.row(for: $0) }
        for row in overlay(operations, on: rows) {
            records.updateValue(
                record(from: row), forKey: CacheKey(JournalKey(url: row.url, destination: row.destination)))
        }
        return (records, lastSequence)
    }

    /// Every row in sequence order.
    private static func fetchRows(_ db: Database) throws -> [RecordRow] {
        try Row.fetchAll(db, sql: "SELECT * FROM record ORDER BY sequence").map { row in
            WriteStatements.Row(
                url: row["url"], destination: row["destination"], path: row["path"], state: row["state"],
                sequence: row["sequence"], validator: row["validator"], totalBytes: row["totalBytes"],
                size: row["size"], sha256: row["sha256"], modifiedNanoseconds: row["modifiedNanoseconds"],
                inode: row["inode"], request: row["request"], failure: row["failure"], changedAt: row["changedAt"],
                missingRanges: row["missingRanges"])
        }
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return encoder
    }()

    private static func record(from row: RecordRow) -> JournalRecord? {
        let key = JournalKey(url: row.url, destination: row.destination)
        let state: JournalRecord.State
        switch row.state {
        case "requested":
            state = .requested
        case "failed":
            state = .failed(message: row.failure ?? "")
        case "partial":
            guard let validator = row.validator else { return nil }
            // Ranges that do not read back make the row malformed, like a partial without its validator: resuming
            // from ranges guessed at could leave holes in the file, so the record is dropped and its partial is not
            // resumed from.
            var missingRanges: [Range<Int64>]?
            if let text = row.missingRanges {
                guard let ranges = RecordRow.ranges(fromText: text) else { return nil }
                missingRanges = ranges
            }
            state = .partial(validator: validator, totalBytes: row.totalBytes, missingRanges: missingRanges)
        case "completed":
            guard let size = row.size, let modified = row.modifiedNanoseconds, let inode = row.inode else { return nil }
            state = .completed(
                size: size, sha256: row.sha256,
                stamp: FileStamp(size: size, modifiedNanoseconds: modified, inode: UInt64(bitPattern: inode)),
                validator: row.validator)
        default:
            return nil
        }
        let request = row.request.flatMap { try? JSONDecoder().decode(DownloadRequest.self, from: Data($0.utf8)) }
        return JournalRecord(key: key, path: row.path, state: state, request: request)
    }
}

/// One record's columns (GRDB has a `Row` of its own).
typealias RecordRow = WriteStatements.Row

/// Why a journal could not be opened, in words a person can act on.
public struct JournalOpenError: Error, CustomStringConvertible {
    /// What kind of trouble it is.
    public enum Reason: Sendable, Hashable {
        /// Another process holds the database's lock and kept it past the wait (10 s).
        case inUse
        /// The directory or the database cannot be created or written (permissions, a read-only or full disk).
        case notWritable
        /// The database is not readable as a journal (damaged, or not a journal at all).
        case unreadable
    }

    /// What kind of trouble it is.
    public let reason: Reason
    /// The journal's path.
    public let path: String
    /// What the system or SQLite said.
    public let detail: String

    /// What happened and what to do. Deleting the journal is advised only for one that is unreadable, never for one
    /// that another process is using.
    public var description: String {
        switch reason {
        case .inUse:
            "'\(path)' is in use by another process (still locked after 10 s); try again when it ends"
        case .notWritable:
            "cannot write '\(path)': \(detail) (check the directory's permissions and free space)"
        case .unreadable:
            "cannot read '\(path)': \(detail) (if it is damaged, delete it to start over: only resuming is lost)"
        }
    }

    /// Runs `body`, turning what it throws into a ``JournalOpenError`` for the journal at `path`.
    static func mapping<Result>(_ path: String, _ body: () throws -> Result) throws(JournalOpenError) -> Result {
        do {
            return try body()
        } catch let error as JournalOpenError {
            throw error
        } catch let error as DatabaseError {
            let detail = error.message ?? "\(error.resultCode)"
            switch error.resultCode {
            case .SQLITE_BUSY, .SQLITE_LOCKED: throw JournalOpenError(reason: .inUse, path: path, detail: detail)
            case .SQLITE_READONLY, .SQLITE_PERM, .SQLITE_CANTOPEN, .SQLITE_IOERR, .SQLITE_FULL, .SQLITE_AUTH:
                throw JournalOpenError(reason: .notWritable, path: path, detail: detail)
            default: throw JournalOpenError(reason: .unreadable, path: path, detail: detail)
            }
        } catch {
            throw JournalOpenError(reason: .notWritable, path: path, detail: posixReason(error))
        }
    }

    /// The system's words for a file error ("Permission denied"), else its description.
    private static func posixReason(_ error: any Error) -> String {
        let nsError = error as NSError
        let posix =
            nsError.domain == NSPOSIXErrorDomain
            ? nsError
            : (nsError.userInfo[NSUnderlyingErrorKey] as? NSError).flatMap {
                $0.domain == NSPOSIXErrorDomain ? $0 : nil
            }
        if let posix { return String(cString: strerror(Int32(posix.code))) }
        if nsError.domain == NSCocoaErrorDomain, nsError.code == CocoaError.fileWriteNoPermission.rawValue {
            return String(cString: strerror(EACCES))
        }
        return nsError.localizedDescription
    }
}
