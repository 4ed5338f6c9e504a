import Foundation
import GRDB
import Haul
import HaulTestSupport
import Testing

@testable import HaulSQLite

/// Look-ups: by key in the database, which every write has reached when it returns, this journal's or another's.
@Suite("SQLite journal's look-ups", .timeLimit(.minutes(1)))
struct SQLiteJournalLookupTests {
    func key(_ index: Int) -> JournalKey {
        JournalKey(url: "http://h/\(index)", destination: "/d/")
    }

    func record(_ index: Int, _ state: JournalRecord.State = .requested) -> JournalRecord {
        JournalRecord(key: key(index), path: "/d/\(index)", state: state)
    }

    func completed(_ index: Int) -> JournalRecord {
        record(
            index,
            .completed(
                size: Int64(index), sha256: nil, stamp: FileStamp(size: Int64(index), modifiedNanoseconds: 7, inode: 9)
            ))
    }

    @Test("a database of 200,000 records is looked up by key; writes are found at once; a new key goes last")
    func largeDatabase() throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        try SQLiteJournal(path: path).finish()  // the schema
        // The rows a long run leaves, in one statement rather than 200,000 writes.
        try DatabaseQueue(path: path).write { db in
            try db.execute(
                sql: """
                    WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 199999)
                    INSERT INTO record (url, destination, sequence, path, state, size, modifiedNanoseconds, inode,
                                        updatedAt)
                    SELECT 'http://h/' || i, '/d/', i + 1, '/d/' || i, 'completed', i, 7, 9, '2026-01-01 00:00:00'
                    FROM n
                    """)
        }
        let journal = try SQLiteJournal(path: path)
        for index in [0, 1, 99_999, 199_999] { #expect(journal.record(for: key(index)) == completed(index)) }
        #expect(journal.record(for: key(200_000)) == nil)

        for index in 0..<1000 { journal.store(record(index, .failed(message: "x"))) }
        journal.store(record(300_000))
        for index in [0, 500, 999] { #expect(journal.record(for: key(index)) == record(index, .failed(message: "x"))) }
        #expect(journal.record(for: key(1000)) == completed(1000))
        #expect(journal.record(for: key(300_000)) == record(300_000))
        journal.finish()
        // A new key goes after every key already there.
        let order = try DatabaseQueue(path: path).read { db in
            try String.fetchAll(db, sql: "SELECT url FROM record ORDER BY sequence DESC LIMIT 2")
        }
        #expect(order == ["http://h/300000", "http://h/199999"])
    }

    @Test(
        "a look-up sees the newest change to a key, this journal's or another open journal's, in either mode",
        arguments: [true, false])
    func newestChangeWins(remembersWrites: Bool) throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        var expected: [JournalKey: JournalRecord] = [:]
        // In the database: 0..<8.
        do {
            let before = try SQLiteJournal(path: path)
            before.store((0..<8).map { record($0) })
            before.finish()
            for index in 0..<8 { expected[key(index)] = record(index) }
        }
        // Written by another journal, still open: 4..<12 failed, 0 removed.
        let other = try SQLiteJournal(path: path)
        other.store((4..<12).map { record($0, .failed(message: "other")) })
        other.remove(key(0))
        for index in 4..<12 { expected[key(index)] = record(index, .failed(message: "other")) }
        expected[key(0)] = nil

        // The database was not empty at open: a journal that does not remember its writes asks it too.
        let journal = try SQLiteJournal(path: path, remembersWrites: remembersWrites)
        func check(_ step: Int) {
            for index in 0..<16 {
                #expect(journal.record(for: key(index)) == expected[key(index)], "step \(step), key \(index)")
            }
        }
        check(-1)
        var seed: UInt64 = 30
        func random(_ bound: Int) -> Int {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int(seed >> 33) % bound
        }
        for step in 0..<300 {
            let index = random(16)
            // Either journal writes: this one's look-ups see its own writes at once, the other's once committed.
            // The order of changes is the order of their commits: the other journal's change comes after this one's
            // when this one's are committed before it is made.
            let writer = random(3) == 0 ? other : journal
            if writer === other { _ = journal.allRecords() }
            switch random(4) {
            case 0:
                writer.remove(key(index))
                expected[key(index)] = nil
            case 1:
                let batch = [completed(index), record((index + 1) % 16, .failed(message: "\(step)"))]
                writer.store(batch)
                for record in batch { expected[record.key] = record }
            default:
                let state: JournalRecord.State =
                    step.isMultiple(of: 2)
                    ? .failed(message: "\(step)") : .partial(validator: "\"\(step)\"", totalBytes: 9)
                writer.store(record(index, state))
                expected[key(index)] = record(index, state)
            }
            if writer === other { _ = other.allRecords() }  // committed
            check(step)
        }
        journal.finish()
        other.finish()
        let reopened = try SQLiteJournal(path: path)
        for index in 0..<16 {
            #expect(reopened.record(for: key(index)) == expected[key(index)], "reopened, key \(index)")
        }
    }
}

/// Look-ups by file (`records(forFileAt:)`): every partial or completed record at a path, whatever its key, as the
/// database has it; never a record a newer change replaced.
@Suite("SQLite journal's look-ups by file", .timeLimit(.minutes(1)))
struct SQLiteJournalFileLookupTests {
    func record(_ url: String, path: String = "/d/f", _ state: JournalRecord.State) -> JournalRecord {
        JournalRecord(key: JournalKey(url: url, destination: path), path: path, state: state)
    }

    let partial = JournalRecord.State.partial(validator: "\"v\"", totalBytes: 10)
    let completed = JournalRecord.State.completed(
        size: 10, sha256: nil, stamp: FileStamp(size: 10, modifiedNanoseconds: 1, inode: 2), validator: "\"v\"")

    func urls(_ records: [JournalRecord]) -> Set<String> { Set(records.map(\.key.url)) }

    @Test("this journal's own changes at once; a removal or a failure hides the file's")
    func ownChanges() throws {
        let dir = try TemporaryDirectory()
        let journal = try SQLiteJournal(path: dir.file("j.sqlite").path)
        journal.store(record("http://h/f?t=a", partial))
        journal.store(record("http://h/other", path: "/d/g", completed))
        #expect(urls(journal.records(forFileAt: "/d/f")) == ["http://h/f?t=a"])
        journal.store(record("http://h/f?t=b", completed))
        journal.store(record("http://h/requested", .requested))
        #expect(urls(journal.records(forFileAt: "/d/f")) == ["http://h/f?t=a", "http://h/f?t=b"])
        // Changed again: the newer changes win.
        journal.store(record("http://h/f?t=a", .failed(message: "gone")))
        journal.remove(JournalKey(url: "http://h/f?t=b", destination: "/d/f"))
        #expect(journal.records(forFileAt: "/d/f").isEmpty)
        journal.finish()
        let reopened = try SQLiteJournal(path: dir.file("j.sqlite").path)
        #expect(reopened.records(forFileAt: "/d/f").isEmpty)
        #expect(reopened.records(forFileAt: "/d/g").map(\.state) == [completed])
    }

    @Test("the database's rows by the path index; a journal that does not remember its writes never answers older")
    func fromTheDatabase() throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        do {
            let before = try SQLiteJournal(path: path)
            before.store([record("http://h/f?t=a", partial), record("http://h/g", path: "/d/g", completed)])
            before.finish()
        }
        let plan = try DatabaseQueue(path: path).read { db in
            try Row.fetchAll(
                db,
                sql: """
                    EXPLAIN QUERY PLAN SELECT url FROM record
                    WHERE path = '/d/f' AND state IN ('partial', 'completed')
                    """
            ).map { $0["detail"] as String? ?? "" }
        }
        #expect(plan.contains { $0.contains("record_file") }, "\(plan)")
        let journal = try SQLiteJournal(path: path, remembersWrites: false)
        #expect(journal.records(forFileAt: "/d/f").map(\.state) == [partial])
        journal.store(record("http://h/f?t=a", .failed(message: "cut")))
        #expect(journal.records(forFileAt: "/d/f").isEmpty, "an older record came back")
        // On an empty database, a journal that does not remember its writes asks nothing: it answers none.
        let empty = try SQLiteJournal(path: dir.file("empty.sqlite").path, remembersWrites: false)
        empty.store(record("http://h/f?t=a", partial))
        #expect(empty.records(forFileAt: "/d/f").isEmpty)
        #expect(empty.record(for: JournalKey(url: "http://h/f?t=a", destination: "/d/f")) == nil)
        #expect(empty.allRecords().map(\.state) == [partial])
    }

    @Test("a journal opened after another's writes finds them; one open before finds them once committed")
    func otherJournals() throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        let first = try SQLiteJournal(path: path)
        first.store(record("http://h/f?t=a", partial))
        let second = try SQLiteJournal(path: path)
        #expect(second.records(forFileAt: "/d/f").map(\.key.url) == ["http://h/f?t=a"])
        _ = first.allRecords()  // committed: the second's change comes after it
        second.store(record("http://h/f?t=a", .failed(message: "x")))
        #expect(second.records(forFileAt: "/d/f").isEmpty)
        _ = second.allRecords()
        #expect(first.records(forFileAt: "/d/f").isEmpty)
        first.store(record("http://h/f?t=b", completed))
        _ = first.allRecords()
        #expect(second.records(forFileAt: "/d/f").map(\.key.url) == ["http://h/f?t=b"])
        first.finish()
        second.finish()
    }
}
