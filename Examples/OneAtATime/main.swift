// The seeds' first wall: start five transfers in a loop and all five run at once. Put them on a queue of
// width 1 and they run one at a time, in order — but only if each operation stays "executing" until its
// asynchronous work is done, which is what AsyncBlockOperation (an AsyncOperation) guarantees.
import Foundation
import HaulOperations

/// A stand-in for a network transfer: asynchronous, takes a little while, completes on another thread.
@Sendable func pretendDownload(_ name: String) async throws -> Int {
    try await Task.sleep(for: .milliseconds(30))
    return name.utf8.count * 1_000
}

let queue = OperationQueue()
queue.maxConcurrentOperationCount = 1  // one at a time, in submission order

let log = Log()
let names = ["AppStoreCard.zip", "currentLocation.zip", "DispatchQueue.zip", "dynamicFont.zip", "telegrammy.zip"]
let downloads = names.map { name in
    AsyncBlockOperation(name: name) {
        log.append("start  \(name)")
        let bytes = try await pretendDownload(name)
        log.append("finish \(name) (\(bytes) bytes)")
        return bytes
    }
}
queue.addOperations(downloads)
try await downloads.allFinished()

let lines = log.lines
lines.forEach { print($0) }
// Sequential means: every start is followed by its own finish before the next start.
let expected = names.flatMap { name in ["start  \(name)", "finish \(name)"] }
let sequential = zip(lines, expected).allSatisfy { $0.hasPrefix($1) } && lines.count == expected.count
print(sequential ? "OK: one at a time, in order" : "FAILED: downloads overlapped")
exit(sequential ? 0 : 1)

/// Lines printed by several threads, kept in the order they happened.
final class Log: Sendable {
    private let storage = NSLock()
    nonisolated(unsafe) private var entries: [String] = []  // guarded by `storage`
    func append(_ line: String) { storage.withLock { entries.append(line) } }
    var lines: [String] { storage.withLock { entries } }
}
