import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulTestServer
import HaulTestSupport
import Testing

@testable import HaulSQLite

/// Two `haul get` runs on one directory, each with its own journal on one database, as `haul get` opens it (not
/// answering its own writes): the one that loses the race to publish a small file leaves the winner's file recorded.
@Suite("Publishing races over the SQLite journal", .timeLimit(.minutes(2)))
struct PublishRaceJournalTests {
    @Test("the loser of a publish race, on a journal that does not answer its own writes, records the winner's file")
    func loserRecordsWinnersFile() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let path = dir.file(".haul/journal.sqlite").path
            let (reachedStream, reached) = AsyncStream<Void>.makeStream()
            let (release, releasing) = AsyncStream<Void>.makeStream()
            let (idle, _) = AsyncStream<Void>.makeStream()
            func downloader(_ journal: some Journal) -> Downloader {
                var configuration = testConfiguration(retries: 0)
                configuration.journal = journal
                return Downloader(transport: AsyncHTTPClientTransport.shared, configuration: configuration)
            }
            let (first, second) = (
                try SQLiteJournal(path: path, remembersWrites: false),
                try SQLiteJournal(path: path, remembersWrites: false)
            )
            let loser = downloader(HeldCommitJournal(first, holds: true, reached: reached, release: release))
            let winner = downloader(HeldCommitJournal(second, holds: false, reached: reached, release: idle))
            let request = DownloadRequest(
                url: server.url(path: "/bytes/f", query: ["size": "1000"]), destination: .file(dir.file("f")))
            let losing = Task { try await loser.download(request) }
            for await _ in reachedStream { break }
            _ = try await winner.download(request)
            releasing.yield()
            releasing.finish()
            let lost = await losing.result
            if case .success = lost { Issue.record("both runs published") }
            first.finish()
            second.finish()
            // A third run skips the file: it is recorded as the one at the destination.
            let third = try SQLiteJournal(path: path, remembersWrites: false)
            defer { third.finish() }
            let again = try await downloader(third).download(request)
            #expect(again.skipped, "the rerun fetched the file again, or failed on it")
        }
    }
}
