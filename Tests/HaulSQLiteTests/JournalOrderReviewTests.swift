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

/// The order of changes under a hostile second look: look-ups that must agree with what the database will hold, and an
/// order file or database damaged or planted.
@Suite("SQLite journal's order under review", .timeLimit(.minutes(1)))
struct JournalOrderReviewTests: OneRecordFixture {
    /// Writes `value` as the order file's counter word (a damaged or planted file of this user's).
    func plantCounter(_ value: UInt64, at path: String) throws {
        unlink(path + "-order")
        var bytes: [UInt8] = []
        for index in 0..<8 { bytes.append(UInt8(truncatingIfNeeded: value >> (8 * index))) }
        #expect(FileManager.default.createFile(atPath: path + "-order", contents: Data(bytes)))
        #expect(chmod(path + "-order", 0o600) == 0)
    }

    // MARK: Look-ups vs. tickets

    @Test("a journal opened while another holds an older change in its log answers the newer committed change")
    func overlayIgnoresTickets() throws {
        let dir = try TemporaryDirectory()
        let path = try database(in: dir)
        // A live journal X (its log held: this test holds the lock) wrote a change, with its ticket, not committed.
        let order = try ChangeOrder(databasePath: path)
        let log = try PendingLog(databasePath: path, instance: "x.1", side: 0, batch: 1)
        try log.append([JournalChange.upsert(row("older, by x")).payload(ticket: order.take(1))])
        // Y writes the key later (a higher ticket) and commits it.
        let y = try SQLiteJournal(path: path, durability: .powerLoss)
        y.store(record("newer, by y"))
        y.finish()
        #expect(try committed(path) == "newer, by y")
        // Z opens now: the database holds Y's newer change, and X's older one will be refused when committed.
        let z = try SQLiteJournal(path: path)
        #expect(
            z.record(for: key)?.state == .failed(message: "newer, by y"),
            "Z answers X's older change, which the database will never hold")
        #expect(z.allRecords().map(\.state) == [.failed(message: "newer, by y")])
        z.finish()
        withExtendedLifetime(log) {}
    }

    @Test("a journal's own pending change that another journal's later committed change outranks is not answered")
    func ownPendingAnswerOutranked() throws {
        var answers: [JournalRecord.State?] = []
        for _ in 0..<10 {
            let dir = try TemporaryDirectory()
            let path = try database(in: dir)
            let x = try SQLiteJournal(path: path)
            let y = try SQLiteJournal(path: path)
            x.store(record("older, by x"))  // its ticket first; committed 50 ms later
            y.store(record("newer, by y"))
            _ = y.allRecords()  // Y's newer change committed now
            answers.append(x.record(for: key)?.state)  // X's batch usually not committed yet
            x.finish()
            #expect(try committed(path) == "newer, by y")
            y.finish()
        }
        #expect(
            answers.allSatisfy { $0 == .failed(message: "newer, by y") },
            "X answered its own older change while the database held, and kept, Y's newer one: \(answers)")
    }

    // MARK: The order file

    @Test("an order file whose counter is at or above ChangeOrder.limit: a killed journal's writes survive")
    func counterAtLimitLosesKilledWrites() throws {
        let dir = try TemporaryDirectory()
        let path = try database(in: dir)
        try plantCounter(UInt64(ChangeOrder.limit), at: path)
        // A journal opens over it (nothing refuses the counter) and is killed right after a write returned.
        let x = try SQLiteJournal(path: path)
        do {
            let order = try ChangeOrder(databasePath: path)
            let log = try PendingLog(databasePath: path, instance: "x.1", side: 0, batch: 1)
            try log.append([JournalChange.upsert(row("by x")).payload(ticket: order.take(1))])
        }  // killed: its lock goes, its log stays
        x.finish()
        let next = try SQLiteJournal(path: path)
        next.finish()
        #expect(try committed(path) == "by x", "the killed journal's write, with a ticket from the counter, is lost")
    }

    @Test("after changes took tickets at or above the limit, deleting the order file does not stop the journal")
    func ticketsAboveLimitFreezeRecords() throws {
        let dir = try TemporaryDirectory()
        let path = try database(in: dir)
        try plantCounter(UInt64(ChangeOrder.limit), at: path)
        let first = try SQLiteJournal(path: path)
        first.store(record("while damaged"))
        first.finish()
        #expect(try committed(path) == "while damaged")
        // The documented way back: the order file deleted between runs, lifted at open from the database.
        #expect(unlink(path + "-order") == 0)
        let second = try SQLiteJournal(path: path)
        second.store(record("after"))
        second.remove(JournalKey(url: "http://h/other", destination: "/d/"))
        second.finish()
        #expect(
            try committed(path) == "after", "every later change to the key is refused: the journal stopped recording it"
        )
    }

    @Test("with the changeOrder row missing and the order file deleted, a journal's changes still win")
    func changeOrderRowMissing() throws {
        let dir = try TemporaryDirectory()
        let path = try database(in: dir)
        let first = try SQLiteJournal(path: path)
        for value in ["a", "b", "c"] { first.store(record(value)) }
        first.finish()
        try DatabaseQueue(path: path).write { db in try db.execute(sql: "DELETE FROM changeOrder") }
        #expect(unlink(path + "-order") == 0)
        let second = try SQLiteJournal(path: path)
        second.store(record("d"))
        second.finish()
        #expect(try committed(path) == "d", "the lift ignores the records' own tickets")
    }

    @Test("a same-user hard link planted as the order file: the file it names is not written")
    func hardLinkedOrderFile() throws {
        let dir = try TemporaryDirectory()
        let path = try database(in: dir)
        let victim = dir.file("precious").path
        let content = Data("precious content of another file".utf8)
        #expect(FileManager.default.createFile(atPath: victim, contents: content))
        #expect(unlink(path + "-order") == 0)
        #expect(link(victim, path + "-order") == 0)
        do {
            let journal = try SQLiteJournal(path: path)
            journal.store(record("a"))
            journal.finish()
        } catch {
            // Refusing it is fine.
        }
        #expect(
            try Data(contentsOf: URL(fileURLWithPath: victim)) == content,
            "the journal counted its tickets in another file of the user's")
    }
}
