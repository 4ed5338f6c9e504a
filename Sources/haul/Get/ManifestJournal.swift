import Foundation
import Haul
import HaulOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The `haul get` journal until the SQLite journal lands: JSON lines appended to `DIR/.haul/journal.jsonl`,
/// the last line for a key winning. Each record is one `write` to a file opened `O_APPEND`, so a killed
/// process leaves at worst a cut last line, which the next load skips. Loading rewrites the file compactly
/// (to a temporary file, then renamed over) once it holds many superseded lines.
final class ManifestJournal: Journal {
    let fileURL: URL
    private struct State {
        var records: [JournalKey: JournalRecord] = [:]
        var descriptor: Int32 = -1
        var failed = false
    }

    private let state = Locked(State())
    private let encoder = JSONEncoder()

    /// Loads the journal of `directory` (an absent one is empty; it is created at the first record).
    init(directory: URL) {
        fileURL = directory.appendingPathComponent(".haul/journal.jsonl", isDirectory: false)
        var records: [JournalKey: JournalRecord] = [:]
        var lines = 0
        if let data = try? Data(contentsOf: fileURL) {
            let decoder = JSONDecoder()
            for line in data.split(separator: UInt8(ascii: "\n")) {
                lines += 1
                guard let entry = try? decoder.decode(Entry.self, from: line) else { continue }
                switch entry {
                case .store(let record): records[record.key] = record
                case .remove(let key): records[key] = nil
                }
            }
        }
        state.withLock { $0.records = records }
        if lines > 2 * records.count + 100 { compact(records) }
    }

    deinit {
        state.withLock { if $0.descriptor >= 0 { close($0.descriptor) } }
    }

    func record(for key: JournalKey) -> JournalRecord? {
        state.withLock { $0.records[key] }
    }

    func store(_ record: JournalRecord) {
        append(.store(record)) { $0.records[record.key] = record }
    }

    func remove(_ key: JournalKey) {
        let known = state.withLock { $0.records[key] != nil }
        guard known else { return }
        append(.remove(key)) { $0.records[key] = nil }
    }

    private enum Entry: Codable {
        case store(JournalRecord)
        case remove(JournalKey)
    }

    private func append(_ entry: Entry, update: (inout State) -> Void) {
        guard var line = try? encoder.encode(entry) else { return }
        line.append(UInt8(ascii: "\n"))
        state.withLock { state in
            update(&state)
            guard !state.failed else { return }
            if state.descriptor < 0 {
                try? FileManager.default.createDirectory(
                    at: fileURL.deletingLastPathComponent(), withIntermediateDirectories: true)
                state.descriptor = open(fileURL.path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o644)
                if state.descriptor < 0 {
                    // The downloads themselves can go on; only a later run's resume is lost.
                    state.failed = true
                    Console.err(
                        "haul: warning: cannot write '\(fileURL.path)' (\(String(cString: strerror(errno)))); a rerun will start over\n"
                    )
                    return
                }
            }
            let descriptor = state.descriptor
            _ = line.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        }
    }

    private func compact(_ records: [JournalKey: JournalRecord]) {
        var data = Data()
        for record in records.values {
            guard let line = try? encoder.encode(Entry.store(record)) else { continue }
            data.append(line)
            data.append(UInt8(ascii: "\n"))
        }
        try? data.write(to: fileURL, options: .atomic)
    }
}
