import Foundation
import Haul
import HaulTestSupport
import Testing

@testable import HaulSQLite

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The journal's log after torn and damaged writes: a random run of stores and removals (one record, or a batch
/// in one write), its log then cut at every byte, cut and followed by zeros (the space a mapped log reserves), or
/// damaged in its last writes. Read back, it gives exactly the writes that were whole, in order: nothing of a
/// torn or damaged write, everything before it. Seeded: a failure names its seed and case.
@Suite("SQLite journal's log, torn and damaged", .timeLimit(.minutes(1)))
struct IntentLogFuzzTests {
    static let seeds: [UInt64] = Array(0..<4)

    /// One call to the journal: a store or a removal of one or more records, each a frame of the log.
    enum Write {
        case store([JournalRecord])
        case remove([JournalKey])

        var changes: Int {
            switch self {
            case .store(let records): records.count
            case .remove(let keys): keys.count
            }
        }
    }

    /// A journal written with `writes` and left as a kill leaves it: its database files and its log's bytes.
    struct KilledJournal {
        let writes: [Write]
        /// The database's files but the log (name, contents).
        let databaseFiles: [(name: String, bytes: [UInt8])]
        let logName: String
        let log: [UInt8]
        /// Where each write's frames end in `log`.
        let writeEnds: [Int]
    }

    @Test("a log cut at any byte, or cut and followed by zeros, reads back as the writes made whole", arguments: seeds)
    func tornAnywhere(seed: UInt64) throws {
        var random = SplitMix(seed: seed)
        let killed = try Self.killedJournal(&random)
        let scratch = try ScratchLog()
        let all = try scratch.read(killed.log)
        #expect(all.count == killed.writes.reduce(0) { $0 + $1.changes }, "seed \(seed): every change has a frame")
        for length in 0...killed.log.count {
            let expected = Array(all.prefix(Self.changes(in: killed, endingBy: length)))
            let cut = Array(killed.log[..<length])
            #expect(try scratch.read(cut) == expected, "seed \(seed): cut at \(length)")
            // Zeros after the cut restore a write whose bytes cut off were zeros (a frame can end in them): up to
            // there, the bytes are the log's own.
            let padding = 1 + random.next(below: 64)
            let same = length + killed.log[length...].prefix(padding).prefix { $0 == 0 }.count
            #expect(
                try scratch.read(cut + repeatElement(0, count: padding))
                    == Array(all.prefix(Self.changes(in: killed, endingBy: same))),
                "seed \(seed): cut at \(length), zeros after")
        }
    }

    @Test("damage in the last writes hides that write and the ones after it, never one before", arguments: seeds)
    func damagedLastWrites(seed: UInt64) throws {
        var random = SplitMix(seed: seed)
        let killed = try Self.killedJournal(&random)
        let scratch = try ScratchLog()
        let all = try scratch.read(killed.log)
        for trial in 0..<300 {
            // One of the last three writes is damaged first (one to three bytes: in its frame headers or payloads),
            // maybe one after it too.
            let damaged = max(0, killed.writes.count - 1 - random.next(below: 3))
            let start = damaged == 0 ? 0 : killed.writeEnds[damaged - 1]
            var bytes = killed.log
            var positions = [start + random.next(below: killed.writeEnds[damaged] - start)]
            for _ in 0..<random.next(below: 3) {
                positions.append(positions[0] + random.next(below: bytes.count - positions[0]))
            }
            for position in positions { bytes[position] ^= UInt8(1 + random.next(below: 255)) }
            let expected = Array(all.prefix(Self.changes(in: killed, endingBy: start)))
            #expect(
                try scratch.read(bytes) == expected,
                "seed \(seed), trial \(trial): write \(damaged) damaged at \(positions)")
        }
    }

    @Test("the next journal opened replays a torn or damaged log to exactly the writes made whole", arguments: seeds)
    func reopenedAfterTear(seed: UInt64) throws {
        var random = SplitMix(seed: seed)
        let killed = try Self.killedJournal(&random)
        for trial in 0..<6 {
            var log = killed.log
            let whole: Int
            if trial.isMultiple(of: 2) {
                let length = random.next(below: log.count + 1)
                log.removeSubrange(length...)
                whole = killed.writeEnds.prefix { $0 <= length }.count
            } else {
                whole = killed.writes.count - 1 - random.next(below: min(3, killed.writes.count))
                let start = whole == 0 ? 0 : killed.writeEnds[whole - 1]
                log[start + random.next(below: killed.writeEnds[whole] - start)] ^= 0x5a
            }
            let directory = try TemporaryDirectory()
            for file in killed.databaseFiles { try Data(file.bytes).write(to: directory.file(file.name)) }
            try Data(log).write(to: directory.file(killed.logName))
            let reopened = try SQLiteJournal(path: directory.file("j.sqlite").path)
            let records = Dictionary(uniqueKeysWithValues: reopened.allRecords().map { ($0.key, $0) })
            #expect(
                records == Self.model(of: killed.writes.prefix(whole)),
                "seed \(seed), trial \(trial): \(whole) of \(killed.writes.count) writes whole")
            #expect(!FileManager.default.fileExists(atPath: directory.file(killed.logName).path))
        }
    }

    // MARK: Helpers

    /// The records that `writes` leave, by key.
    static func model(of writes: some Sequence<Write>) -> [JournalKey: JournalRecord] {
        var records: [JournalKey: JournalRecord] = [:]
        for write in writes {
            switch write {
            case .store(let stored): for record in stored { records[record.key] = record }
            case .remove(let keys): for key in keys { records[key] = nil }
            }
        }
        return records
    }

    /// How many changes are in the writes whose frames all lie in the first `length` bytes.
    static func changes(in killed: KilledJournal, endingBy length: Int) -> Int {
        zip(killed.writes, killed.writeEnds).prefix { $0.1 <= length }.reduce(0) { $0 + $1.0.changes }
    }

    /// A file to hold one version of a log after another, for the log's replay to read.
    final class ScratchLog {
        let directory: TemporaryDirectory
        let descriptor: Int32

        init() throws {
            directory = try TemporaryDirectory()
            descriptor = open(directory.file("log").path, O_RDWR | O_CREAT, 0o600)
            try #require(descriptor >= 0)
        }

        deinit { close(descriptor) }

        /// The changes the log's replay reads from `bytes` (as the next journal reads a dead journal's log).
        func read(_ bytes: [UInt8]) throws -> [JournalOperation] {
            try #require(ftruncate(descriptor, 0) == 0)
            let written = bytes.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
            try #require(written == bytes.count)
            return IntentLog.read(descriptor).map(\.operation)
        }
    }

    /// A journal that made 16 random writes and was then killed: its files as they were, and where each write's
    /// frames end in its log (found by walking the frames: length, 4 bytes; checksum, 8; payload).
    private static func killedJournal(_ random: inout SplitMix) throws -> KilledJournal {
        let live = try TemporaryDirectory()
        let journal = try SQLiteJournal(path: live.file("j.sqlite").path, foldThreshold: 1_000_000)
        var writes: [Write] = []
        for _ in 0..<16 {
            // Distinct keys within one write, as a queue's batch has them.
            var keys: [JournalKey] = []
            for _ in 0..<(random.next(below: 3) == 0 ? 2 + random.next(below: 4) : 1) {
                let key = randomKey(&random)
                if !keys.contains(key) { keys.append(key) }
            }
            let write: Write =
                random.next(below: 4) == 0 ? .remove(keys) : .store(keys.map { randomRecord($0, &random) })
            switch write {
            case .store(let records) where records.count == 1: journal.store(records[0])
            case .store(let records): journal.store(records)
            case .remove(let keys) where keys.count == 1: journal.remove(keys[0])
            case .remove(let keys): journal.remove(keys)
            }
            writes.append(write)
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: live.path).filter { $0.hasPrefix("j.sqlite") }
        let logName = try #require(names.first { $0.contains("-log.") })
        var log = try #require(contentsOf(live.file(logName)))
        var frameEnds: [Int] = []
        var offset = 0
        while log.count - offset >= 12 {
            let length = (0..<4).reduce(0) { $0 | Int(log[offset + $1]) << (8 * $1) }
            guard length > 0, length <= log.count - offset - 12 else { break }
            offset += 12 + length
            frameEnds.append(offset)
        }
        log.removeSubrange(offset...)  // the zeros of the space reserved ahead
        try #require(frameEnds.count == writes.reduce(0) { $0 + $1.changes })
        var writeEnds: [Int] = []
        var frames = 0
        for write in writes {
            frames += write.changes
            writeEnds.append(frameEnds[frames - 1])
        }
        let databaseFiles = try names.filter { $0 != logName }.map { name in
            (name, try #require(contentsOf(live.file(name))))
        }
        withExtendedLifetime(journal) {}
        return KilledJournal(
            writes: writes, databaseFiles: databaseFiles, logName: logName, log: log, writeEnds: writeEnds)
    }

    private static func randomKey(_ random: inout SplitMix) -> JournalKey {
        JournalKey(
            url: ["http://h/", "http://h/é/", "http://h/a?q="][random.next(below: 3)] + "\(random.next(below: 8))",
            destination: ["/d/", "/d/ü/", "/d/file.bin"][random.next(below: 3)])
    }

    private static func randomText(_ random: inout SplitMix) -> String {
        let pieces = [
            "a", "0", " ", "é", "😀", "\"", "\\", "/", "%20", "\u{202E}", "\n", "x.tar.gz",
            String(repeating: "p", count: 30),
        ]
        return (0..<random.next(below: 6)).map { _ in pieces[random.next(below: pieces.count)] }.joined()
    }

    /// A partial's missing ranges: none (`nil`, a partial written in order, a frame without the field), an empty
    /// list (a segmented partial about to be completed), or a few ranges, an empty one and `Int64.max` among them.
    private static func randomRanges(_ random: inout SplitMix) -> [Range<Int64>]? {
        switch random.next(below: 3) {
        case 0: return nil
        case 1: return []
        default:
            let bounds = (0..<2 * (1 + random.next(below: 4))).map { _ in
                [0, Int64.max, Int64(random.next(below: 1 << 30))][random.next(below: 3)]
            }.sorted()
            return stride(from: 0, to: bounds.count, by: 2).map { bounds[$0]..<bounds[$0 + 1] }
        }
    }

    private static func randomRecord(_ key: JournalKey, _ random: inout SplitMix) -> JournalRecord {
        let number = { (random: inout SplitMix) in
            [0, 1, -1, Int64.max, Int64.min, Int64(random.next(below: 1 << 30))][random.next(below: 6)]
        }
        let state: JournalRecord.State
        switch random.next(below: 5) {
        case 0: state = .requested
        case 1:
            state = .partial(
                validator: randomText(&random), totalBytes: random.next(below: 2) == 0 ? nil : number(&random),
                missingRanges: randomRanges(&random))
        case 2:
            // A download that computed no digest.
            let size = number(&random)
            state = .completed(
                size: size, sha256: nil, stamp: FileStamp(size: size, modifiedNanoseconds: number(&random), inode: 9))
        case 3:
            // The stamp of the file published: its size is the record's (the log keeps one).
            let size = number(&random)
            state = .completed(
                size: size, sha256: randomText(&random),
                stamp: FileStamp(size: size, modifiedNanoseconds: number(&random), inode: random.next()))
        default: state = .failed(message: randomText(&random))
        }
        var request: DownloadRequest?
        if random.next(below: 5) == 0, let url = URL(string: key.url) {
            request = DownloadRequest(url: url, destination: .file(URL(fileURLWithPath: "/d/" + randomText(&random))))
        }
        return JournalRecord(key: key, path: "/d/" + randomText(&random), state: state, request: request)
    }
}
