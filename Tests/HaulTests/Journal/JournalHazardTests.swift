import Foundation
import Haul
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The journal and the partial files against what happens around them: two downloaders (two `haul get` processes)
/// racing to publish one file, a URL whose query selects another file, a leftover partial with other names, a
/// process killed after the partial was emptied for another version.
@Suite("Journal and partials against races, links and kills", .timeLimit(.minutes(1)))
struct JournalHazardTests {
    /// A fetches and publishes the file; B, which found the destination absent too, loses the race to publish.
    /// The journal must still record A's published file as completed, so that a rerun skips it.
    @Test(
        "the loser of a publishing race does not overwrite the winner's completed record",
        arguments: [ConflictPolicy.fail, .skip], [4096])
    func losingRaceKeepsWinnersRecord(policy: ConflictPolicy, size: Int) async throws {
        try await TestServer.withRunning(TransportKind.asyncHTTPClient.server()) { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let bAboutToPublish = Gate<Void>()
            let aDone = Gate<Void>()
            func downloader(_ hook: @escaping @Sendable () async -> Void) -> Downloader {
                var configuration = TransportKind.asyncHTTPClient.configuration()
                configuration.journal = journal
                configuration.hooks.beforePublish = hook
                return Downloader(
                    transport: TransportKind.asyncHTTPClient.makeTransport(), configuration: configuration)
            }
            var request = DownloadRequest(
                url: server.url(path: "/bytes/f.bin", query: ["size": "\(size)"]), destination: .directory(dir.url))
            request.conflictPolicy = policy
            let a = downloader { await bAboutToPublish.wait() }
            let b = downloader {
                bAboutToPublish.open()
                await aDone.wait()
            }
            let loser = Task { try? await b.download(request) }
            _ = try await a.download(request)
            aDone.open()
            _ = await loser.value

            let record = try #require(journal.record(for: JournalKey(request)))
            guard case .completed(_, _, let stamp, _) = record.state else {
                Issue.record("the published file is no longer recorded as completed: \(record.state)")
                return
            }
            #expect(stamp == FileStamp(ofFileAt: dir.file("f.bin").path), "the record is not the published file's")

            // A rerun (a third process) finds it done.
            let third = downloader {}
            let result = try await third.download(request)
            #expect(result.skipped)
        }
    }

    /// `download?size=5000` then `download?size=7000` into the same directory with `overwrite`: the second is
    /// another resource (its query selects it) and the user asked to replace the file, yet the journal's
    /// take-over of the first URL's completed record skips it and leaves the first file.
    @Test("a URL differing in its query is not skipped as done when the user asked to overwrite")
    func queryDifferentResourceIsFetched() async throws {
        try await TestServer.withRunning(TransportKind.asyncHTTPClient.server()) { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            var configuration = TransportKind.asyncHTTPClient.configuration()
            configuration.journal = journal
            let downloader = Downloader(
                transport: TransportKind.asyncHTTPClient.makeTransport(), configuration: configuration)
            var first = DownloadRequest(
                url: server.url(path: "/bytes/report", query: ["size": "5000"]), destination: .directory(dir.url))
            first.conflictPolicy = .overwrite
            _ = try await downloader.download(first)
            var second = DownloadRequest(
                url: server.url(path: "/bytes/report", query: ["size": "7000"]), destination: .directory(dir.url))
            second.conflictPolicy = .overwrite
            let result = try await downloader.download(second)
            #expect(!result.skipped, "skipped as already done")
            let same = contentsOf(dir.file("report")) == TestServer.expectedBytes(name: "report", size: 7000)
            #expect(same, "the file is still the first URL's (\(result.size) bytes)")
        }
    }

    /// A leftover partial that is a hard link to a file outside the directory (a `cp -al`/rsnapshot copy of the
    /// download directory, or something planted there) is emptied and written through: the other file changes.
    @Test("a leftover partial hard-linked to a file elsewhere is not written through")
    func hardLinkedLeftoverPartial() async throws {
        try await TestServer.withRunning(TransportKind.asyncHTTPClient.server()) { server in
            let dir = try TemporaryDirectory()
            let elsewhere = try TemporaryDirectory()
            let victim = elsewhere.file("notes.txt")
            try Data("precious".utf8).write(to: victim)
            #expect(link(victim.path, dir.file(".big.bin.haul-partial").path) == 0)
            let downloader = Downloader(
                transport: TransportKind.asyncHTTPClient.makeTransport(),
                configuration: TransportKind.asyncHTTPClient.configuration())
            _ = try? await downloader.download(
                DownloadRequest(
                    url: server.url(path: "/bytes/big.bin", query: ["size": "300000"]), destination: .directory(dir.url)
                ))
            let victimSize = contentsOf(victim)?.count ?? -1
            #expect(victimSize == 8, "the file outside the directory was rewritten: now \(victimSize) bytes")
        }
    }

    /// A backoff clock whose second sleep waits until the test opens ``release``.
    final class SecondSleepGate: BackoffClock {
        let sleeps = Locked(0)
        let entered = Gate<Void>()
        let release = Gate<Void>()
        func sleep(for duration: Duration) async throws {
            let count = sleeps.withLock { count in
                count += 1
                return count
            }
            if count >= 2 {
                entered.open()
                await release.wait()
            }
            try Task.checkCancellation()
        }
    }

    /// Attempt 1 gets version A (ETag "v1", > 64 KiB: a partial record is written) and is cut; attempt 2 asks for the
    /// rest with If-Range "v1" and gets a 200 without any validator, so the partial is emptied and refilled with
    /// other bytes, but the journal still says `partial(v1)`. The process is killed then (the journal and the
    /// partial as they were at that moment are what the next process finds). The next run resumes those bytes with
    /// If-Range "v1", and the server (version A again) sends the rest of A: a file of B's start and A's end.
    @Test("a partial restarted from zero without a validator is not resumed later under the old validator")
    func staleValidatorAfterRestart() async throws {
        let size = 100_000
        let a = [UInt8](repeating: UInt8(ascii: "A"), count: size)
        let b = [UInt8](repeating: UInt8(ascii: "B"), count: size)
        @Sendable func response(_ head: String, _ body: ArraySlice<UInt8>) -> [UInt8] { Array(head.utf8) + body }
        try await RawServer.withRunning(respond: { index, request in
            switch index {
            case 0:
                return response(
                    "HTTP/1.1 200 OK\r\nContent-Length: \(size)\r\nETag: \"v1\"\r\nAccept-Ranges: bytes\r\n"
                        + "Connection: close\r\n\r\n", a[..<80_000])
            case 1:
                return response(
                    "HTTP/1.1 200 OK\r\nContent-Length: \(size)\r\nConnection: close\r\n\r\n", b[..<50_000])
            default:
                let lower = request.lowercased()
                if let range = lower.range(of: "range: bytes="), lower.contains("if-range: \"v1\"") {
                    let from = Int(lower[range.upperBound...].prefix { $0.isNumber })!
                    return response(
                        "HTTP/1.1 206 Partial Content\r\nContent-Length: \(size - from)\r\nContent-Range: bytes "
                            + "\(from)-\(size - 1)/\(size)\r\nETag: \"v1\"\r\nAccept-Ranges: bytes\r\n\r\n", a[from...])
                }
                return response(
                    "HTTP/1.1 200 OK\r\nContent-Length: \(size)\r\nETag: \"v1\"\r\nAccept-Ranges: bytes\r\n\r\n",
                    a[...])
            }
        }) { port in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let clock = SecondSleepGate()
            var configuration = testConfiguration(clock: clock, retries: 5)
            configuration.journal = journal
            let url = URL(string: "http://127.0.0.1:\(port)/f.bin")!
            let request = DownloadRequest(url: url, destination: .directory(dir.url))
            let first = Downloader(
                transport: TransportKind.asyncHTTPClient.makeTransport(), configuration: configuration)
            let run = Task { try await first.download(request) }
            await clock.entered.wait()
            let partial = dir.file(".f.bin.haul-partial")
            try await eventually("the second body's bytes are in the partial") {
                guard let bytes = contentsOf(partial) else { return false }
                return !bytes.isEmpty && bytes.allSatisfy { $0 == UInt8(ascii: "B") }
            }
            // SIGKILL here: what the next process finds.
            let journalAtKill = MemoryJournal(copying: journal)
            let partialAtKill = try #require(contentsOf(partial))
            run.cancel()
            clock.release.open()
            _ = try? await run.value
            try Data(partialAtKill).write(to: partial)

            var next = testConfiguration(retries: 0)
            next.journal = journalAtKill
            let second = Downloader(transport: TransportKind.asyncHTTPClient.makeTransport(), configuration: next)
            _ = try await second.download(request)
            let published = try #require(contentsOf(dir.file("f.bin")))
            let bs = published.filter { $0 == UInt8(ascii: "B") }.count
            #expect(
                bs == 0, "published \(published.count) bytes: \(bs) of version B, then \(published.count - bs) of A")
        }
    }
}
