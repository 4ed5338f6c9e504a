import Foundation
import GRDB
import Haul
import HaulTestSupport
import Testing

@testable import HaulSQLite

/// The journal after torn and damaged writes, and over malformed rows: a random run of stores and removals (one
/// record, or a batch in one call), its WAL then cut short or damaged as a power loss leaves it, and rows that no
/// version wrote. Opened again it gives exactly the writes that were whole, in order: nothing of a torn or damaged
/// write, everything before it; a malformed row is dropped, never a crash. Seeded: a failure names its seed and case.
@Suite("SQLite journal, torn and damaged", .timeLimit(.minutes(2)))
struct SQLiteJournalFuzzTests {
    static let seeds: [UInt64] = Array(0..<3)

    /// One call to the journal.
    enum Write {
        case store([JournalRecord])
        case remove([JournalKey])
    }

    /// A journal's files after `writes`, as a power loss finds them: the database file, and the WAL, where every
    /// write went (no checkpoint ran), with where each write's frames end.
    struct Written {
        let writes: [Write]
        let database: Data
        let wal: Data
        /// Where the writes' frames start: after the WAL's header, and after frames of the journal that made the
        /// schema if its connections were still closing when this one opened (the WAL is then not restarted).
        let walStart: Int
        let writeEnds: [Int]
    }

    @Test("a WAL cut short anywhere opens as the writes made whole before the cut", arguments: seeds)
    func tornWAL(seed: UInt64) throws {
        var random = SplitMix(seed: seed)
        let written = try Self.write(&random)
        let scratch = try TemporaryDirectory()
        // Every write's end, a byte either side of it, and random places in between.
        var cuts = Set(written.writeEnds.flatMap { [$0 - 1, $0, $0 + 1] })
        let span = written.wal.count - written.walStart
        for _ in 0..<40 { cuts.insert(written.walStart + random.next(below: span + 1)) }
        for cut in cuts.sorted() where cut >= written.walStart && cut <= written.wal.count {
            let whole = written.writeEnds.filter { $0 <= cut }.count
            let seen = try Self.open(written.database, wal: written.wal.prefix(cut), in: scratch)
            #expect(seen == Self.records(after: written.writes.prefix(whole)), "seed \(seed): cut at \(cut)")
        }
    }

    @Test("damage in a write hides that write and the ones after it, never one before", arguments: seeds)
    func damagedWAL(seed: UInt64) throws {
        var random = SplitMix(seed: seed)
        let written = try Self.write(&random)
        let scratch = try TemporaryDirectory()
        let starts = [written.walStart] + written.writeEnds.dropLast()
        for _ in 0..<24 {
            let damaged = random.next(below: written.writes.count)
            let range = starts[damaged]..<written.writeEnds[damaged]
            guard !range.isEmpty else { continue }  // a removal of keys already gone writes nothing
            var wal = written.wal
            let offset = range.lowerBound + random.next(below: range.count)
            wal[offset] ^= UInt8(1 + random.next(below: 255))
            let seen = try Self.open(written.database, wal: wal, in: scratch)
            #expect(
                seen == Self.records(after: written.writes.prefix(damaged)),
                "seed \(seed): byte \(offset) of write \(damaged) damaged")
        }
    }

    @Test("malformed rows are dropped, each alone; the rest read back; nothing crashes", arguments: seeds)
    func malformedRows(seed: UInt64) throws {
        var random = SplitMix(seed: seed)
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        let records = (0..<60).map { Self.record($0, &random) }
        try SQLiteJournal(path: path).store(records)
        // What each kind of damage does to a row, and whether its record is still read.
        let damages: [(sql: String, kept: Bool)] = [
            ("UPDATE record SET state = 'done' WHERE url = ?", false),
            ("UPDATE record SET state = '' WHERE url = ?", false),
            ("UPDATE record SET validator = NULL WHERE state = 'partial' AND url = ?", false),
            ("UPDATE record SET size = NULL WHERE state = 'completed' AND url = ?", false),
            ("UPDATE record SET inode = NULL WHERE state = 'completed' AND url = ?", false),
            ("UPDATE record SET missingRanges = 'x-1' WHERE state = 'partial' AND url = ?", false),
        ]
        var expected: [JournalRecord] = []
        var damagedRows: [String] = []
        try DatabaseQueue(path: path).write { db in
            for record in records {
                guard random.next(below: 3) == 0 else {
                    expected.append(record)
                    continue
                }
                let damage = damages[random.next(below: damages.count)]
                try db.execute(sql: damage.sql, arguments: [record.key.url])
                if db.changesCount == 0 || damage.kept {
                    expected.append(record)  // the damage does not apply to its state
                } else {
                    damagedRows.append(record.key.url)
                }
            }
        }
        let journal = try SQLiteJournal(path: path)
        #expect(journal.allRecords() == expected, "seed \(seed): damaged \(damagedRows)")
        for record in records {
            let seen = journal.record(for: record.key)
            #expect(seen == (damagedRows.contains(record.key.url) ? nil : record), "seed \(seed): \(record.key)")
        }
    }

    // MARK: Support

    static func record(_ index: Int, _ random: inout SplitMix) -> JournalRecord {
        let key = JournalKey(url: "http://h/\(index)", destination: "/d/")
        let state: JournalRecord.State =
            switch random.next(below: 4) {
            case 0: .requested
            case 1: .failed(message: "failure \(random.next(below: 1000))")
            case 2:
                .partial(
                    validator: "\"\(random.next(below: 1000))\"", totalBytes: Int64(random.next(below: 1 << 20)),
                    missingRanges: random.next(below: 2) == 0 ? nil : [0..<Int64(1 + random.next(below: 100))])
            default:
                completed(size: Int64(random.next(below: 1 << 20)), modified: Int64(random.next(below: 1 << 30)))
            }
        return JournalRecord(key: key, path: "/d/\(index)", state: state)
    }

    static func completed(size: Int64, modified: Int64) -> JournalRecord.State {
        .completed(size: size, sha256: nil, stamp: FileStamp(size: size, modifiedNanoseconds: modified, inode: 9))
    }

    /// The records `writes` leave, in the order their keys were first stored.
    static func records(after writes: some Sequence<Write>) -> [JournalRecord] {
        var order: [JournalKey] = []
        var latest: [JournalKey: JournalRecord] = [:]
        for write in writes {
            switch write {
            case .store(let records):
                for record in records {
                    if latest[record.key] == nil { order.append(record.key) }
                    latest[record.key] = record
                }
            case .remove(let keys):
                for key in keys where latest.removeValue(forKey: key) != nil { order.removeAll { $0 == key } }
            }
        }
        return order.compactMap { latest[$0] }
    }

    /// A random run of writes on a new journal whose schema is in the database file, every write in the WAL.
    static func write(_ random: inout SplitMix) throws -> Written {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        do {
            let schema = try SQLiteJournal(path: path)
            schema.finish()
        }  // closed: the schema is checkpointed into the database file and the WAL is gone
        let journal = try SQLiteJournal(path: path)
        let walSize = { (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0 }
        let walStart = max(32, walSize())  // the WAL's header is 32 bytes
        var writes: [Write] = []
        var ends: [Int] = []
        var stored: [JournalKey] = []
        for _ in 0..<24 {
            let write: Write
            if !stored.isEmpty, random.next(below: 5) == 0 {
                write = .remove((0..<(1 + random.next(below: 3))).map { _ in stored[random.next(below: stored.count)] })
                if case .remove(let keys) = write { journal.remove(keys) }
            } else {
                let records = (0..<(1 + random.next(below: 4))).map { _ in record(random.next(below: 40), &random) }
                stored += records.map(\.key)
                write = .store(records)
                journal.store(records)
            }
            writes.append(write)
            _ = journal.allRecords()  // committed: in the WAL
            ends.append(walSize())
        }
        // Read while the journal is open: closing it would checkpoint the WAL into the database.
        let written = Written(
            writes: writes, database: try Data(contentsOf: URL(fileURLWithPath: path)),
            wal: try Data(contentsOf: URL(fileURLWithPath: path + "-wal")), walStart: walStart, writeEnds: ends)
        withExtendedLifetime(journal) {}
        return written
    }

    /// Every record of a journal made of `database` and `wal` in `scratch`, opened as the next run opens it.
    static func open(_ database: Data, wal: Data, in scratch: TemporaryDirectory) throws -> [JournalRecord] {
        let path = scratch.file("j.sqlite").path
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        try database.write(to: URL(fileURLWithPath: path))
        try Data(wal).write(to: URL(fileURLWithPath: path + "-wal"))
        let journal = try SQLiteJournal(path: path)
        defer { journal.finish() }
        return journal.allRecords()
    }
}
