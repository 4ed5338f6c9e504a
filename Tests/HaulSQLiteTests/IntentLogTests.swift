import Foundation
import GRDB
import HTTPTypes
import Haul
import HaulTestSupport
import Testing

@testable import HaulSQLite

/// The journal's write path: one append to a log per change, folded into the database in batches, at close, or by
/// the next journal after a kill.
@Suite("SQLite journal's log", .timeLimit(.minutes(1)))
struct IntentLogTests {
    func record(_ index: Int, _ state: JournalRecord.State = .requested) -> JournalRecord {
        JournalRecord(key: JournalKey(url: "http://h/\(index)", destination: "/d/"), path: "/d/\(index)", state: state)
    }

    /// Rows in the database file itself, read past any journal.
    func rowsInDatabase(_ path: String) throws -> Int {
        try DatabaseQueue(path: path).read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM record") ?? 0 }
    }

    /// Where the whole frames of a log end (frames: length, 4 bytes; checksum, 8; payload): zeros follow, the
    /// space reserved for more.
    func framesEnd(of bytes: [UInt8]) -> Int {
        var offset = 0
        while bytes.count - offset >= 12 {
            let length = (0..<4).reduce(0) { $0 | Int(bytes[offset + $1]) << (8 * $1) }
            guard length > 0, length <= bytes.count - offset - 12 else { break }
            offset += 12 + length
        }
        return offset
    }

    func logs(in directory: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).filter { $0.contains("-log.") }
    }

    @Test("a killed journal's log is folded by the next one: every change in order, a torn last frame ignored")
    func killedJournalIsReplayed() throws {
        let live = try TemporaryDirectory()
        let journal = try SQLiteJournal(path: live.file("j.sqlite").path)
        for index in 0..<300 { journal.store(record(index)) }
        journal.store(
            (0..<20).map {
                record(
                    $0,
                    .completed(
                        size: Int64($0), sha256: "ab",
                        stamp: FileStamp(size: Int64($0), modifiedNanoseconds: 7, inode: 9)))
            })
        journal.remove((20..<30).map { record($0).key })
        // Every field a record has, through the log's encoding.
        var request = DownloadRequest(
            url: URL(string: "http://h/every?x=%20")!, destination: .file(URL(fileURLWithPath: "/d/é")),
            expectedSize: 9, priority: -2)
        // A field the log keeps (credential fields it never writes).
        request.headerFields[HTTPField.Name("X-Label")!] = "Bearer ü"
        let every: [JournalRecord] = [
            JournalRecord(
                key: record(300).key, path: "/d/300", state: .partial(validator: "\"e\"", totalBytes: 1 << 40),
                request: request),
            JournalRecord(
                key: record(301).key, path: "/d/301",
                state: .completed(
                    size: 9, sha256: "cd", stamp: FileStamp(size: 9, modifiedNanoseconds: -5, inode: UInt64.max))),
            JournalRecord(key: record(302).key, path: "/d/302", state: .failed(message: "404 ✗"), request: request),
        ]
        journal.store(every)
        let expected =
            (0..<20).map {
                record(
                    $0,
                    .completed(
                        size: Int64($0), sha256: "ab",
                        stamp: FileStamp(size: Int64($0), modifiedNanoseconds: 7, inode: 9)))
            } + (30..<300).map { record($0) }
            + every

        // What a kill leaves: the files as they are now, with nobody holding the log.
        let killed = try TemporaryDirectory()
        let names = try FileManager.default.contentsOfDirectory(atPath: live.path).filter { $0.hasPrefix("j.sqlite") }
        for name in names { try FileManager.default.copyItem(at: live.file(name), to: killed.file(name)) }
        let log = try #require(logs(in: killed.url).first)
        #expect(try rowsInDatabase(killed.file("j.sqlite").path) == 0)  // everything is still in the log
        // A frame cut short right after the last whole one (in the space reserved for the log), as a kill or a
        // power loss in the middle of an append would leave it.
        let handle = try FileHandle(forWritingTo: killed.file(log))
        try handle.seek(toOffset: UInt64(framesEnd(of: [UInt8](try Data(contentsOf: killed.file(log))))))
        try handle.write(contentsOf: Data([0x40, 0, 0, 0, 1, 2, 3, 4, 5]))
        try handle.close()

        let reopened = try SQLiteJournal(path: killed.file("j.sqlite").path)
        #expect(reopened.allRecords() == expected)
        #expect(try rowsInDatabase(killed.file("j.sqlite").path) == expected.count)
        #expect(!logs(in: killed.url).contains(log))
        #expect(journal.allRecords() == expected)  // the live one is untouched
    }

    @Test("every foldThreshold changes the log is replaced and the full one folded, then deleted; close folds the rest")
    func foldsInBatchesAndAtClose() async throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        let threshold = 100
        do {
            let journal = try SQLiteJournal(path: path, foldThreshold: threshold)
            for index in 0..<(threshold - 1) { journal.store(record(index)) }
            let first = logs(in: dir.url)
            #expect(first.count == 1)
            #expect(try rowsInDatabase(path) == 0)
            journal.store(record(threshold - 1))
            try await eventually("the full log is folded") {
                (try? rowsInDatabase(path)) == threshold
            }
            try await eventually("and deleted") { logs(in: dir.url).count == 1 && logs(in: dir.url) != first }
            journal.store(record(-1))
            #expect(try rowsInDatabase(path) == threshold)
        }
        #expect(try rowsInDatabase(path) == threshold + 1)
        #expect(logs(in: dir.url).isEmpty)
        #expect(try SQLiteJournal(path: path).allRecords().last == record(-1))
    }

    @Test("a log a killed process of an earlier version left (byte-wise FNV-1a checksums) is still replayed")
    func earlierChecksumsAreReplayed() throws {
        let live = try TemporaryDirectory()
        let journal = try SQLiteJournal(path: live.file("j.sqlite").path)
        let sha256 = String(repeating: "ab", count: 32)
        let expected = (0..<50).map {
            record(
                $0,
                .completed(
                    size: Int64($0), sha256: sha256, stamp: FileStamp(size: Int64($0), modifiedNanoseconds: 7, inode: 9)
                ))
        }
        journal.store(Array(expected[..<10]))
        for record in expected[10...] { journal.store(record) }
        let killed = try TemporaryDirectory()
        let names = try FileManager.default.contentsOfDirectory(atPath: live.path).filter { $0.hasPrefix("j.sqlite") }
        for name in names { try FileManager.default.copyItem(at: live.file(name), to: killed.file(name)) }
        let log = killed.file(try #require(logs(in: killed.url).first))
        // Each frame: length (4 bytes), checksum (8), payload; the checksums rewritten as the first format had them.
        var bytes = [UInt8](try Data(contentsOf: log))
        let end = framesEnd(of: bytes)
        #expect(bytes[end...].allSatisfy { $0 == 0 })
        var offset = 0
        while offset < end {
            let length = (0..<4).reduce(0) { $0 | Int(bytes[offset + $1]) << (8 * $1) }
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in bytes[(offset + 12)..<(offset + 12 + length)] {
                hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3
            }
            for index in 0..<8 { bytes[offset + 4 + index] = UInt8(truncatingIfNeeded: hash >> (8 * index)) }
            offset += 12 + length
        }
        #expect(offset == end)
        try Data(bytes[..<end]).write(to: log)  // as the write(2) of earlier versions left it: no reserved space
        #expect(try SQLiteJournal(path: killed.file("j.sqlite").path).allRecords() == expected)
    }

    @Test("a journal opened while another is open sees its changes; a later change in either wins")
    func twoOpenJournals() throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        let first = try SQLiteJournal(path: path)
        first.store(record(1))
        first.store(record(2))
        let second = try SQLiteJournal(path: path)
        #expect(second.allRecords() == [record(1), record(2)])
        second.store(record(1, .failed(message: "404")))
        do { _ = try SQLiteJournal(path: path) }  // opened and closed: folds nothing of the others
        first.store(
            record(2, .completed(size: 1, sha256: "ab", stamp: FileStamp(size: 1, modifiedNanoseconds: 7, inode: 9))))
        #expect(
            try SQLiteJournal(path: path).allRecords() == [
                record(1, .failed(message: "404")),
                record(
                    2, .completed(size: 1, sha256: "ab", stamp: FileStamp(size: 1, modifiedNanoseconds: 7, inode: 9))),
            ])
        #expect(logs(in: dir.url).count == 2)
    }
    @Test(
        "a killed journal's older changes are folded after a survivor's newer ones: the newer change wins"
    )
    func killedJournalsOlderChangesLose() throws {
        let live = try TemporaryDirectory()
        let path = live.file("j.sqlite").path
        let stamp = FileStamp(size: 9, modifiedNanoseconds: 5, inode: 7)
        // The run that will be killed writes first: a partial for one file, a record for another.
        let killedRun = try SQLiteJournal(path: path)
        killedRun.store(record(1, .partial(validator: "\"v\"", totalBytes: 9)))
        killedRun.store(record(2, .partial(validator: "\"v\"", totalBytes: 9)))
        // The survivor, opened meanwhile, completes the first file and records the second as failed, then ends
        // (folds).
        do {
            let survivor = try SQLiteJournal(path: path)
            survivor.store(record(1, .completed(size: 9, sha256: "ab", stamp: stamp)))
            survivor.store(record(2, .failed(message: "404")))
            survivor.store(record(3))
            survivor.finish()
        }
        // And a change the killed run made after the survivor's: that one wins.
        killedRun.store(record(3, .failed(message: "later")))
        // The killed run's log is left as it was, with nobody holding it.
        let killed = try TemporaryDirectory()
        let names = try FileManager.default.contentsOfDirectory(atPath: live.path).filter { $0.hasPrefix("j.sqlite") }
        for name in names { try FileManager.default.copyItem(at: live.file(name), to: killed.file(name)) }
        let killedLog = try #require(logs(in: killed.url).first)
        let reopened = try SQLiteJournal(path: killed.file("j.sqlite").path)
        let byKey = Dictionary(uniqueKeysWithValues: reopened.allRecords().map { ($0.key, $0) })
        #expect(
            byKey == [
                record(1).key: record(1, .completed(size: 9, sha256: "ab", stamp: stamp)),
                record(2).key: record(2, .failed(message: "404")),
                record(3).key: record(3, .failed(message: "later")),
            ])
        #expect(!logs(in: killed.url).contains(killedLog))
        withExtendedLifetime(killedRun) {}
    }

    @Test("a killed run's segmented partials keep their missing ranges when the next journal replays its log")
    func killedRunKeepsMissingRanges() throws {
        let live = try TemporaryDirectory()
        let path = live.file("j.sqlite").path
        let killedRun = try SQLiteJournal(path: path)
        let one = record(1, .partial(validator: "\"v\"", totalBytes: 4 << 20, missingRanges: [0..<1_048_576]))
        let batch = [
            record(2, .partial(validator: "\"v\"", totalBytes: nil, missingRanges: [5..<9, 20..<Int64.max])),
            record(3, .partial(validator: "\"v\"", totalBytes: 9, missingRanges: [])),
            record(4, .partial(validator: "\"v\"", totalBytes: 9)),
        ]
        killedRun.store(one)
        killedRun.store(batch)
        // The killed run's log as it was, with nobody holding it; nothing in the database yet.
        let killed = try TemporaryDirectory()
        let names = try FileManager.default.contentsOfDirectory(atPath: live.path).filter { $0.hasPrefix("j.sqlite") }
        for name in names { try FileManager.default.copyItem(at: live.file(name), to: killed.file(name)) }
        let killedLog = try #require(logs(in: killed.url).first)
        #expect(try rowsInDatabase(killed.file("j.sqlite").path) == 0)

        let reopened = try SQLiteJournal(path: killed.file("j.sqlite").path)
        #expect(reopened.allRecords() == [one] + batch)
        #expect(try rowsInDatabase(killed.file("j.sqlite").path) == 4)
        #expect(!logs(in: killed.url).contains(killedLog))
        withExtendedLifetime(killedRun) {}
    }

    /// The payload of an upsert frame as versions before missing ranges wrote it: time, kind, then the fields of a
    /// row in the log's order, ending with `inode` (`record`'s key and path, the rest given); `after` is appended to
    /// it (the new field, by hand).
    func upsertPayload(
        _ record: JournalRecord, state: String, sequence: Int64, time: Int64, validator: String?, totalBytes: Int64?,
        after: [UInt8] = []
    ) -> [UInt8] {
        var bytes: [UInt8] = []
        func integer(_ value: some FixedWidthInteger) { withUnsafeBytes(of: value.littleEndian) { bytes += $0 } }
        func text(_ value: String?) {
            guard let value else { return integer(UInt32.max) }
            integer(UInt32(value.utf8.count))
            bytes += value.utf8
        }
        func number(_ value: Int64?) {
            guard let value else { return bytes.append(0) }
            bytes.append(1)
            integer(value)
        }
        number(time)
        bytes.append(1)  // an upsert, the last frame of its write
        for field in [record.key.url, record.key.destination, record.path, state] { text(field) }
        for field in [validator, nil, nil, nil] { text(field) }  // sha256, request, failure
        for field in [sequence, totalBytes, nil, nil, nil] { number(field) }  // size, modified, inode
        return bytes + after
    }

    /// A frame around `payload`: length, checksum (byte-wise FNV-1a, which the reader takes from the first format
    /// on), payload.
    func frame(_ payload: [UInt8]) -> [UInt8] {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in payload { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        var bytes: [UInt8] = []
        withUnsafeBytes(of: UInt32(payload.count).littleEndian) { bytes += $0 }
        withUnsafeBytes(of: hash.littleEndian) { bytes += $0 }
        return bytes + payload
    }

    @Test("a frame without missing ranges, as earlier versions wrote them, reads as nil, before and after other frames")
    func framesWithoutMissingRanges() throws {
        let time: Int64 = 1_700_000_000_000_000_000
        let old = record(1, .partial(validator: "\"a\"", totalBytes: 9))
        let segmented = record(2, .partial(validator: "\"b\"", totalBytes: 40, missingRanges: [0..<10, 20..<30]))
        let none = record(3, .requested)
        let absent = record(4, .partial(validator: "\"d\"", totalBytes: nil))
        // This version writes a record without ranges as earlier versions did, byte for byte (an earlier version
        // still reads it).
        var written: [UInt8] = []
        IntentLog.frame(upserting: old, sequence: 1, request: nil, time: time, into: &written)
        let oldPayload = upsertPayload(
            old, state: "partial", sequence: 1, time: time, validator: "\"a\"", totalBytes: 9)
        #expect(Array(written[12...]) == oldPayload)

        // Old frames between, before and after ones with the field: each ends where its length says, and none
        // takes the next frame's bytes for its ranges. The field may also be there as absent (a later version's).
        let text = Array("0-10,20-30".utf8)
        let log =
            frame(oldPayload)
            + frame(
                upsertPayload(
                    segmented, state: "partial", sequence: 2, time: time + 1, validator: "\"b\"", totalBytes: 40,
                    after: withUnsafeBytes(of: UInt32(text.count).littleEndian) { Array($0) } + text))
            + frame(
                upsertPayload(none, state: "requested", sequence: 3, time: time + 2, validator: nil, totalBytes: nil))
            + frame(
                upsertPayload(
                    absent, state: "partial", sequence: 4, time: time + 3, validator: "\"d\"", totalBytes: nil,
                    after: [0xff, 0xff, 0xff, 0xff]))
        // As a killed process's log, replayed by the next journal to open the database.
        let dir = try TemporaryDirectory()
        try Data(log).write(to: dir.file("j.sqlite-log.1.1"))
        let journal = try SQLiteJournal(path: dir.file("j.sqlite").path)
        #expect(journal.allRecords() == [old, segmented, none, absent])
        #expect(!FileManager.default.fileExists(atPath: dir.file("j.sqlite-log.1.1").path))  // folded, deleted
        journal.finish()
        #expect(try SQLiteJournal(path: dir.file("j.sqlite").path).allRecords() == [old, segmented, none, absent])
    }

    @Test("a log grows past the space reserved for it, by small changes and by a batch larger than a reservation")
    func logGrowsPastReservations() throws {
        let live = try TemporaryDirectory()
        let path = live.file("j.sqlite").path
        let journal = try SQLiteJournal(path: path, foldThreshold: 1_000_000)
        // ~200 bytes a change: 1,000 singles (~200 KB, past the first reservations of 64 and 128 KiB), then one
        // batch of ~2 MB (past a whole 1 MiB step at once), then singles again.
        let padding = String(repeating: "p", count: 120)
        func padded(_ index: Int) -> JournalRecord {
            JournalRecord(
                key: JournalKey(url: "http://h/\(index)", destination: "/d/"), path: "/d/\(padding)\(index)",
                state: .completed(
                    size: Int64(index), sha256: "ab",
                    stamp: FileStamp(size: Int64(index), modifiedNanoseconds: 7, inode: 9)))
        }
        for index in 0..<1_000 { journal.store(padded(index)) }
        journal.store((1_000..<11_000).map(padded))
        for index in 11_000..<11_500 { journal.store(padded(index)) }
        let expected = (0..<11_500).map(padded)
        let log = try #require(logs(in: live.url).first)
        let bytes = [UInt8](try Data(contentsOf: live.file(log)))
        #expect(framesEnd(of: bytes) > 2 << 20)
        #expect(try rowsInDatabase(path) == 0)

        // Read back as another open journal reads it, and as the next journal replays it after a kill.
        #expect(try SQLiteJournal(path: path).allRecords() == expected)
        let killed = try TemporaryDirectory()
        let names = try FileManager.default.contentsOfDirectory(atPath: live.path).filter { $0.hasPrefix("j.sqlite") }
        for name in names { try FileManager.default.copyItem(at: live.file(name), to: killed.file(name)) }
        #expect(try SQLiteJournal(path: killed.file("j.sqlite").path).allRecords() == expected)
        #expect(try rowsInDatabase(killed.file("j.sqlite").path) == expected.count)
        withExtendedLifetime(journal) {}
    }
}
