import Foundation
import Haul
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// A journal that notes, for each commit, whether a file was already at the path of the download's published
/// file (`v.bin` or `v (1).bin` in the same directory).
final class CommitWatchingJournal: Journal {
    let base = MemoryJournal()
    let commits = Locked<[(record: JournalRecord, publishedExisted: Bool)]>([])
    func record(for key: JournalKey) -> JournalRecord? { base.record(for: key) }
    func store(_ record: JournalRecord) { base.store(record) }
    func commit(_ record: JournalRecord) async {
        let directory = (record.path as NSString).deletingLastPathComponent
        let ours = ["v (1).bin", "v.bin"].map { (directory as NSString).appendingPathComponent($0) }
        let existed = ours.contains { path in
            FileStamp(ofFileAt: path).map { $0.size == 3000 } ?? false
        }
        commits.withLock { $0.append((record, existed)) }
        base.store(record)
    }
    func remove(_ key: JournalKey) { base.remove(key) }
    func allRecords() -> [JournalRecord] { base.allRecords() }
}

/// The engine with a journal: a completed, unchanged file is not fetched again; a cancelled download's partial
/// is resumed by the next downloader (a later process) with Range/If-Range.
@Suite("Journal", .timeLimit(.minutes(2)))
struct JournalTests {
    func downloader(
        _ journal: MemoryJournal, keepPartial: Bool = true, kind: TransportKind = .asyncHTTPClient
    ) -> Downloader {
        var configuration = kind.configuration()
        configuration.journal = journal
        configuration.keepsPartialOnCancel = keepPartial
        return Downloader(transport: kind.makeTransport(), configuration: configuration)
    }

    /// The suite's tests that run over `https` too.
    static let kinds: [TransportKind] = [.asyncHTTPClient, .asyncHTTPClientOverTLS]

    @Test(
        "a completed download whose file is unchanged is skipped without a request; a changed one is not",
        arguments: kinds)
    func completedIsSkipped(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let request = DownloadRequest(
                url: server.url(path: "/bytes/a.bin", query: ["size": "5000"]), destination: .directory(dir.url))
            let first = try await downloader(journal, kind: kind).download(request)
            #expect(!first.skipped)
            let record = try #require(journal.record(for: JournalKey(request)))
            guard case .completed(5000, first.sha256, _, _) = record.state else {
                Issue.record("not recorded as completed: \(record)")
                return
            }

            let again = try await downloader(journal, kind: kind).download(request)
            #expect(again.skipped)
            #expect(again.sha256 == first.sha256)
            #expect(server.stats.requestCount == 1)

            // Someone changed the file: it is no longer Haul's, so the conflict policy (fail) applies.
            try Data("edited".utf8).write(to: first.fileURL)
            let error = try await #require(throws: DownloadError.self) {
                try await downloader(journal, kind: kind).download(request)
            }
            #expect(error.code == .destinationExists)
            #expect(contentsOf(first.fileURL) == Array("edited".utf8))
        }
    }

    @Test("records are keyed as JournalKey(request) says, one downloader alternating between destinations")
    func keysAcrossDestinations() async throws {
        try await TestServer.withRunning { server in
            let (first, second) = (try TemporaryDirectory(), try TemporaryDirectory())
            let journal = MemoryJournal()
            let downloader = downloader(journal)
            // Directories one after another and back (the engine remembers the last directory's path), a file.
            var requests: [DownloadRequest] = []
            for (index, dir) in [first, second, first, second].enumerated() {
                let url = server.url(path: "/bytes/f\(index).bin", query: ["size": "100"])
                requests.append(DownloadRequest(url: url, destination: .directory(dir.url)))
            }
            requests.append(
                DownloadRequest(
                    url: server.url(path: "/bytes/named", query: ["size": "100"]),
                    destination: .file(second.file("named.bin"))))
            for request in requests { _ = try await downloader.download(request) }
            #expect(journal.all.map(\.key) == requests.map(JournalKey.init))
            #expect(journal.all.map(\.key.destination).filter { $0.hasPrefix(first.path) }.count == 2)
        }
    }

    @Test(
        "the completed record is committed before publishing, with the stamp publishing keeps; under the rename policy the numbered name is recorded after",
        arguments: [ConflictPolicy.fail, .rename])
    func recordedBeforePublishing(policy: ConflictPolicy) async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = CommitWatchingJournal()
            let request = DownloadRequest(
                url: server.url(path: "/bytes/v.bin", query: ["size": "3000"]), destination: .directory(dir.url),
                conflictPolicy: policy)
            let path = dir.file("v.bin").path
            if policy == .rename { try Data("theirs".utf8).write(to: dir.file("v.bin")) }
            var configuration = TransportKind.asyncHTTPClient.configuration()
            configuration.journal = journal
            let result = try await Downloader(
                transport: TransportKind.asyncHTTPClient.makeTransport(), configuration: configuration
            )
            .download(request)
            let published = result.fileURL.path
            #expect(published == (policy == .rename ? dir.file("v (1).bin").path : path))
            let commits = journal.commits.withLock { $0 }
            // First commit: the intended path, with nothing of ours there yet, and the stamp the file now has.
            let first = try #require(commits.first)
            #expect(first.record.path == path)
            #expect(!first.publishedExisted)
            guard case .completed(let size, let sha256, let stamp, _) = first.record.state else {
                Issue.record("not a completed record: \(first.record.state)")
                return
            }
            #expect(size == 3000 && sha256 == nil && stamp == FileStamp(ofFileAt: published))
            #expect(commits.count == (policy == .rename ? 2 : 1))
            if policy == .rename { #expect(commits.last?.record.path == published) }

            // A crash after the record, before the publish: nothing at the path, so the download is not done.
            if policy == .fail {
                try FileManager.default.removeItem(atPath: path)
                let again = try await downloader(MemoryJournal(copying: journal)).download(request)
                #expect(!again.skipped && server.stats.requestCount == 2)
            }
        }
    }

    @Test(
        "a cancelled download keeps its partial; the next downloader resumes it with Range and If-Range",
        arguments: kinds)
    func cancelledPartialResumes(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let size = 400_000
            // Throttled, so the cancellation lands mid-body.
            let request = DownloadRequest(
                url: server.url(path: "/bytes/big.bin", query: ["size": "\(size)", "rate": "200000"]),
                destination: .directory(dir.url))
            let sawBytes = Gate<Void>()
            let first = downloader(journal, kind: kind)
            let task = Task {
                try await first.download(request) { event in
                    if case .progress(let progress) = event, progress.bytesWritten >= 50_000 { sawBytes.open() }
                }
            }
            await sawBytes.wait()
            task.cancel()
            await #expect(throws: DownloadError.self) { try await task.value }
            #expect(dir.contents() == [".big.bin.haul-partial"])
            guard case .partial = journal.record(for: JournalKey(request))?.state else {
                Issue.record("no partial recorded")
                return
            }
            let kept = try #require(dir.url.appendingPathComponent(".big.bin.haul-partial").fileSize)

            let log = EventLog()
            let result = try await downloader(journal, kind: kind).download(request) { log.record($0) }
            let events = log.all
            #expect(result.size == Int64(size))
            #expect(result.bytesTransferred == Int64(size) - kept)
            #expect(
                { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "big.bin", size: size) }(),
                "not the server's bytes")
            #expect(dir.contents() == ["big.bin"])
            let resumed = server.stats.requests.last
            #expect(resumed?.range == "bytes=\(kept)-")
            #expect(resumed?.ifRange != nil)
            guard case .started(1, let from) = events.first else {
                Issue.record("first event: \(String(describing: events.first))")
                return
            }
            #expect(from == kept)
        }
    }

    @Test(
        "after a failure with keepsPartialOnFailure off nothing is kept and the journal holds the failure with its request"
    )
    func failureIsRecorded() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let request = DownloadRequest(
                url: server.url(path: "/bytes/f.bin", query: ["size": "400000", "cutAfter": "300000"]),
                destination: .directory(dir.url), priority: 7)
            var configuration = testConfiguration(retries: 0)
            configuration.journal = journal
            configuration.keepsPartialOnCancel = true
            configuration.keepsPartialOnFailure = false
            let downloader = Downloader(
                transport: TransportKind.asyncHTTPClient.makeTransport(), configuration: configuration)
            let error = try await #require(throws: DownloadError.self) { try await downloader.download(request) }
            #expect(dir.contents().isEmpty)
            let record = try #require(journal.all.first)
            #expect(journal.all.count == 1)
            #expect(record.state == .failed(message: error.message))
            #expect(record.request == request)
        }
    }

    @Test("a cancelled download that keeps nothing is forgotten")
    func cancellationForgets() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let request = DownloadRequest(
                url: server.url(path: "/bytes/c.bin", query: ["size": "400000", "rate": "100000"]),
                destination: .directory(dir.url))
            let downloader = downloader(journal, keepPartial: false)
            let (started, reached) = AsyncStream<Void>.makeStream()
            let task = Task {
                try await downloader.download(request) { event in
                    if case .progress(let progress) = event, progress.bytesWritten > 0 { reached.yield() }
                }
            }
            for await _ in started { break }
            #expect(journal.record(for: JournalKey(request)) != nil)  // the partial was recorded
            task.cancel()
            await #expect(throws: DownloadError.self) { try await task.value }
            #expect(dir.contents().isEmpty)
            #expect(journal.all.isEmpty)
        }
    }
    @Test("a queue forgets a request cancelled while waiting, but not the partial an earlier run left for it")
    func waitingCancellation() async throws {
        let dir = try TemporaryDirectory()
        let journal = MemoryJournal()
        let queue = DownloadQueue(downloader: downloader(journal))
        queue.pause()
        let fresh = DownloadRequest(url: URL(string: "http://127.0.0.1:1/fresh")!, destination: .directory(dir.url))
        let resumable = DownloadRequest(url: URL(string: "http://127.0.0.1:1/old")!, destination: .directory(dir.url))
        let partial = JournalRecord(
            key: JournalKey(resumable), path: dir.file("old").path,
            state: .partial(validator: "\"v\"", totalBytes: 1 << 20), request: resumable)
        journal.store(partial)
        let handles = queue.add([fresh, resumable])
        #expect(journal.record(for: JournalKey(fresh))?.state == .requested)
        #expect(journal.record(for: JournalKey(resumable)) == partial)  // not overwritten by "requested"
        queue.cancelAll()
        for handle in handles { await #expect(throws: DownloadError.self) { try await handle.result } }
        #expect(journal.record(for: JournalKey(fresh)) == nil)
        #expect(journal.record(for: JournalKey(resumable)) == partial)
    }
}

extension URL {
    fileprivate var fileSize: Int64? {
        (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.int64Value
    }
}
