import Foundation
import Haul
import HaulNIO
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// Promise: two runs on one directory never both publish, and the file the winner published stays recorded as
/// Haul's, so a rerun skips it.
@Suite("Publishing races (review)", .timeLimit(.minutes(2)))
struct PublishRaceReviewTests {
    @Test("the loser of a publish race does not erase the winner's journal record")
    func loserKeepsWinnersRecord() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let shared = MemoryJournal()
            let (reachedStream, reached) = AsyncStream<Void>.makeStream()
            let (release, releasing) = AsyncStream<Void>.makeStream()
            let (idle, _) = AsyncStream<Void>.makeStream()
            func downloader(_ journal: some Journal) -> Downloader {
                var configuration = TransportKind.nio.configuration(retries: 0)
                configuration.journal = journal
                return Downloader(transport: NIOTransport(), configuration: configuration)
            }
            let loser = downloader(HeldCommitJournal(shared, holds: true, reached: reached, release: release))
            let winner = downloader(HeldCommitJournal(shared, holds: false, reached: reached, release: idle))
            let url = server.url(path: "/bytes/f", query: ["size": "1000"])
            let request = DownloadRequest(url: url, destination: .file(dir.file("f")))

            // The loser has fetched the file and read the journal (nothing recorded yet) when it is held.
            let losing = Task { try await loser.download(request) }
            for await _ in reachedStream { break }
            // Meanwhile the winner downloads and publishes the same file.
            let won = try await winner.download(request)
            #expect(won.filePath == dir.file("f").path)
            releasing.yield()
            releasing.finish()
            let lost = await losing.result
            if case .success = lost { Issue.record("both runs published") }

            // The winner's file is Haul's: a rerun skips it.
            let rerun = downloader(shared)
            #expect(shared.record(for: JournalKey(request)) != nil, "the winner's record was erased by the loser")
            do {
                let again = try await rerun.download(request)
                #expect(again.skipped, "the rerun fetched the file again")
            } catch {
                Issue.record("the rerun failed on the winner's own file: \(error)")
            }
        }
    }

    @Test("a FIFO that took the file's name while it was fetched: the download fails at once, never waits on it")
    func fifoAtTheDestination() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let (reachedStream, reached) = AsyncStream<Void>.makeStream()
            let (release, releasing) = AsyncStream<Void>.makeStream()
            var configuration = TransportKind.nio.configuration(retries: 0)
            configuration.journal = HeldCommitJournal(MemoryJournal(), holds: true, reached: reached, release: release)
            let downloader = Downloader(transport: NIOTransport(), configuration: configuration)
            let request = DownloadRequest(
                url: server.url(path: "/bytes/f", query: ["size": "1000"]), destination: .file(dir.file("f")))
            let download = Task { try await downloader.download(request) }
            for await _ in reachedStream { break }
            #expect(mkfifo(dir.file("f").path, 0o600) == 0)
            releasing.yield()
            releasing.finish()
            let error = await #expect(throws: DownloadError.self) { try await download.value }
            #expect(error?.code == .destinationExists, "\(String(describing: error))")
        }
    }
}
