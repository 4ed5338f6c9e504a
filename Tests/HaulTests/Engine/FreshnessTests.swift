import Foundation
import Haul
import HaulNIO
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// Reruns that notice change: revalidation with conditional requests, the server's time on the file, partials kept
/// after a failure for good, and files another tool left continued; checked against the server's record of every
/// request and of every body byte it sent.
@Suite("Freshness", .timeLimit(.minutes(2)))
struct FreshnessTests {
    func downloader(_ journal: MemoryJournal, _ change: (inout Downloader.Configuration) -> Void = { _ in })
        -> Downloader
    {
        var configuration = TransportKind.nio.configuration(retries: 0)
        configuration.journal = journal
        change(&configuration)
        return Downloader(transport: NIOTransport(), configuration: configuration)
    }

    /// The server's `Last-Modified` of version 0 of generated content, in seconds since 1970.
    static let serverTime: Int64 = 1_700_000_000

    func modificationSeconds(_ url: URL) -> Int64? {
        let attributes = try? FileManager.default.attributesOfItem(atPath: url.path)
        return (attributes?[.modificationDate] as? Date).map { Int64($0.timeIntervalSince1970) }
    }

    @Test("revalidating an unchanged file: one conditional request with its ETag, 304, no body byte, the file kept")
    func unchangedIsOneConditionalRequest() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let request = DownloadRequest(
                url: server.url(path: "/bytes/same.bin", query: ["size": "200000"]), destination: .directory(dir.url))
            let first = try await downloader(journal).download(request)
            let stamp = FileStamp(ofFileAt: first.fileURL.path)
            server.resetStats()

            let events = EventLog()
            let again = try await downloader(journal) { $0.revalidatesCompletedFiles = true }
                .download(request, onEvent: events.record)
            #expect(again.skipped && again.notModified && again.size == 200_000)
            #expect(again.fileURL.path == first.fileURL.path)
            let stats = server.stats
            #expect(stats.requestCount == 1)
            #expect(stats.bodyBytesSent == 0)
            let sent = try #require(stats.requests.first)
            #expect(sent.value(forHeader: "if-none-match") == TestServer.entityTag(name: "same.bin", size: 200_000))
            #expect(sent.range == nil)
            #expect(FileStamp(ofFileAt: first.fileURL.path) == stamp)
            #expect(events.all.contains { if case .revalidated(modified: false) = $0 { true } else { false } })

            // Without revalidation the rerun trusts the file: no request at all.
            server.resetStats()
            #expect(try await downloader(journal).download(request).skipped)
            #expect(server.stats.requestCount == 0)
        }
    }

    @Test(
        "revalidating a changed file fetches the new copy and replaces the file atomically, whatever the conflict policy (a small body too, which would otherwise go to an unnamed file that cannot replace one)",
        arguments: [1000, 150_000])
    func changedIsReplaced(size: Int) async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            // Every request to the path gets a new version: the rerun's conditional request finds it changed.
            let request = DownloadRequest(
                url: server.url(path: "/bytes/moving.bin", query: ["size": "\(size)", "changeAfterFirst": "1"]),
                destination: .directory(dir.url))
            let first = try await downloader(journal).download(request)
            #expect(
                { contentsOf(first.fileURL) == TestServer.expectedBytes(name: "moving.bin", size: size) }(),
                "not the server's bytes")

            let events = EventLog()
            let again = try await downloader(journal) { $0.revalidatesCompletedFiles = true }
                .download(request, onEvent: events.record)
            #expect(!again.skipped && !again.notModified)
            #expect(
                contentsOf(again.fileURL)
                    == TestServer.expectedBytes(name: "moving.bin", size: size, version: 1))
            let conditional = try #require(server.stats.requests.last)
            #expect(
                conditional.value(forHeader: "if-none-match")
                    == TestServer.entityTag(name: "moving.bin", size: size, version: 0))
            #expect(events.all.contains { if case .revalidated(modified: true) = $0 { true } else { false } })
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["moving.bin"])
            // The journal now holds the new copy's validator: the next revalidation asks with it.
            guard case .completed(_, _, _, let validator) = try #require(journal.record(for: JournalKey(request))).state
            else {
                Issue.record("not completed")
                return
            }
            #expect(validator == TestServer.entityTag(name: "moving.bin", size: size, version: 1))
        }
    }

    @Test("a record with only a date revalidates with If-Modified-Since")
    func dateValidator() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let request = DownloadRequest(
                url: server.url(path: "/bytes/dated.bin", query: ["size": "1000"]), destination: .directory(dir.url))
            let first = try await downloader(journal).download(request)
            var record = try #require(journal.record(for: JournalKey(request)))
            guard case .completed(let size, let sha256, let stamp, _) = record.state else {
                Issue.record("not completed")
                return
            }
            let date = "Tue, 14 Nov 2023 22:13:20 GMT"  // the server's Last-Modified of version 0
            record.state = .completed(size: size, sha256: sha256, stamp: stamp, validator: date)
            journal.store(record)
            let again = try await downloader(journal) { $0.revalidatesCompletedFiles = true }.download(request)
            #expect(again.notModified)
            let sent = try #require(server.stats.requests.last)
            #expect(sent.value(forHeader: "if-modified-since") == date)
            #expect(sent.value(forHeader: "if-none-match") == nil)
            #expect(contentsOf(first.fileURL)?.count == 1000)
        }
    }

    @Test(
        "the file gets the server's Last-Modified time, and the journal still knows it unchanged; off, the time of writing"
    )
    func remoteTime() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            for size in [1000, 300_000] {  // the unnamed small-file path and a named partial
                let request = DownloadRequest(
                    url: server.url(path: "/bytes/t\(size).bin", query: ["size": "\(size)"]),
                    destination: .directory(dir.url))
                let result = try await downloader(journal).download(request)
                #expect(modificationSeconds(result.fileURL) == Self.serverTime)
                #expect(try await downloader(journal).download(request).skipped)
            }
            let requests = server.stats.requestCount
            #expect(requests == 2)

            let local = DownloadRequest(
                url: server.url(path: "/bytes/local.bin", query: ["size": "1000"]), destination: .directory(dir.url))
            let before = Int64(Date().timeIntervalSince1970) - 1
            let result = try await downloader(journal) { $0.usesRemoteModificationTime = false }.download(local)
            #expect(try #require(modificationSeconds(result.fileURL)) >= before)
        }
    }

    @Test(
        "a download that fails for good keeps its partial (owner-only, hidden); the next run resumes it with Range and If-Range"
    )
    func failureKeepsPartial() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let size = 4_000_000
            let request = DownloadRequest(
                url: server.url(path: "/bytes/big.bin", query: ["size": "\(size)"]), destination: .directory(dir.url))
            server.addRule(
                FaultRule(
                    pathPrefix: "/bytes/big.bin",
                    fault: {
                        var f = Fault(); f.cutAfterBytes = 1_500_000; return f
                    }()))
            let error = try await #require(throws: DownloadError.self) {
                try await downloader(journal).download(request)
            }
            #expect(error.code == .truncated)
            let partial = dir.file(".big.bin.haul-partial")
            let attributes = try FileManager.default.attributesOfItem(atPath: partial.path)
            #expect(attributes[.posixPermissions] as? Int == 0o600)
            #expect(attributes[.size] as? Int == 1_500_000)
            #expect(!FileManager.default.fileExists(atPath: dir.file("big.bin").path))

            server.removeAllRules()
            server.resetStats()
            let result = try await downloader(journal).download(request)
            #expect(
                { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "big.bin", size: size) }(),
                "not the server's bytes")
            let stats = server.stats
            #expect(stats.bodyBytesSent == size - 1_500_000)  // the rest, not the file again
            #expect(stats.requests.first?.range == "bytes=1500000-")
            #expect(stats.requests.first?.ifRange == TestServer.entityTag(name: "big.bin", size: size))
        }
    }

    @Test("without keepsPartialOnFailure, or when the bytes are in doubt, a failure removes the partial")
    func failureRemovesPartial() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let cut = DownloadRequest(
                url: server.url(path: "/bytes/cut.bin", query: ["size": "400000", "cutAfter": "200000"]),
                destination: .directory(dir.url))
            _ = await #expect(throws: DownloadError.self) {
                try await downloader(journal) { $0.keepsPartialOnFailure = false }.download(cut)
            }
            var wrong = DownloadRequest(
                url: server.url(path: "/bytes/wrong.bin", query: ["size": "400000"]), destination: .directory(dir.url))
            wrong.expectedDigest = try Digest(algorithm: .sha256, hex: String(repeating: "0", count: 64))
            let mismatch = try await #require(throws: DownloadError.self) {
                try await downloader(journal).download(wrong)
            }
            #expect(mismatch.code == .checksumMismatch)
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).isEmpty)
            for request in [cut, wrong] {
                #expect(journal.record(for: JournalKey(request))?.state.isFailure == true)
            }
        }
    }

    @Test("a file another tool left half done is continued with Range from its size (no If-Range) and replaced whole")
    func continuesForeignFile() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 500_000
            let expected = TestServer.expectedBytes(name: "half.bin", size: size)
            try Data(expected[..<123_456]).write(to: dir.file("half.bin"))
            var request = DownloadRequest(
                url: server.url(path: "/bytes/half.bin", query: ["size": "\(size)"]), destination: .directory(dir.url))
            request.continuesExistingFile = true
            let result = try await downloader(MemoryJournal()).download(request)
            #expect(!result.skipped)
            #expect(contentsOf(result.fileURL) == expected)
            let sent = try #require(server.stats.requests.first)
            #expect(sent.range == "bytes=123456-")
            #expect(sent.ifRange == nil)
            #expect(server.stats.bodyBytesSent == size - 123_456)
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["half.bin"])

            // Complete already: the server says so (416) and the file stays as it is.
            server.resetStats()
            let inode = FileStamp(ofFileAt: result.fileURL.path)
            let again = try await downloader(MemoryJournal()).download(request)
            #expect(again.skipped)
            #expect(FileStamp(ofFileAt: result.fileURL.path) == inode)
            #expect(server.stats.bodyBytesSent == 0)
        }
    }

    @Test(
        "a server without ranges leaves a continued file to the conflict policy: fail leaves it, overwrite replaces it")
    func continuationWithoutRanges() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let foreign = Data("someone else's start".utf8)
            try foreign.write(to: dir.file("f.bin"))
            var request = DownloadRequest(
                url: server.url(path: "/bytes/f.bin", query: ["size": "100000", "ignoreRange": "1"]),
                destination: .directory(dir.url))
            request.continuesExistingFile = true
            let error = try await #require(throws: DownloadError.self) {
                try await downloader(MemoryJournal()).download(request)
            }
            #expect(error.code == .destinationExists)
            #expect(error.message.contains("cannot continue"))
            #expect(contentsOf(dir.file("f.bin")) == [UInt8](foreign))

            request.conflictPolicy = .overwrite
            let result = try await downloader(MemoryJournal()).download(request)
            #expect(
                { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "f.bin", size: 100_000) }(),
                "not the server's bytes")
        }
    }
}
