import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulSQLite
import HaulTestServer
import HaulTestSupport
import Testing

@Suite("SQLite journal", .timeLimit(.minutes(1)))
struct SQLiteJournalTests {
    @Test("every state round-trips, survives reopening, and is replaced or removed by key")
    func roundTrip() throws {
        let dir = try TemporaryDirectory()
        let path = dir.url.appendingPathComponent(".haul/journal.sqlite").path
        let key = JournalKey(url: "http://127.0.0.1:1/a", destination: "/d/")
        let other = JournalKey(url: "http://127.0.0.1:1/b", destination: "/d/x.bin")
        let states: [JournalRecord.State] = [
            .partial(validator: "\"etag\"", totalBytes: 123),
            .partial(validator: "Tue, 01 Jan 2030 00:00:00 GMT", totalBytes: nil),
            .verified(size: 9, sha256: "ab"),
            .completed(
                size: 9, sha256: "cd",
                stamp: FileStamp(size: 9, modifiedNanoseconds: 1_700_000_000_123_456_789, inode: UInt64.max - 1)),
        ]
        for state in states {
            let record = JournalRecord(key: key, path: "/d/a", state: state)
            try SQLiteJournal(path: path).store(record)
            #expect(try SQLiteJournal(path: path).record(for: key) == record)  // a later process sees it
        }
        let journal = try SQLiteJournal(path: path)
        journal.store(JournalRecord(key: other, path: "/d/x.bin", state: .verified(size: 1, sha256: "ef")))
        #expect(journal.allRecords().count == 2)
        journal.remove(key)
        #expect(journal.record(for: key) == nil)
        #expect(journal.allRecords().map(\.key) == [other])
    }

    @Test("stores from many threads at once all land")
    func concurrentStores() async throws {
        let dir = try TemporaryDirectory()
        let journal = try SQLiteJournal(path: dir.url.appendingPathComponent("j.sqlite").path)
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<200 {
                group.addTask {
                    let key = JournalKey(url: "http://h/\(index)", destination: "/d/")
                    journal.store(JournalRecord(key: key, path: "/d/\(index)", state: .verified(size: 1, sha256: "x")))
                }
            }
        }
        #expect(journal.allRecords().count == 200)
    }

    @Test("a database that cannot be opened is an error naming it, not a crash")
    func unopenable() throws {
        let dir = try TemporaryDirectory()
        let path = dir.url.appendingPathComponent("not-a-db").path
        try Data(repeating: 0x41, count: 4096).write(to: URL(fileURLWithPath: path))
        #expect(throws: (any Error).self) { try SQLiteJournal(path: path) }
    }

    @Test("the engine resumes a cancelled download from another journal instance on the same file")
    func engineResumesAcrossInstances() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let path = dir.url.appendingPathComponent(".haul/journal.sqlite").path
            let size = 400_000
            let request = DownloadRequest(
                url: server.url(path: "/bytes/big.bin", query: ["size": "\(size)", "rate": "200000"]),
                destination: .directory(dir.url))
            func downloader() throws -> Downloader {
                var configuration = Downloader.Configuration()
                configuration.journal = try SQLiteJournal(path: path)
                configuration.keepsPartialOnCancel = true
                return Downloader(transport: AsyncHTTPClientTransport.shared, configuration: configuration)
            }
            let first = try downloader()
            let (halfway, reached) = AsyncStream<Void>.makeStream()
            let task = Task {
                try await first.download(request) { event in
                    if case .progress(let progress) = event, progress.bytesWritten >= 50_000 { reached.yield() }
                }
            }
            for await _ in halfway { break }
            task.cancel()
            await #expect(throws: DownloadError.self) { try await task.value }
            let sentBefore = server.stats.bodyBytesSent
            let result = try await downloader().download(request)
            #expect(contentsOf(result.fileURL) == TestServer.expectedBytes(name: "big.bin", size: size))
            #expect(server.stats.requests.last?.range != nil)
            #expect(server.stats.bodyBytesSent - sentBefore < size)
            let again = try await downloader().download(request)
            #expect(again.skipped)
        }
    }
}
