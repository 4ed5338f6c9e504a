import Foundation
import GRDB
import Haul
import HaulOperations
import HaulTestSupport
import Testing

@testable import HaulSQLite

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The journal's pending logs under a hostile second look: each test states a promise the journal makes.
@Suite("SQLite journal review hazards", .timeLimit(.minutes(1)))
struct JournalReviewHazardTests: OneRecordFixture {
    /// Holds SQLite's write lock on the database (as a long transaction of another process would) until released:
    /// the journals' committers wait for it (their busy timeout is 10 s).
    final class WriteLock {
        let queue: DatabaseQueue
        init(_ path: String) throws {
            var configuration = Configuration()
            configuration.allowsUnsafeTransactions = true
            queue = try DatabaseQueue(path: path, configuration: configuration)
            try queue.inDatabase { db in try db.execute(sql: "BEGIN IMMEDIATE") }
        }
        func release() throws {
            try queue.inDatabase { db in try db.execute(sql: "COMMIT") }
        }
    }

    // MARK: Another journal's changes seen pending at open give way to what it committed, once it finishes

    /// Journal X writes `record("older")` and journal Y opens before X commits it (X's commit is due 50 ms after the
    /// write): Y then holds X's write as pending. Tried again on a fresh directory when X's commit came first (seen
    /// in the database right after Y opened, so the outcome never depends on timing).
    func xPendingWhenYOpens() throws -> (dir: TemporaryDirectory, path: String, x: SQLiteJournal, y: SQLiteJournal) {
        for _ in 0..<50 {
            let dir = try TemporaryDirectory()
            let path = dir.file("j.sqlite").path
            try SQLiteJournal(path: path).finish()  // the schema
            let x = try SQLiteJournal(path: path)
            x.store(record("older"))
            let y = try SQLiteJournal(path: path)
            if try committed(path) == nil { return (dir, path, x, y) }  // Y read X's log before X committed
            x.finish()
            y.finish()
        }
        throw CancellationError()
    }

    @Test(
        "a journal opened while another had a write pending answers the other's newer committed change once it finishes"
    )
    func othersGoStaleWhenTheirJournalFinishes() throws {
        let (dir, path, x, y) = try xPendingWhenYOpens()
        // Y (a second `haul get` on the directory) finds X's pending write, as promised.
        #expect(y.record(for: key)?.state == .failed(message: "older"))
        // X changes the record again, and finishes (commits everything and exits cleanly).
        x.store(record("newer"))
        _ = x.allRecords()  // X commits it (a look-up by Y now would drop X's older entry; Y makes none)
        x.finish()  // deletes X's note of its committed batches
        #expect(try committed(path) == "newer")
        // Y must now answer what the database holds: X's newer change.
        #expect(y.record(for: key)?.state == .failed(message: "newer"), "Y answers X's older pending change")
        #expect(y.allRecords().map(\.state) == [.failed(message: "newer")])
        y.finish()
        withExtendedLifetime(dir) {}
    }

    @Test("a removal made by another journal after this one opened is not undone by that journal's older pending write")
    func removalUndoneByStaleOther() throws {
        let (dir, path, x, y) = try xPendingWhenYOpens()
        x.remove(key)
        x.finish()
        #expect(try committed(path) == nil)
        #expect(y.record(for: key) == nil, "Y still finds a record X removed")
        #expect(y.allRecords().isEmpty, "Y's allRecords() still lists a record X removed")
        y.finish()
        withExtendedLifetime(dir) {}
    }

    /// A journal in `dir` and the pending log a killed one left beside it, holding one record failed with `failure`.
    func leftLog(in dir: TemporaryDirectory, failure: String) throws -> (database: String, log: String) {
        let path = dir.file("j.sqlite").path
        try SQLiteJournal(path: path).finish()
        let log = try PendingLog(databasePath: path, instance: "dead.1", side: 0, batch: 1)
        try log.append([JournalChange.upsert(row(failure)).payload])
        return (path, log.path)
    }

    // MARK: A log is this user's

    @Test(
        "a pending log owned by another user is not applied to the journal, and is named in a warning",
        .enabled(if: getuid() == 0, "giving the file to another user needs root (CI runs as root)"))
    func foreignOwnedLogApplied() throws {
        let dir = try TemporaryDirectory()
        let (path, logPath) = try leftLog(in: dir, failure: "planted")
        #expect(chown(logPath, 65534, 65534) == 0)
        let errors = Locked<[String]>([])
        let journal = try SQLiteJournal(path: path, onError: { error in errors.withLock { $0.append("\(error)") } })
        #expect(journal.record(for: key) == nil, "a log owned by uid 65534 was applied to root's journal")
        #expect(try committed(path) == nil)
        #expect(errors.withLock { $0 }.contains { $0.contains("belongs to another user") }, "\(errors.withLock { $0 })")
        journal.finish()
    }

    // MARK: A damaged change is never applied as it reads

    @Test("a frame whose bytes were damaged is not applied with the damage, and a warning names its log")
    func damagedFrameRefused() throws {
        let dir = try TemporaryDirectory()
        let (path, logPath) = try leftLog(in: dir, failure: "intact")
        // One byte of the frame's payload flipped (a bad sector, a stray write): "intact" becomes "intbct".
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: logPath)))
        let needle = Array("intact".utf8)
        let at = try #require(
            (0...(bytes.count - needle.count)).first { Array(bytes[$0..<$0 + needle.count]) == needle })
        bytes[at + 3] ^= 0x03
        try Data(bytes).write(to: URL(fileURLWithPath: logPath))
        let errors = Locked<[String]>([])
        let journal = try SQLiteJournal(path: path, onError: { error in errors.withLock { $0.append("\(error)") } })
        #expect(try committed(path) != "intbct", "the damaged frame was applied as written")
        #expect(errors.withLock { $0 }.contains { $0.contains(logPath) && $0.contains("damaged") })
        journal.finish()
    }
}

@Suite("SQLite journal review hazards, odd files", .timeLimit(.minutes(1)))
struct JournalReviewOddFileTests {
    @Test("a journal database from a newer version (a migration this one does not know) is refused clearly or opened")
    func newerDatabase() throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        try SQLiteJournal(path: path).finish()
        try DatabaseQueue(path: path).write { db in
            try db.execute(sql: "INSERT INTO grdb_migrations VALUES ('v99: from the future')")
        }
        do {
            let journal = try SQLiteJournal(path: path)
            journal.finish()
        } catch {
            #expect("\(error)".contains(path))
        }
    }

    @Test("a pending log that is a FIFO does not hang the journal's open")
    func fifoLog() async throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        try SQLiteJournal(path: path).finish()
        let fifo = path + "-pending.odd.1.0"
        #expect(mkfifo(fifo, 0o600) == 0)
        let opened = Locked(false)
        let thread = Thread {
            if let journal = try? SQLiteJournal(path: path) { journal.finish() }
            opened.withLock { $0 = true }
        }
        thread.start()
        let deadline = ContinuousClock.now + .seconds(5)
        while !opened.withLock({ $0 }) && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        let hung = !opened.withLock { $0 }
        // Unblock the open (a writer appears and goes: the reader sees the end).
        while !opened.withLock({ $0 }) {
            let writer = open(fifo, O_WRONLY | O_NONBLOCK)
            if writer >= 0 { close(writer) }
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(!hung, "SQLiteJournal(path:) blocked for 5 s opening a FIFO named like a pending log")
    }
}
