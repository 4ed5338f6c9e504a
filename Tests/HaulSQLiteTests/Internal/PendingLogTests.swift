import Foundation
import GRDB
import Haul
import HaulTestSupport
import Testing

@testable import HaulSQLite

/// The pending log: what a kill in the middle of an append leaves, and what the next journal does with the batches a
/// killed one left (commits them once, in the order written; never one already committed).
@Suite("SQLite journal's pending log", .timeLimit(.minutes(1)))
struct PendingLogTests {
    func change(_ index: Int, _ random: inout SplitMix) -> JournalChange {
        let record = SQLiteJournalFuzzTests.record(index, &random)
        if random.next(below: 5) == 0 { return .remove(record.key) }
        let request = random.next(below: 2) == 0 ? nil : "{\"u\":\"\(String(repeating: "é", count: index))\"}"
        return .upsert(
            RecordRow(
                url: record.key.url, destination: record.key.destination, path: record.path, state: "failed",
                sequence: 0, request: request, failure: "f\(index)"))
    }

    @Test(
        "every change reads back from its payload; bytes it does not make read as nothing",
        arguments: [0, 1, 2] as [UInt64])
    func payloads(seed: UInt64) {
        var random = SplitMix(seed: seed)
        for index in 0..<50 {
            let change = change(index, &random)
            #expect(JournalChange.read(change.payload)?.change == change)
            let payload = change.payload
            #expect(JournalChange.read(Array(payload.dropLast())) == nil, "cut: \(change)")
            #expect(JournalChange.read(payload + [0]) == nil, "longer: \(change)")
        }
        #expect(JournalChange.read([]) == nil)
        #expect(JournalChange.read([7, 0, 0, 0, 0]) == nil)
    }

    @Test("a log killed in the middle of any append reads back as the frames made whole before it")
    func tornAppends() throws {
        var random = SplitMix(seed: 9)
        let dir = try TemporaryDirectory()
        let database = dir.file("j.sqlite").path
        let log = try PendingLog(databasePath: database, instance: "t.1", side: 0, batch: 5)
        let payloads = (0..<20).map { change($0, &random).payload }
        var ends: [Int] = []
        var end = PendingLog.headerSize
        for payload in payloads {
            try log.append([payload])
            end += 16 + (payload.count + 7) & ~7
            ends.append(end)
        }
        let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: log.path)).prefix(end))
        #expect(PendingLog.parse(bytes)?.payloads == payloads)
        #expect(PendingLog.parse(bytes)?.batch == 5)
        // A kill during the append of frame k leaves its length zero (the length is stored last) and any part of
        // the rest written; the space after reads as zeros.
        for (index, frameEnd) in ends.enumerated() {
            let start = index == 0 ? PendingLog.headerSize : ends[index - 1]
            for cut in start...frameEnd {
                var torn = Array(bytes[..<cut]) + [UInt8](repeating: 0, count: frameEnd - cut + 64)
                for offset in start..<min(start + 8, cut) { torn[offset] = 0 }
                #expect(
                    PendingLog.parse(torn)?.payloads == Array(payloads.prefix(index)), "frame \(index), cut at \(cut)")
            }
        }
        // Restarted: the frames of the batch before no longer count, though their bytes are there.
        log.restart(batch: 6)
        try log.append([payloads[0]])
        let descriptor = open(log.path, O_RDONLY)
        defer { close(descriptor) }
        let restarted = PendingLog.read(descriptor)
        #expect(restarted?.batch == 6)
        #expect(restarted?.payloads == [payloads[0]])
        #expect(PendingLog.parse([UInt8](repeating: 0, count: 64)) == nil)
        log.remove()
    }

    @Test("a frame whose bytes changed after it was written fails its checksum and ends the log, reported as damaged")
    func damagedFrames() throws {
        var random = SplitMix(seed: 11)
        let dir = try TemporaryDirectory()
        let log = try PendingLog(databasePath: dir.file("j.sqlite").path, instance: "t.1", side: 0, batch: 2)
        let payloads = (0..<6).map { change($0, &random).payload }
        try log.append(payloads)
        let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: log.path)))
        #expect(PendingLog.parse(bytes).map { ($0.payloads, $0.damaged) }! == (payloads, false))
        // Any one byte of the third frame's payload, changed in any bit: the two frames before it are read.
        let third = PendingLog.headerSize + payloads[..<2].reduce(0) { $0 + 16 + ($1.count + 7) & ~7 } + 16
        for offset in third..<(third + payloads[2].count) {
            for bit in 0..<8 {
                var damaged = bytes
                damaged[offset] ^= 1 << bit
                let read = PendingLog.parse(damaged)
                #expect(read?.damaged == true && read?.payloads == Array(payloads[..<2]), "byte \(offset), bit \(bit)")
            }
        }
        log.remove()
    }

    @Test("a log the version before wrote (its frames have no checksum) still reads back whole")
    func logWithoutChecksums() {
        var random = SplitMix(seed: 12)
        let payloads = (0..<5).map { change($0, &random).payload }
        var bytes: [UInt8] = []
        PendingLog.put(0x4C44_4E45_5048_4148, into: &bytes)  // "HAHPENDL"
        PendingLog.put(7, into: &bytes)
        for payload in payloads {
            PendingLog.put(UInt64(payload.count), into: &bytes)
            PendingLog.put(7, into: &bytes)
            bytes += payload + [UInt8](repeating: 0, count: (payload.count + 7) & ~7 - payload.count)
        }
        let read = PendingLog.parse(bytes + [UInt8](repeating: 0, count: 64))
        #expect(read?.batch == 7 && read?.payloads == payloads && read?.damaged == false)
    }

    @Test("a batch many times the space a log reserves at first grows it, and reads back whole, frame by frame")
    func batchLargerThanTheReservation() throws {
        let dir = try TemporaryDirectory()
        let log = try PendingLog(databasePath: dir.file("j.sqlite").path, instance: "t.1", side: 0, batch: 3)
        // 3 MiB in frames of odd sizes, appended one and several at a time: the reservation is grown many times, and
        // frames straddle the ends of the reserved space.
        var random = SplitMix(seed: 4)
        var payloads: [[UInt8]] = []
        var size = 0
        while size < 3 << 20 {
            let payload = (0..<(1 + random.next(below: 9_000))).map { _ in UInt8(random.next(below: 256)) }
            payloads.append(payload)
            size += payload.count
        }
        var appended = 0
        while appended < payloads.count {
            let count = min(1 + random.next(below: 4), payloads.count - appended)
            try log.append(Array(payloads[appended..<appended + count]))
            appended += count
        }
        let descriptor = open(log.path, O_RDONLY)
        defer { close(descriptor) }
        let read = PendingLog.read(descriptor)
        #expect(read?.batch == 3)
        #expect(read?.payloads.count == payloads.count)
        #expect(read?.payloads == payloads)
        log.remove()
    }

    @Test("a killed journal's batches are committed by the next one, in the order written, and the logs deleted")
    func leftBatches() throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        try SQLiteJournal(path: path).finish()  // the schema
        let key = JournalKey(url: "http://h/a", destination: "/d/")
        let gone = JournalKey(url: "http://h/b", destination: "/d/")
        func row(_ key: JournalKey, _ failure: String) -> RecordRow {
            RecordRow(
                url: key.url, destination: key.destination, path: "/d/a", state: "failed", sequence: 0,
                failure: failure)
        }
        // Side 1 holds the batch after side 0's; a log goes once its descriptor closes unlocked, as at a kill.
        do {
            let later = try PendingLog(databasePath: path, instance: "dead.7", side: 1, batch: 2)
            try later.append([JournalChange.upsert(row(key, "second")).payload, JournalChange.remove(gone).payload])
            let earlier = try PendingLog(databasePath: path, instance: "dead.7", side: 0, batch: 1)
            try earlier.append([
                JournalChange.upsert(row(key, "first")).payload, JournalChange.upsert(row(gone, "x")).payload,
            ])
        }
        let journal = try SQLiteJournal(path: path)
        #expect(journal.record(for: key)?.state == .failed(message: "second"))
        #expect(journal.record(for: gone) == nil)
        let left = try FileManager.default.contentsOfDirectory(atPath: dir.url.path).filter { $0.contains("dead.7") }
        #expect(left.isEmpty, "\(left)")
        let noted = try DatabaseQueue(path: path).read { db in
            try Int.fetchOne(db, sql: "SELECT count(*) FROM committedBatch")
        }
        #expect(noted == 0)
    }

    @Test("a batch its journal committed before it was killed is not committed again over what came after")
    func committedBatchesStay() throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        let key = JournalKey(url: "http://h/a", destination: "/d/")
        // The killed journal committed batch 1 (noted in the same transaction), then another journal changed the key.
        do {
            let other = try SQLiteJournal(path: path)
            other.store(JournalRecord(key: key, path: "/d/a", state: .failed(message: "newer")))
        }
        try DatabaseQueue(path: path).write { db in
            try db.execute(sql: "INSERT INTO committedBatch VALUES ('dead.8', 1)")
        }
        do {
            let log = try PendingLog(databasePath: path, instance: "dead.8", side: 0, batch: 1)
            try log.append([
                JournalChange.upsert(
                    RecordRow(
                        url: key.url, destination: key.destination, path: "/d/a", state: "failed", sequence: 0,
                        failure: "older")
                ).payload
            ])
        }
        #expect(try SQLiteJournal(path: path).record(for: key)?.state == .failed(message: "newer"))
    }

    @Test("a live journal's changes not committed yet are found by a journal opened after, never committed by it")
    func writesSurviveAnUnfinishedJournal() throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        let key = JournalKey(url: "http://h/a", destination: "/d/")
        let log = try PendingLog(databasePath: path, instance: "dead.9", side: 0, batch: 1)
        try log.append([
            JournalChange.upsert(
                RecordRow(url: key.url, destination: key.destination, path: "/d/a", state: "requested", sequence: 0)
            ).payload
        ])
        // Still held (a live journal's): the next journal finds its change, and leaves the log to its journal.
        #expect(try SQLiteJournal(path: path).record(for: key)?.state == .requested)
        #expect(FileManager.default.fileExists(atPath: log.path))
        let committed = try DatabaseQueue(path: path).read { db in
            try Int.fetchOne(db, sql: "SELECT count(*) FROM record")
        }
        #expect(committed == 0)
        withExtendedLifetime(log) {}
    }
}
