// The SQLite journal against the number of records it holds (issue "a million URLs in bounded memory"): a rerun of
// a long list looks every URL up, so a look-up must cost the same however many records there are, and opening the
// journal must not read them all.
//
//   bash bench/journal/lookup.sh [ROWS] [LOOKUPS]      (default 1,000,000 rows, 200,000 look-ups)
//
// 1. Fills a journal with ROWS completed records as `haul get` writes them (batches through the journal itself).
// 2. Opens it (median of 3) and reports the resident memory the open journal adds.
// 3. LOOKUPS look-ups of records it has (random order) and of records it has not: microseconds each.
// 4. The first run's pattern on an empty journal, 10,000 downloads each one look-up (a miss) and two writes, then
//    closing (which folds the log): median of 7.
// Targets: a look-up < 10 µs at ROWS; opening < 100 ms and < 16 MiB added, whatever ROWS.
import Foundation
import Haul
import HaulSQLite

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
let rows = arguments.first ?? 1_000_000
let lookups = arguments.dropFirst().first ?? 200_000

func key(_ index: Int) -> JournalKey {
    JournalKey(url: "http://127.0.0.1:8080/small/f\(100_000_000 + index)", destination: "/var/tmp/haul-bench/out/")
}

func completed(_ index: Int) -> JournalRecord {
    let size = Int64(4096 + index % 7)
    return JournalRecord(
        key: key(index), path: "/var/tmp/haul-bench/out/f\(100_000_000 + index)",
        state: .completed(
            size: size, sha256: nil,
            stamp: FileStamp(size: size, modifiedNanoseconds: 1_700_000_000_000_000_000 + Int64(index), inode: 12345),
            validator: "\"65a1b2c3-1000\""))
}

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

/// This process's resident memory in MiB (`VmRSS`).
func residentMiB() -> Double {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
    return Double(line.split(separator: " ").dropFirst().first ?? "0").map { $0 / 1024 } ?? 0
}

let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent(
    "haul-bench-journal-lookup-\(getpid())")
let path = directory.appendingPathComponent("big/journal.sqlite").path

let clock = ContinuousClock()
let filling = clock.now
do {
    let journal = try SQLiteJournal(path: path)
    for start in stride(from: 0, to: rows, by: 1000) {
        journal.store((start..<min(rows, start + 1000)).map(completed))
    }
}
let filled = clock.now - filling
print("fill: \(rows) records in \(String(format: "%.2f", seconds(filled))) s")

// The first open is the one kept, and the one whose memory counts: memory freed by a journal released stays
// resident in the allocator, which would hide what a later open adds.
let before = residentMiB()
let opening = clock.now
let journal = try SQLiteJournal(path: path)
var opens = [seconds(clock.now - opening)]
let added = residentMiB() - before
for _ in 0..<2 {
    let again = clock.now
    let other = try SQLiteJournal(path: path)
    opens.append(seconds(clock.now - again))
    withExtendedLifetime(other) {}
}
print("open: \(String(format: "%.1f", median(opens) * 1000)) ms, resident memory +\(String(format: "%.1f", added)) MiB")

/// The same pseudo-random keys in every run (a linear congruential generator).
var seed: UInt64 = 30
var hitKeys: [JournalKey] = []
for _ in 0..<lookups {
    seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
    hitKeys.append(key(Int(seed >> 33) % rows))
}
// A rerun looks the list up in the order of the first run, which stored it in that order.
let inOrderKeys = (0..<min(rows, lookups)).map(key)
let missKeys = (0..<lookups).map { key(rows + $0) }
var found = 0
let hits = clock.measure { for key in hitKeys where journal.record(for: key) != nil { found += 1 } }
let inOrder = clock.measure { for key in inOrderKeys where journal.record(for: key) == nil { found = -1 } }
let misses = clock.measure { for key in missKeys where journal.record(for: key) != nil { found += 1 } }
let hitMicros = seconds(hits) / Double(lookups) * 1e6
let inOrderMicros = seconds(inOrder) / Double(inOrderKeys.count) * 1e6
let missMicros = seconds(misses) / Double(lookups) * 1e6
print(
    "look-up: hit \(String(format: "%.2f", hitMicros)) µs (random order), \(String(format: "%.2f", inOrderMicros)) µs"
        + " (list order); miss \(String(format: "%.2f", missMicros)) µs (\(found) of \(lookups) found)")

var firstRuns: [Double] = []
for run in 0..<7 {
    let firstPath = directory.appendingPathComponent("first-\(run)/journal.sqlite").path
    let start = clock.now
    do {
        let journal = try SQLiteJournal(path: firstPath)
        for index in 0..<10_000 {
            _ = journal.record(for: key(index))
            journal.store(completed(index))
            journal.store(completed(index))
        }
    }
    firstRuns.append(seconds(clock.now - start))
}
print("first run, 10,000 x (look-up, 2 writes) and close: \(String(format: "%.1f", median(firstRuns) * 1000)) ms")

try? FileManager.default.removeItem(at: directory)
let missed = hitMicros >= 10 || median(opens) >= 0.1 || added >= 16 || found != lookups
print(missed ? "target MISSED" : "targets met")
exit(missed ? 1 : 0)
