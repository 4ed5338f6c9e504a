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

/// The order of changes across journals and processes: the change written last wins, whenever each is committed
/// (``ChangeOrder``), and no clock takes part.
@Suite("SQLite journal's order of changes", .timeLimit(.minutes(1)))
struct JournalOrderTests: OneRecordFixture {
    func removals(_ path: String) throws -> Int {
        try DatabaseQueue(path: path).read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM removal") ?? -1 }
    }

    /// What a journal killed right after writing `change` leaves: its change, with the ticket it took, in a pending
    /// log nobody holds.
    func killedJournal(wrote change: JournalChange, at path: String, instance: String = "x.1") throws {
        let ticket = try ChangeOrder(databasePath: path).take(1)
        let log = try PendingLog(databasePath: path, instance: instance, side: 0, batch: 1)
        try log.append([change.payload(ticket: ticket)])
    }

    @Test("a killed journal's pending write is not committed over a later change another journal committed since")
    func leftoverLogAfterLaterCommit() throws {
        let dir = try TemporaryDirectory()
        let path = try database(in: dir)
        let y = try SQLiteJournal(path: path)
        try killedJournal(wrote: .upsert(row("older, by x")), at: path)
        y.store(record("newer, by y"))
        _ = y.allRecords()  // committed
        #expect(try committed(path) == "newer, by y")
        y.finish()
        let next = try SQLiteJournal(path: path)
        #expect(next.record(for: key)?.state == .failed(message: "newer, by y"), "X's older write replayed over Y's")
        next.finish()
        #expect(try committed(path) == "newer, by y")
        #expect(!FileManager.default.fileExists(atPath: path + "-pending.x.1.0"), "the killed journal's log stays")
    }

    @Test("a killed journal's pending write made after another journal's committed change is committed over it")
    func leftoverLogAfterEarlierCommit() throws {
        let dir = try TemporaryDirectory()
        let path = try database(in: dir)
        let y = try SQLiteJournal(path: path)
        y.store(record("older, by y"))
        _ = y.allRecords()
        try killedJournal(wrote: .upsert(row("newer, by x")), at: path)
        y.finish()
        try SQLiteJournal(path: path).finish()
        #expect(try committed(path) == "newer, by x")
    }

    @Test("a killed journal's pending removal made after another journal's change removes the record")
    func leftoverRemoval() throws {
        let dir = try TemporaryDirectory()
        let path = try database(in: dir)
        let y = try SQLiteJournal(path: path)
        y.store(record("by y"))
        _ = y.allRecords()
        try killedJournal(wrote: .remove(key), at: path)
        y.finish()
        try SQLiteJournal(path: path).finish()
        #expect(try committed(path) == nil)
    }

    @Test("a killed journal's pending write made before another journal removed the record does not bring it back")
    func leftoverWriteBeforeRemoval() throws {
        let dir = try TemporaryDirectory()
        let path = try database(in: dir)
        let y = try SQLiteJournal(path: path)
        y.store(record("by y"))
        _ = y.allRecords()
        try killedJournal(wrote: .upsert(row("older, by x")), at: path)
        y.remove(key)
        _ = y.allRecords()
        #expect(try committed(path) == nil)
        y.finish()
        let next = try SQLiteJournal(path: path)
        #expect(next.record(for: key) == nil, "X's write older than Y's removal brought the record back")
        next.finish()
    }

    @Test("a live journal's batch committed after another journal committed a later change leaves the later change")
    func liveBatchCommittedLate() throws {
        for _ in 0..<20 {
            let dir = try TemporaryDirectory()
            let path = try database(in: dir)
            let x = try SQLiteJournal(path: path)
            let y = try SQLiteJournal(path: path)
            x.store(record("older, by x"))  // committed 50 ms after its write, or at finish
            y.store(record("newer, by y"))
            _ = y.allRecords()
            x.finish()
            #expect(try committed(path) == "newer, by y", "X's older write, committed last, replaced Y's newer one")
            y.finish()
            #expect(try committed(path) == "newer, by y")
        }
    }

    @Test("a live journal's removal of a record stays removed when another journal commits an older write after it")
    func liveRemovalBeforeOlderCommit() throws {
        let dir = try TemporaryDirectory()
        let path = try database(in: dir)
        let x = try SQLiteJournal(path: path)
        let y = try SQLiteJournal(path: path)
        x.store(record("older, by x"))
        y.remove(key)
        _ = y.allRecords()
        x.finish()
        #expect(try committed(path) == nil, "X's write older than Y's removal brought the record back")
        y.finish()
    }

    @Test("a removal's tombstone stays while another journal has a log, and goes with a commit or an open alone")
    func removalsDropped() throws {
        let dir = try TemporaryDirectory()
        let path = try database(in: dir)
        let other = try SQLiteJournal(path: path)  // its log may hold changes older than the removal
        let first = try SQLiteJournal(path: path)
        first.store(record("a"))
        first.remove(key)
        _ = first.allRecords()
        #expect(try removals(path) == 1)
        try SQLiteJournal(path: path).finish()  // opened beside the two: it stays
        #expect(try removals(path) == 1)
        other.finish()
        // Alone now: the next commit with a removal drops the tombstones nothing older can reach.
        first.remove(JournalKey(url: "http://h/never-stored", destination: "/d/"))
        _ = first.allRecords()
        #expect(try removals(path) == 0)
        // One left while another journal was open goes when a journal opens alone.
        let x = try SQLiteJournal(path: path)
        first.remove(key)
        _ = first.allRecords()
        #expect(try removals(path) == 1)
        first.finish()
        x.finish()
        #expect(try removals(path) == 1)
        let last = try SQLiteJournal(path: path)
        #expect(try removals(path) == 0)
        // And a change made after the tombstone went is stored as any other.
        last.store(record("b"))
        last.finish()
        #expect(try committed(path) == "b")
    }

    @Test("with its order file deleted between runs, a journal's changes still win over those committed before")
    func orderFileDeleted() throws {
        let dir = try TemporaryDirectory()
        let path = try database(in: dir)
        for value in ["first", "second", "third"] {
            let journal = try SQLiteJournal(path: path)
            journal.store(record(value))
            journal.finish()
            #expect(try committed(path) == value)
            #expect(unlink(path + "-order") == 0)
        }
    }

    @Test("a durable journal (powerLoss) orders its changes against a logged journal's as written")
    func durableAgainstLogged() throws {
        let dir = try TemporaryDirectory()
        let path = try database(in: dir)
        let logged = try SQLiteJournal(path: path)
        let durable = try SQLiteJournal(path: path, durability: .powerLoss)
        logged.store(record("older, logged"))
        durable.store(record("newer, durable"))  // committed before it returns
        logged.finish()
        #expect(try committed(path) == "newer, durable")
        durable.store(record("newest, durable"))
        durable.finish()
        #expect(try committed(path) == "newest, durable")
    }

    @Test("a journal database from before tickets keeps its records, and changes made now replace them")
    func migratedFromBeforeTickets() throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        let old = try DatabaseQueue(path: path)
        try old.write { db in try db.execute(sql: "PRAGMA journal_mode = WAL") }
        try JournalSchema.migrator.migrate(old, upTo: "v7: committed batches")
        try old.write { db in
            try db.execute(
                sql: """
                    INSERT INTO record (url, destination, sequence, path, state, failure, updatedAt)
                    VALUES (?, ?, 1, '/d/a', 'failed', 'from before', '2026-01-01 00:00:00.000')
                    """, arguments: [key.url, key.destination])
        }
        try old.close()
        let journal = try SQLiteJournal(path: path)
        #expect(journal.record(for: key)?.state == .failed(message: "from before"))
        journal.store(record("now"))
        journal.finish()
        #expect(try committed(path) == "now")
    }

    @Test("a link or a FIFO named like the order file is refused with a message naming it, and is left alone")
    func hostileOrderFile() throws {
        let dir = try TemporaryDirectory()
        let path = try database(in: dir)
        let order = path + "-order"
        let elsewhere = dir.file("elsewhere").path
        #expect(FileManager.default.createFile(atPath: elsewhere, contents: Data("keep".utf8)))
        for plant in ["link", "fifo"] {
            unlink(order)
            if plant == "link" { #expect(symlink(elsewhere, order) == 0) } else { #expect(mkfifo(order, 0o600) == 0) }
            do {
                let journal = try SQLiteJournal(path: path)
                journal.finish()
                Issue.record("opened over a \(plant) named like its order file")
            } catch let error as JournalOpenError {
                #expect(error.description.contains(order), "\(error)")
            }
        }
        #expect(String(decoding: try Data(contentsOf: URL(fileURLWithPath: elsewhere)), as: UTF8.self) == "keep")
    }

    @Test("tickets are taken in order across two openings of one order file, as by two processes")
    func ticketsShared() throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        let one = try ChangeOrder(databasePath: path)
        let two = try ChangeOrder(databasePath: path)
        #expect(one.take(1) == 1)
        #expect(two.take(3) == 2)
        #expect(one.take(1) == 5)
        one.lift(to: 3)
        #expect(two.current == 5)
        two.lift(to: 40)
        #expect(one.take(1) == 41)
        one.lift(to: ChangeOrder.limit)  // damage: counting from it would soon wrap
        #expect(two.take(1) == 42)
    }

    @Test("a payload's ticket reads back; a payload without one (an older log's) reads with none")
    func payloadTickets() throws {
        let change = JournalChange.upsert(row("x"))
        var payload = change.payload(ticket: 0)
        let ticket: Int64 = 1 << 40 + 7
        JournalChange.stamp(ticket, on: &payload)
        let read = try #require(JournalChange.read(payload))
        #expect(read.change == change)
        #expect(read.ticket == ticket)
        let older = try #require(JournalChange.read(change.payload))
        #expect(older.change == change)
        #expect(older.ticket == nil)
        #expect(JournalChange.read(Array(payload.dropLast())) == nil)
        #expect(JournalChange.read(payload + [0]) == nil)
        for absurd in [0, -1, ChangeOrder.limit, Int64.max] {
            JournalChange.stamp(absurd, on: &payload)
            #expect(JournalChange.read(payload) == nil, "ticket \(absurd)")
        }
    }
}
