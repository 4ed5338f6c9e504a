import Foundation
import Haul
import HaulNIO
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// A partial and a finished file belong to their destination, not to the exact URL: signed and expiring URLs change
/// their query on every visit, and a rerun with a fresh token resumes what the last one left and skips what it
/// finished. Checked against the test server's own records of what it was asked and what it sent.
@Suite("A download belongs to its file", .timeLimit(.minutes(2)))
struct FileOwnershipTests {
    static let size = 4 << 20
    static let cut = 3 << 20

    func downloader(_ journal: some Journal, retries: Int = 0, revalidates: Bool = false) -> Downloader {
        var configuration = TransportKind.nio.configuration(retries: retries)
        configuration.journal = journal
        configuration.keepsPartialOnFailure = true
        configuration.keepsPartialOnCancel = true
        configuration.revalidatesCompletedFiles = revalidates
        return Downloader(transport: NIOTransport(), configuration: configuration)
    }

    func request(_ url: URL, _ file: URL) -> DownloadRequest {
        DownloadRequest(url: url, destination: .file(file))
    }

    /// Downloads 1,000 bytes of `/bytes/g` with `token=a` to `dir/g`, then forgets what the server was asked.
    func completeG(_ server: TestServer, _ journal: MemoryJournal, in dir: TemporaryDirectory) async throws {
        let first = server.url(path: "/bytes/g", query: ["size": "1000", "token": "a"])
        _ = try await downloader(journal).download(request(first, dir.file("g")))
        server.resetStats()
    }

    /// Leaves a partial of `name` (cut at 3 MiB of 4 MiB) fetched with `token=a`.
    func leavePartial(_ server: TestServer, _ journal: some Journal, name: String, file: URL) async throws {
        let first = server.url(
            path: "/bytes/\(name)", query: ["size": "\(Self.size)", "token": "a", "cutAfter": "\(Self.cut)"])
        let error = try await #require(throws: DownloadError.self) {
            try await downloader(journal).download(request(first, file))
        }
        #expect(error.code == .truncated)
        let partial = file.deletingLastPathComponent().appendingPathComponent(".\(file.lastPathComponent).haul-partial")
        let kept = (try? FileManager.default.attributesOfItem(atPath: partial.path)[.size] as? Int) ?? nil
        #expect(kept == Self.cut, "no partial kept")
    }

    @Test("a partial is resumed after the URL's query changed: Range and If-Range, only the rest is sent")
    func partialResumedWithNewToken() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            try await leavePartial(server, journal, name: "f", file: dir.file("f"))
            server.resetStats()

            let renewed = server.url(path: "/bytes/f", query: ["size": "\(Self.size)", "token": "b"])
            let result = try await downloader(journal).download(request(renewed, dir.file("f")))
            #expect(
                { contentsOf(dir.file("f")) == TestServer.expectedBytes(name: "f", size: Self.size) }(),
                "not the server's bytes")
            let sent = try #require(server.stats.requests.first)
            #expect(server.stats.requestCount == 1)
            #expect(sent.target.contains("token=b"))
            #expect(sent.range == "bytes=\(Self.cut)-")
            #expect(sent.ifRange == TestServer.entityTag(name: "f", size: Self.size))
            #expect(server.stats.bodyBytesSent == Self.size - Self.cut)
            #expect(result.bytesTransferred == Int64(Self.size - Self.cut))
            // One record for the file, under the URL that finished it.
            #expect(journal.allRecords().map(\.key.url) == [renewed.absoluteString])
            #expect(dir.contents() == ["f"])
        }
    }

    @Test("a partial whose validator no longer matches is fetched whole: the result is the new file, never a join")
    func partialOfAnotherVersion() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            try await leavePartial(server, journal, name: "f", file: dir.file("f"))
            server.resetStats()

            // The server has another file at that path now (another size: another ETag, other bytes).
            let newer = Self.size + 1
            let renewed = server.url(path: "/bytes/f", query: ["size": "\(newer)", "token": "b"])
            let result = try await downloader(journal).download(request(renewed, dir.file("f")))
            #expect(
                { contentsOf(dir.file("f")) == TestServer.expectedBytes(name: "f", size: newer) }(),
                "not the new file")
            #expect(server.stats.requests.first?.range == "bytes=\(Self.cut)-", "the partial was not offered")
            #expect(server.stats.bodyBytesSent == newer)
            #expect(result.size == Int64(newer))
        }
    }

    @Test("a file completed for one token is skipped, without a request, for a URL that differs only in its query")
    func completedSkippedWithNewToken() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            try await completeG(server, journal, in: dir)

            let renewed = server.url(path: "/bytes/g", query: ["size": "1000", "token": "b"])
            let again = try await downloader(journal).download(request(renewed, dir.file("g")))
            #expect(again.skipped)
            #expect(server.stats.requestCount == 0)
            // The record now belongs to the new URL: a third token is skipped too.
            #expect(journal.allRecords().map(\.key.url) == [renewed.absoluteString])
            let third = server.url(path: "/bytes/g", query: ["size": "1000", "token": "c"])
            #expect(try await downloader(journal).download(request(third, dir.file("g"))).skipped)
            #expect(server.stats.requestCount == 0)
        }
    }

    @Test("a completed file is another resource's for a URL with another path or host: the conflict policy applies")
    func anotherResourceMeetsTheConflictPolicy() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            try await completeG(server, journal, in: dir)

            let otherPath = server.url(path: "/bytes/h", query: ["size": "1000", "token": "a"])
            let otherHost = server.url(path: "/bytes/g", query: ["size": "1000", "token": "b"], host: "localhost")
            for url in [otherPath, otherHost] {
                let error = try await #require(throws: DownloadError.self) {
                    try await downloader(journal).download(request(url, dir.file("g")))
                }
                #expect(error.code == .destinationExists)
            }
            #expect(server.stats.requestCount == 0)
            #expect({ contentsOf(dir.file("g")) == TestServer.expectedBytes(name: "g", size: 1000) }())
            // Overwrite: the other resource replaces the file.
            var overwrite = request(otherPath, dir.file("g"))
            overwrite.conflictPolicy = .overwrite
            let replaced = try await downloader(journal).download(overwrite)
            #expect(!replaced.skipped)
            #expect({ contentsOf(dir.file("g")) == TestServer.expectedBytes(name: "h", size: 1000) }())
        }
    }

    @Test("revalidation (-N) asks with the new URL: a 304 keeps the file")
    func revalidatesWithNewURL() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            try await completeG(server, journal, in: dir)

            let renewed = server.url(path: "/bytes/g", query: ["size": "1000", "token": "b"])
            let result = try await downloader(journal, revalidates: true).download(request(renewed, dir.file("g")))
            #expect(result.notModified)
            let sent = try #require(server.stats.requests.first)
            #expect(sent.target.contains("token=b"))
            #expect(sent.value(forHeader: "if-none-match") == TestServer.entityTag(name: "g", size: 1000))
        }
    }

    @Test("a segmented partial is resumed under a new token: each missing range is asked for with If-Range")
    func segmentedPartialWithNewToken() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let size = 8 << 20
            var first = request(
                server.url(path: "/bytes/s", query: ["size": "\(size)", "token": "a", "rate": "8000000"]),
                dir.file("s"))
            first.maxConnections = 4
            first.minimumSegmentSize = 256 << 10
            let sawBytes = Gate<Void>()
            let (cancelled, engine) = (first, downloader(journal))
            let task = Task {
                try await engine.download(cancelled) { event in
                    if case .progress(let progress) = event, progress.bytesWritten >= 2 << 20 { sawBytes.open() }
                }
            }
            await sawBytes.wait()
            task.cancel()
            await #expect(throws: DownloadError.self) { try await task.value }
            guard case .partial(_, _, let missing?) = journal.allRecords().first?.state else {
                Issue.record("no segmented partial: \(journal.allRecords())")
                return
            }
            server.resetStats()

            var renewed = first
            renewed.url = server.url(path: "/bytes/s", query: ["size": "\(size)", "token": "b"])
            _ = try await downloader(journal).download(renewed)
            #expect(
                { contentsOf(dir.file("s")) == TestServer.expectedBytes(name: "s", size: size) }(),
                "not the server's bytes")
            let etag = TestServer.entityTag(name: "s", size: size)
            #expect(server.stats.requests.allSatisfy { $0.target.contains("token=b") && $0.ifRange == etag })
            let missingBytes = missing.reduce(Int64(0)) { $0 + Int64($1.count) }
            #expect(Int64(server.stats.bodyBytesSent) <= missingBytes + Int64(1 << 20), "fetched more than missing")
        }
    }

    @Test("after a restart, of two requests for one file the last added resumes the partial the first left")
    func resumeUnfinishedTakesTheLastRequest() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            try await leavePartial(server, journal, name: "f", file: dir.file("f"))
            // The app adds the renewed link, and is killed before it runs (the queue is paused).
            let renewed = server.url(path: "/bytes/f", query: ["size": "\(Self.size)", "token": "b"])
            let before = DownloadQueue(downloader: downloader(journal))
            before.pause()
            let handle = before.add(request(renewed, dir.file("f")))
            #expect(journal.allRecords().count == 2)
            handle.cancel()
            // (Cancelling a waiting download forgets its request: record it again as the killed process left it.)
            journal.store(
                JournalRecord(
                    key: JournalKey(request(renewed, dir.file("f"))), path: "", state: .requested,
                    request: request(renewed, dir.file("f"))))
            server.resetStats()

            let after = DownloadQueue(downloader: downloader(journal))
            let resumed = after.resumeUnfinished()
            #expect(resumed.count == 1)
            for handle in resumed { _ = try await handle.result }
            #expect(
                { contentsOf(dir.file("f")) == TestServer.expectedBytes(name: "f", size: Self.size) }(),
                "not the server's bytes")
            #expect(server.stats.requestCount == 1)
            #expect(server.stats.requests.first?.target.contains("token=b") == true)
            #expect(server.stats.requests.first?.range == "bytes=\(Self.cut)-")
            #expect(journal.allRecords().map(\.key.url) == [renewed.absoluteString])
        }
    }
}
