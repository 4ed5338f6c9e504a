import Foundation
import HaulOperations
import GRDB
import HTTPTypes
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
            .requested,
            .failed(message: "the server answered 404"),
            .partial(validator: "\"etag\"", totalBytes: 123),
            .partial(validator: "Tue, 01 Jan 2030 00:00:00 GMT", totalBytes: nil),
            .completed(size: 9, sha256: nil, stamp: FileStamp(size: 9, modifiedNanoseconds: 7, inode: 9)),
            .completed(
                size: 9, sha256: "cd",
                stamp: FileStamp(size: 9, modifiedNanoseconds: 1_700_000_000_123_456_789, inode: UInt64.max - 1)),
        ]
        var request = DownloadRequest(
            url: URL(string: "http://127.0.0.1:1/a?x=1%202")!, destination: .directory(URL(fileURLWithPath: "/d")),
            expectedDigest: try Digest(parsing: "sha256=" + String(repeating: "ab", count: 32)),
            expectedSize: 9, maxSize: 100, conflictPolicy: .rename, priority: -3)
        request.headerFields[.authorization] = "Bearer t"
        request.headerFields[HTTPField.Name("X-Trace")!] = "1"
        request.headerFields[HTTPField.Name("X-Api-Key")!] = "k"
        request.headerFields[HTTPField.Name("PRIVATE-TOKEN")!] = "p"
        var withoutSecrets = request
        withoutSecrets.headerFields[.authorization] = nil
        withoutSecrets.headerFields[HTTPField.Name("X-Api-Key")!] = nil
        withoutSecrets.headerFields[HTTPField.Name("PRIVATE-TOKEN")!] = nil
        for state in states {
            let record = JournalRecord(key: key, path: "/d/a", state: state, request: request)
            try SQLiteJournal(path: path).store(record)
            // A later process sees it, all but the credentials, which are never written.
            let seen = try SQLiteJournal(path: path).record(for: key)
            #expect(seen == JournalRecord(key: key, path: "/d/a", state: state, request: withoutSecrets))
        }
        let journal = try SQLiteJournal(path: path)
        journal.store(
            JournalRecord(
                key: other, path: "/d/x.bin",
                state: .completed(size: 1, sha256: "ef", stamp: FileStamp(size: 1, modifiedNanoseconds: 7, inode: 9))))
        journal.store(JournalRecord(key: key, path: "/d/a", state: .requested))
        // Replacing a record keeps its place: the order is the order first stored.
        #expect(journal.allRecords().map(\.key) == [key, other])
        journal.remove(key)
        #expect(journal.record(for: key) == nil)
        #expect(journal.allRecords().map(\.key) == [other])
        // Requests may carry credentials: the database is the owner's alone.
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
    }

    @Test("a journal that does not remember its writes, on a database with records, answers with the newest write")
    func withoutRememberingWrites() throws {
        let dir = try TemporaryDirectory()
        let path = dir.url.appendingPathComponent("journal.sqlite").path
        let old = JournalKey(url: "http://127.0.0.1:1/old", destination: "/d/old")
        let new = JournalKey(url: "http://127.0.0.1:1/new", destination: "/d/new")
        let kept = JournalKey(url: "http://127.0.0.1:1/kept", destination: "/d/kept")
        let before = try SQLiteJournal(path: path)
        before.store([
            JournalRecord(key: old, path: "/d/old", state: .requested),
            JournalRecord(key: kept, path: "/d/kept", state: .requested),
        ])
        before.finish()

        let journal = try SQLiteJournal(path: path, remembersWrites: false)
        #expect(journal.record(for: old)?.state == .requested)  // known at open
        journal.store(JournalRecord(key: old, path: "/d/old", state: .failed(message: "x")))
        journal.store(JournalRecord(key: new, path: "/d/new", state: .requested))
        #expect(journal.record(for: old)?.state == .failed(message: "x"))  // never the stale .requested
        #expect(journal.record(for: new)?.state == .requested)
        #expect(journal.record(for: kept)?.state == .requested)
        journal.finish()
        let reopened = try SQLiteJournal(path: path)
        #expect(reopened.record(for: old)?.state == .failed(message: "x"))
        #expect(reopened.record(for: new)?.state == .requested)
    }

    @Test("durability: nothing is fsynced for process-crash safety, every commit for power-loss safety")
    func durability() throws {
        let dir = try TemporaryDirectory()
        #expect(try SQLiteJournal(path: dir.url.appendingPathComponent("a.sqlite").path).synchronousSetting == 0)
        let strict = try SQLiteJournal(path: dir.url.appendingPathComponent("b.sqlite").path, durability: .powerLoss)
        #expect(strict.synchronousSetting == 2)
    }

    @Test("a journal let go has closed its database: another connection reads it at once, with no busy wait")
    func closedWhenReleased() throws {
        let dir = try TemporaryDirectory()
        let path = dir.url.appendingPathComponent("j.sqlite").path
        let key = JournalKey(url: "http://h/a", destination: "/d/")
        var immediate = Configuration()
        immediate.busyMode = .immediateError
        for round in 0..<200 {
            do {
                let journal = try SQLiteJournal(path: path)
                journal.store(JournalRecord(key: key, path: "/d/a", state: .failed(message: "\(round)")))
                journal.finish()
            }
            // Closing the last connection checkpoints and deletes the WAL under an exclusive lock: done by now, or a
            // reader that does not wait is refused.
            #expect(!FileManager.default.fileExists(atPath: path + "-wal"), "round \(round)")
            let failure = try DatabaseQueue(path: path, configuration: immediate).read { db in
                try String.fetchOne(db, sql: "SELECT failure FROM record")
            }
            #expect(failure == "\(round)")
        }
    }

    @Test("a journal written by the first schema is carried over: records, their order, a completed stamp")
    func migratesTheFirstSchema() throws {
        let dir = try TemporaryDirectory()
        let path = dir.url.appendingPathComponent("old.sqlite").path
        do {
            let old = try DatabaseQueue(path: path)
            try old.write { db in
                try db.execute(
                    sql: JournalSchemaTests.firstSchema + """
                        INSERT INTO download VALUES ('http://h/b', '/d/', '/d/b', 'partial', '"e"', 10, NULL, NULL,
                            NULL, NULL, '2026-01-01 00:00:00.000');
                        INSERT INTO download VALUES ('http://h/a', '/d/', '/d/a', 'completed', NULL, NULL, 3, 'ab',
                            42, 7, '2026-01-01 00:00:00.000');
                        """)
            }
        }
        let journal = try SQLiteJournal(path: path)
        let a = JournalKey(url: "http://h/a", destination: "/d/")
        let b = JournalKey(url: "http://h/b", destination: "/d/")
        #expect(journal.allRecords().map(\.key) == [b, a])
        #expect(
            journal.record(for: a)?.state
                == .completed(size: 3, sha256: "ab", stamp: FileStamp(size: 3, modifiedNanoseconds: 42, inode: 7)))
        #expect(journal.record(for: b)?.state == .partial(validator: "\"e\"", totalBytes: 10))
        let c = JournalKey(url: "http://h/c", destination: "/d/")
        journal.store(JournalRecord(key: c, path: "/d/c", state: .requested))
        #expect(try SQLiteJournal(path: path).allRecords().map(\.key) == [b, a, c])
    }

    @Test("a segmented partial's missing ranges round-trip: through the database, to another open journal, reopened")
    func missingRangesRoundTrip() throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        func partial(_ name: String, _ ranges: [Range<Int64>]?) -> JournalRecord {
            JournalRecord(
                key: JournalKey(url: "http://h/\(name)", destination: "/d/"), path: "/d/\(name)",
                state: .partial(validator: "\"e\"", totalBytes: 4 << 20, missingRanges: ranges))
        }
        // Two ranges; one up to the largest offset; none left (not the same as nil); nil (a partial written in
        // order); and one record's ranges replaced by nil, which must clear its column.
        let records = [
            partial("two", [0..<1_048_576, 2_097_152..<4_194_304]),
            partial("far", [0..<0, 7..<Int64.max]),
            partial("none", []),
            partial("ordered", nil),
        ]
        let journal = try SQLiteJournal(path: path)
        journal.store(records)
        journal.store(partial("cleared", [1..<2]))
        journal.store(partial("cleared", nil))
        let expected = records + [partial("cleared", nil)]
        #expect(journal.record(for: records[0].key) == records[0])
        // Another journal opened meanwhile reads them, committed or not.
        #expect(try SQLiteJournal(path: path).allRecords() == expected)
        journal.finish()

        // In the database as the column's text: NULL for nil, the empty string for no ranges.
        let columns = try DatabaseQueue(path: path).read { db in
            try String?.fetchAll(db, sql: "SELECT missingRanges FROM record ORDER BY sequence")
        }
        #expect(columns == ["0-1048576,2097152-4194304", "0-0,7-9223372036854775807", "", nil, nil])
        let reopened = try SQLiteJournal(path: path)
        #expect(reopened.allRecords() == expected)
        for record in expected { #expect(reopened.record(for: record.key) == record) }
    }

    @Test("missing ranges that do not read back drop their record, as other malformed rows are, without a crash")
    func malformedMissingRanges() throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        let bad = [
            "x", "1", "1-", "-1", "-1-2", "1--2", "1-2-3", "3-2", "1-2,", ",1-2", "1-2,,3-4", " 1-2", "+1-2", "1-2 ",
            "0-99999999999999999999", "0x1-2", "1-２",
        ]
        func record(_ index: Int) -> JournalRecord {
            JournalRecord(
                key: JournalKey(url: "http://h/\(index)", destination: "/d/"), path: "/d/\(index)",
                state: .partial(validator: "\"e\"", totalBytes: 10, missingRanges: [1..<2]))
        }
        let journal = try SQLiteJournal(path: path)
        journal.store((0...bad.count).map(record))
        journal.finish()
        try DatabaseQueue(path: path).write { db in
            for (index, text) in bad.enumerated() {
                try db.execute(
                    sql: "UPDATE record SET missingRanges = ? WHERE url = ?", arguments: [text, "http://h/\(index)"])
            }
        }
        let reopened = try SQLiteJournal(path: path)
        #expect(reopened.allRecords() == [record(bad.count)])
        for index in bad.indices { #expect(reopened.record(for: record(index).key) == nil, "\(bad[index])") }
    }

    @Test("a batch of records is one write, in order; a batch removal forgets them all")
    func batches() throws {
        let dir = try TemporaryDirectory()
        let path = dir.url.appendingPathComponent("j.sqlite").path
        let records = (0..<500).map {
            JournalRecord(
                key: JournalKey(url: "http://h/\($0)", destination: "/d/"), path: "/d/\($0)", state: .requested)
        }
        try SQLiteJournal(path: path).store(records)
        #expect(try SQLiteJournal(path: path).allRecords() == records)
        try SQLiteJournal(path: path).remove(records.prefix(499).map(\.key))
        #expect(try SQLiteJournal(path: path).allRecords() == [records[499]])
    }

    @Test("stores from many threads at once all land")
    func concurrentStores() async throws {
        let dir = try TemporaryDirectory()
        let journal = try SQLiteJournal(path: dir.url.appendingPathComponent("j.sqlite").path)
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<200 {
                group.addTask {
                    let key = JournalKey(url: "http://h/\(index)", destination: "/d/")
                    journal.store(
                        JournalRecord(
                            key: key, path: "/d/\(index)",
                            state: .completed(
                                size: 1, sha256: "x", stamp: FileStamp(size: 1, modifiedNanoseconds: 7, inode: 9))))
                }
            }
        }
        #expect(journal.allRecords().count == 200)
    }

    @Test("commits from many tasks at once are each found when they return, by this journal and by one opened after")
    func concurrentCommits() async throws {
        let dir = try TemporaryDirectory()
        let path = dir.url.appendingPathComponent("j.sqlite").path
        let journal = try SQLiteJournal(path: path)
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<300 {
                group.addTask {
                    let key = JournalKey(url: "http://h/\(index)", destination: "/d/")
                    await journal.commit(JournalRecord(key: key, path: "/d/\(index)", state: .requested))
                    #expect(journal.record(for: key) != nil, "record \(index) not found when commit returned")
                    // Another instance opened now reads the file: the record is there, not only in this one's memory.
                    let seen = try? SQLiteJournal(path: path).record(for: key)
                    #expect(seen != nil, "record \(index) not written when commit returned")
                }
            }
        }
        #expect(journal.allRecords().count == 300)
        // Another instance reads the file: every record is there, not only in this one's memory.
        #expect(try SQLiteJournal(path: path).allRecords().count == 300)
    }

    @Test("commits, stores, removals and reads of everything at once: each key's last change wins")
    func everythingAtOnce() async throws {
        let dir = try TemporaryDirectory()
        let path = dir.url.appendingPathComponent("j.sqlite").path
        let journal = try SQLiteJournal(path: path)
        let stamp = FileStamp(size: 1, modifiedNanoseconds: 2, inode: 3)
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<200 {
                group.addTask {
                    let key = JournalKey(url: "http://h/\(index)", destination: "/d/")
                    journal.store(JournalRecord(key: key, path: "/d/\(index)", state: .requested))
                    await journal.commit(
                        JournalRecord(
                            key: key, path: "/d/\(index)",
                            state: .completed(
                                size: 1, sha256: "x", stamp: FileStamp(size: 1, modifiedNanoseconds: 7, inode: 9))))
                    if index % 3 == 0 { journal.remove(key) }
                    await journal.commit(
                        JournalRecord(
                            key: key, path: "/d/\(index)", state: .completed(size: 1, sha256: "x", stamp: stamp)))
                    #expect(journal.record(for: key)?.state == .completed(size: 1, sha256: "x", stamp: stamp))
                    if index % 50 == 0 { _ = journal.allRecords() }
                }
            }
        }
        let reopened = try SQLiteJournal(path: path).allRecords()
        #expect(reopened.count == 200)
        #expect(reopened.allSatisfy { $0.state == .completed(size: 1, sha256: "x", stamp: stamp) })
    }

    @Test("the last change committed wins, whatever the wall clock said when earlier ones were written")
    func lastCommitWins() throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        let key = JournalKey(url: "http://h/a", destination: "/d/")
        let gone = JournalKey(url: "http://h/b", destination: "/d/")
        // An earlier version ordered changes by the wall clock: rows it wrote while the clock ran a year ahead carry
        // that time. Its schema, as it left the database.
        do {
            let old = try SQLiteJournal(path: path)
            old.store([
                JournalRecord(key: key, path: "/d/a", state: .failed(message: "ahead")),
                JournalRecord(key: gone, path: "/d/b", state: .requested),
            ])
            old.finish()
        }
        try DatabaseQueue(path: path).write { db in
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = 'v6: without changedAt'")
            try db.execute(sql: "ALTER TABLE record ADD COLUMN changedAt INTEGER")
            let ahead = (Int64(Date().timeIntervalSince1970) + 365 * 86_400) * 1_000_000_000
            try db.execute(sql: "UPDATE record SET changedAt = ?", arguments: [ahead])
        }
        let journal = try SQLiteJournal(path: path)
        journal.store(JournalRecord(key: key, path: "/d/a", state: .requested))
        journal.remove(gone)
        #expect(journal.record(for: key)?.state == .requested)
        #expect(journal.record(for: gone) == nil)
        let columns = try DatabaseQueue(path: path).read { db in try db.columns(in: "record").map(\.name) }
        #expect(!columns.contains("changedAt"))

        // Two journals (two connections, as two processes have) writing one key in turn: each write, once committed,
        // is seen by the other and replaces the one before, whoever wrote it.
        let second = try SQLiteJournal(path: path)
        for turn in 0..<20 {
            let (writer, reader) = turn.isMultiple(of: 2) ? (journal, second) : (second, journal)
            let record = JournalRecord(key: key, path: "/d/a", state: .failed(message: "turn \(turn)"))
            writer.store(record)
            #expect(writer.record(for: key) == record, "turn \(turn)")  // its own write, at once
            _ = writer.allRecords()  // committed
            #expect(reader.record(for: key) == record, "turn \(turn)")
        }
        #expect(try SQLiteJournal(path: path).record(for: key)?.state == .failed(message: "turn 19"))
    }

    @Test("a log an earlier version left beside the database is named in an error; empty ones are cleared away")
    func olderLogs() throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("j.sqlite").path
        try SQLiteJournal(path: path).store(
            JournalRecord(key: JournalKey(url: "http://h/a", destination: "/d/"), path: "/d/a", state: .requested))
        // Empty, reserved (zeros) and made-ahead logs hold no change.
        #expect(FileManager.default.createFile(atPath: path + "-log.1.0", contents: Data()))
        #expect(FileManager.default.createFile(atPath: path + "-log.1.1", contents: Data(count: 65_536)))
        #expect(FileManager.default.createFile(atPath: path + "-newlog.1.2", contents: Data(count: 65_536)))
        #expect(try SQLiteJournal(path: path).allRecords().count == 1)
        #expect(!FileManager.default.fileExists(atPath: path + "-log.1.0"))
        #expect(!FileManager.default.fileExists(atPath: path + "-log.1.1"))
        #expect(!FileManager.default.fileExists(atPath: path + "-newlog.1.2"))
        // One with a frame: its changes are reached only by the version that wrote it.
        var frame = Data([40, 0, 0, 0])
        frame.append(Data(count: 60))
        #expect(FileManager.default.createFile(atPath: path + "-log.7.0", contents: frame))
        do {
            _ = try SQLiteJournal(path: path)
            Issue.record("opened over an older version's log")
        } catch let error as JournalOpenError {
            #expect(error.reason == .olderLog)
            #expect(error.description.contains("'\(path)-log.7.0'"), "\(error)")
            #expect(error.description.contains("delete the log"), "\(error)")
        }
        #expect(FileManager.default.fileExists(atPath: path + "-log.7.0"), "its changes are not ours to drop")
    }

    @Test("a database that cannot be opened is an error naming it, not a crash")
    func unopenable() throws {
        let dir = try TemporaryDirectory()
        let path = dir.url.appendingPathComponent("not-a-db").path
        try Data(repeating: 0x41, count: 4096).write(to: URL(fileURLWithPath: path))
        #expect(throws: (any Error).self) { try SQLiteJournal(path: path) }
    }

    /// `--journal` pointed at an application's database by mistake: opening it as a journal switched it to WAL and
    /// added the journal's tables to it.
    @Test("another program's SQLite database is refused, named with its tables, and left byte for byte as it was")
    func foreignDatabaseLeftAlone() throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("photos.db").path
        try DatabaseQueue(path: path).write { db in
            try db.execute(
                sql: "CREATE TABLE photo (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO photo VALUES (1, 'a')")
            try db.execute(sql: "CREATE TABLE album (id INTEGER PRIMARY KEY)")
        }
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        do {
            _ = try SQLiteJournal(path: path)
            Issue.record("opened another program's database as a journal")
        } catch let error as JournalOpenError {
            #expect(error.reason == .notAJournal)
            #expect(
                error.description.contains("'\(path)'") && error.description.contains("'album', 'photo'"), "\(error)")
            #expect(!error.description.contains("delete"), "never advise deleting someone's database: \(error)")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["photos.db"])
        // An empty database, and one with the journal's tables (made by the journal itself), open as before.
        let empty = dir.file("empty.db").path
        try DatabaseQueue(path: empty).write { db in try db.execute(sql: "PRAGMA user_version = 0") }
        #expect(try SQLiteJournal(path: empty).allRecords().isEmpty)
        #expect(try SQLiteJournal(path: empty).allRecords().isEmpty)
    }

    /// A journal a newer Haul migrated further is its: written by this version's rules it could lose what that one
    /// relies on.
    @Test("a journal a newer version of Haul migrated is refused, naming what it does not know, and left as it was")
    func newerJournalLeftAlone() throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("journal.sqlite").path
        let key = JournalKey(url: "http://h/a", destination: "/d/")
        try SQLiteJournal(path: path).store(JournalRecord(key: key, path: "/d/a", state: .requested))
        try DatabaseQueue(path: path).write { db in
            try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('v99: from a later Haul')")
        }
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        do {
            _ = try SQLiteJournal(path: path)
            Issue.record("opened a newer version's journal")
        } catch let error as JournalOpenError {
            #expect(error.reason == .newerVersion)
            #expect(error.description.contains("'v99: from a later Haul'"), "\(error)")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
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
            #expect(
                { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "big.bin", size: size) }(),
                "not the server's bytes")
            #expect(server.stats.requests.last?.range != nil)
            #expect(server.stats.bodyBytesSent - sentBefore < size)
            let again = try await downloader().download(request)
            #expect(again.skipped)
        }
    }

    @Test("no credential reaches the journal; downloads resumed from it get theirs from the credential provider")
    func credentialsStayOutOfTheJournal() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let path = dir.url.appendingPathComponent(".haul/journal.sqlite").path
            let password = "j0urnal-s3cret"
            let credentials = Credentials(user: "jo", password: password)
            func queue(_ provider: (any CredentialProvider)?) throws -> DownloadQueue {
                var configuration = Downloader.Configuration()
                configuration.journal = try SQLiteJournal(path: path)  // a new instance: what a new process sees
                configuration.credentials = provider
                return DownloadQueue(
                    downloader: Downloader(transport: AsyncHTTPClientTransport.shared, configuration: configuration))
            }
            let locked = server.url(
                path: "/bytes/locked", query: ["size": "1000", "requireAuth": credentials.basicAuthorization])
            var components = try #require(URLComponents(url: locked, resolvingAgainstBaseURL: false))
            components.user = credentials.user
            components.password = password
            let request = DownloadRequest(url: try #require(components.url), destination: .directory(dir.url))

            // Recorded as requested, never run (as if the process were killed first).
            let first = try queue(nil)
            first.pause()
            _ = first.add(request)
            let journal = try SQLiteJournal(path: path)
            try await eventually("the request is in the journal") { journal.allRecords().count == 1 }
            journal.finish()
            let files = try FileManager.default.contentsOfDirectory(atPath: dir.file(".haul").path)
            for name in files {
                let bytes = contentsOf(dir.file(".haul").appendingPathComponent(name)) ?? []
                #expect(!String(decoding: bytes, as: UTF8.self).contains(password), "\(name)")
                #expect(!String(decoding: bytes, as: UTF8.self).contains(credentials.basicAuthorization.dropFirst(6)))
            }
            let mode = try FileManager.default.attributesOfItem(atPath: dir.file(".haul").path)[.posixPermissions]
            #expect(mode as? Int == 0o700)

            // Without a provider the resumed download has no credentials; with one, it has them again.
            let bare = try queue(nil).resumeUnfinished()
            let error = await #expect(throws: DownloadError.self) { try await bare.first?.result }
            #expect(error?.status == 401)
            var provider = OriginCredentials()
            provider.add(credentials, for: locked)
            let resumed = try queue(provider).resumeUnfinished(includingFailed: true)
            #expect(resumed.count == 1)
            _ = try await resumed[0].result
            #expect(server.stats.requests.last?.authorization == credentials.basicAuthorization)
        }
    }

    @Test("a queue on the journal re-admits after a restart what it had not finished, in order, and nothing else")
    func queueReadmitsUnfinished() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let path = dir.url.appendingPathComponent(".haul/journal.sqlite").path
            func queue(width: Int) throws -> DownloadQueue {
                var configuration = Downloader.Configuration()
                configuration.journal = try SQLiteJournal(path: path)  // a new instance: what a new process sees
                configuration.keepsPartialOnCancel = true
                return DownloadQueue(
                    downloader: Downloader(transport: AsyncHTTPClientTransport.shared, configuration: configuration),
                    configuration: .init(maxConcurrentDownloads: width))
            }
            func bytes(_ name: String, _ query: [String: String] = [:], priority: Int = 0) -> DownloadRequest {
                var request = DownloadRequest(
                    url: server.url(path: "/bytes/\(name)", query: ["size": "1000"].merging(query) { $1 }),
                    destination: .directory(dir.url), priority: priority)
                request.headerFields[HTTPField.Name("X-Run")!] = name
                return request
            }
            let small = ["a", "b", "c"].map { bytes($0) }
            let big = bytes("big", ["size": "1000000", "rate": "500000"], priority: 1)
            let missing = bytes("missing", ["status": "404"], priority: 2)
            let done = bytes("done", priority: 3)
            let size = 1_000_000

            // The first process: one at a time, highest priority first. `done` completes, `missing` fails, `big`
            // is stopped with a partial (as a kill would leave it), and the small ones never start.
            let first = try queue(width: 1)
            first.pause()
            let handles = first.add(small + [big, missing, done])
            let cancelled = first.add(bytes("cancelled"))
            cancelled.cancel()  // the caller gave up on this one: it is forgotten
            first.resume()
            _ = try await handles[5].result
            await #expect(throws: DownloadError.self) { try await handles[4].result }
            let journal = try SQLiteJournal(path: path)
            let partial = dir.url.appendingPathComponent(".big.haul-partial").path
            try await eventually("big has a partial of 300,000 bytes or more, in the journal") {
                let recorded = journal.allRecords().first { $0.key == JournalKey(big) }
                let written = (try? FileManager.default.attributesOfItem(atPath: partial)[.size] as? Int) ?? 0
                return recorded?.state.isUnfinished == true && recorded?.request == big && written >= 300_000
            }
            first.pause()
            handles[3].cancel()  // keeps its partial (keepsPartialOnCancel)
            await #expect(throws: DownloadError.self) { try await handles[3].result }
            #expect(journal.allRecords().count == 6)

            // The next process re-admits the small ones and the partial, in the order first added.
            let second = try queue(width: 2)
            let resumed = second.resumeUnfinished()
            #expect(resumed.map(\.request) == small + [big])  // every setting, headers included, as given
            for (handle, name) in zip(resumed, ["a", "b", "c", "big"]) {
                let result = try await handle.result
                let intact =
                    contentsOf(result.fileURL)
                    == TestServer.expectedBytes(name: name, size: name == "big" ? size : 1000)
                #expect(intact, "\(name) is not what the server sent")
            }
            let bigRequests = server.stats.requests.filter { $0.path == "/bytes/big" }
            #expect(bigRequests.count == 2)
            #expect(bigRequests.last?.range?.hasPrefix("bytes=") == true)
            #expect(server.stats.requests(toPath: "/bytes/done") == 1)
            #expect(server.stats.requests(toPath: "/bytes/missing") == 1)
            #expect(server.stats.requests(toPath: "/bytes/cancelled") == 0)
            #expect(server.stats.requests.allSatisfy { $0.value(forHeader: "X-Run") != nil })

            // Only failures are left, and only when asked for.
            let third = try queue(width: 2)
            #expect(third.resumeUnfinished().isEmpty)
            let retried = third.resumeUnfinished(includingFailed: true)
            #expect(retried.map(\.request) == [missing])
            await #expect(throws: DownloadError.self) { try await retried[0].result }
        }
    }
}
