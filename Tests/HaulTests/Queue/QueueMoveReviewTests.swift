import Foundation
import Haul
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// A journal over a ``MemoryJournal`` that runs an action (once) when a given key is removed: what another thread
/// does in the moment between the queue's lock and the journal's write.
private final class HookJournal: Journal, @unchecked Sendable {
    let inner = MemoryJournal()
    let hook = Locked<(key: JournalKey, action: @Sendable () -> Void)?>(nil)
    func record(for key: JournalKey) -> JournalRecord? { inner.record(for: key) }
    func store(_ record: JournalRecord) { inner.store(record) }
    func remove(_ key: JournalKey) {
        inner.remove(key)
        let action = hook.withLock { hook -> (@Sendable () -> Void)? in
            guard let current = hook, current.key == key else { return nil }
            hook = nil
            return current.action
        }
        action?()
    }
    func allRecords() -> [JournalRecord] { inner.allRecords() }
    func records(forFileAt path: String) -> [JournalRecord] { inner.records(forFileAt: path) }
}

/// A waiting download moved to another file, under a hostile second look.
@Suite("DownloadQueue: a waiting download moved, under review", .timeLimit(.minutes(2)))
struct QueueMoveReviewTests {
    @Test("a move keeps what the journal has of the new file (a partial an earlier run left there), as an add does")
    func moveKeepsNewFileRecord() async throws {
        let dir = try TemporaryDirectory()
        let journal = MemoryJournal()
        let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: .nio, journal: journal)
        let url = URL(string: "http://127.0.0.1:9/bytes/file.bin")!
        let request = DownloadRequest(url: url, destination: .file(dir.file("a.bin")))
        var moved = request
        moved.destination = .file(dir.file("b.bin"))
        // An earlier run of this URL into b.bin kept a partial there.
        let partial = JournalRecord(
            key: JournalKey(moved), path: dir.file(".b.bin.haul-partial").path,
            state: .partial(validator: "\"v\"", totalBytes: 1_000_000, missingRanges: nil), request: moved)
        journal.store(partial)
        let handle = queue.add(request, paused: true)
        try queue.moveWaitingDownload(handle.id, to: moved)
        // An add of `moved` would have kept it (recordRequested leaves a known record alone); the move replaced it.
        #expect(journal.record(for: JournalKey(moved))?.state == partial.state)
        handle.cancel()
    }

    @Test("a download cancelled between the move's lock and its journal write leaves no request to resume")
    func moveRaceLeavesGhostRequest() async throws {
        let dir = try TemporaryDirectory()
        let journal = HookJournal()
        let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: .nio, journal: journal)
        let url = URL(string: "http://127.0.0.1:9/bytes/file.bin")!
        let request = DownloadRequest(url: url, destination: .file(dir.file("a.bin")))
        let handle = queue.add(request, paused: true)
        #expect(journal.record(for: JournalKey(request))?.state == .requested)
        var moved = request
        moved.destination = .file(dir.file("b.bin"))
        // Another thread cancels it right after the move released the queue's lock.
        journal.hook.withLock { $0 = (JournalKey(request), { handle.cancel() }) }
        try queue.moveWaitingDownload(handle.id, to: moved)
        let outcome = await handle.finalOutcomeForReview()
        #expect(outcome.isCancelled)
        // Cancelled: nothing of it is to run again. A journal record of it as requested would bring it back.
        #expect(
            journal.record(for: JournalKey(moved)) == nil,
            "\(String(describing: journal.record(for: JournalKey(moved))))")
        let later = makeQueue(.init(maxConcurrentDownloads: 1), transport: .nio, journal: journal)
        later.pause()
        let resumed = later.resumeUnfinished()
        #expect(resumed.isEmpty, "a cancelled download came back: \(resumed.map(\.request.destination))")
        later.cancelAll()
    }

    @Test("the status of a moved download that ended still names its new file")
    func statusAfterEndKeepsMove() async throws {
        let dir = try TemporaryDirectory()
        let queue = makeQueue(.init(maxConcurrentDownloads: 1), transport: .nio)
        let url = URL(string: "http://127.0.0.1:9/bytes/file.bin")!
        let request = DownloadRequest(url: url, destination: .file(dir.file("a.bin")))
        let handle = queue.add(request, paused: true)
        var moved = request
        moved.destination = .file(dir.file("b.bin"))
        try queue.moveWaitingDownload(handle.id, to: moved)
        #expect(handle.status.request.destination == moved.destination)
        handle.cancel()
        _ = await handle.finalOutcomeForReview()
        #expect(handle.status.request.destination == moved.destination, "\(handle.status.request.destination)")
    }
}

extension DownloadHandle {
    fileprivate func finalOutcomeForReview() async -> Result<DownloadResult, DownloadError> {
        do { return .success(try await result) } catch { return .failure(error) }
    }
}

extension Result where Success == DownloadResult, Failure == DownloadError {
    fileprivate var isCancelled: Bool {
        if case .failure(let error) = self { error.isCancellation } else { false }
    }
}
