import Haul
import Testing

@testable import HaulSQLite

/// The journal's memory of its own changes until their log is folded, without I/O.
@Suite("SQLite journal's unfolded writes", .timeLimit(.minutes(1)))
struct UnfoldedWritesTests {
    func key(_ index: Int) -> SQLiteJournal.CacheKey {
        SQLiteJournal.CacheKey(JournalKey(url: "http://h/\(index)", destination: "/d/"))
    }

    func record(_ index: Int, _ state: JournalRecord.State = .requested) -> JournalRecord {
        JournalRecord(key: key(index).key, path: "/d/\(index)", state: state)
    }

    @Test("the newest log's change wins; a folded log's changes are forgotten, the log being written stays")
    func newestWinsUntilFolded() {
        var writes = UnfoldedWrites(generation: 0)
        #expect(writes.change(for: key(1)) == nil)  // nothing: the database answers
        writes.note(record(1), at: key(1))
        writes.note(record(2), at: key(2))
        writes.start(1)
        writes.note(record(1, .failed(message: "x")), at: key(1))
        writes.note(nil, at: key(2))  // removed
        #expect(writes.change(for: key(1)) == .some(record(1, .failed(message: "x"))))
        #expect(writes.change(for: key(2)) == .some(nil))
        #expect(writes.count == 4)
        _ = writes.folded(0)
        #expect(writes.change(for: key(1)) == .some(record(1, .failed(message: "x"))))
        #expect(writes.count == 2)
        _ = writes.folded(1)  // the log being written, folded by finish()
        #expect(writes.change(for: key(1)) == nil)
        #expect(writes.count == 0)
        writes.note(record(3), at: key(3))  // still has a place
        #expect(writes.change(for: key(3)) == .some(record(3)))
    }

    @Test("a log whose fold failed keeps its changes, less the keys a later folded log changed")
    func failedFoldKeepsItsChanges() {
        var writes = UnfoldedWrites(generation: 0)
        writes.note(record(1), at: key(1))
        writes.note(record(2), at: key(2))
        writes.start(1)
        writes.note(record(1, .failed(message: "newer")), at: key(1))
        writes.start(2)
        // Log 0's fold failed (never reported folded); log 1 reaches the database.
        _ = writes.folded(1)
        #expect(writes.change(for: key(1)) == nil)  // the database has the newer record
        #expect(writes.change(for: key(2)) == .some(record(2)))  // the database lacks it
        #expect(writes.folded(7).isEmpty)  // unknown: nothing happens
        #expect(writes.count == 1)
    }
}
