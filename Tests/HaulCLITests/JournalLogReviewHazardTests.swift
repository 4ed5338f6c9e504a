import Foundation
import GRDB
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Hostile review of the journal's pending logs, through `haul get`.
@Suite("haul get: journal log review hazards", .timeLimit(.minutes(2)))
struct JournalLogReviewHazardTests {
    /// `--journal` given an application's database by mistake: refused before a request, naming the file, and the
    /// database left as it was (not switched to WAL, no journal tables added).
    @Test("haul get --journal with another program's SQLite database refuses it and leaves it as it was")
    func foreignDatabaseAsJournal() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let database = dir.file("app.db").path
            try await DatabaseQueue(path: database).write { db in
                try db.execute(sql: "CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT)")
            }
            let before = try Data(contentsOf: URL(fileURLWithPath: database))
            let url = server.url(path: "/bytes/one", query: ["size": "10"])
            let run = try await HaulProcess.run([
                "get", "--journal", database, "-d", dir.file("out").path, url.absoluteString,
            ])
            #expect(run.status == 2, "\(run)")
            #expect(run.stderr.contains(database) && run.stderr.contains("not a Haul journal"), "\(run)")
            #expect(server.stats.requestCount == 0)
            #expect(try Data(contentsOf: URL(fileURLWithPath: database)) == before)
            #expect(!FileManager.default.fileExists(atPath: database + "-wal"))
        }
    }

    /// Promise: a garbage pending log is refused or skipped with a clear message, never a crash.
    @Test("a large garbage pending log beside the journal does not crash haul get")
    func hugeGarbageLog() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let out = dir.path + "/D"
            try FileManager.default.createDirectory(atPath: out + "/.haul", withIntermediateDirectories: true)
            // A sparse file (no disk used) of 1 TiB named as a pending log, starting with the log's header.
            let log = out + "/.haul/journal.sqlite-pending.1.2.0"
            let descriptor = open(log, O_RDWR | O_CREAT, 0o600)
            #expect(descriptor >= 0)
            var header: [UInt8] = []
            for value in [0x4C44_4E45_5048_4148 as UInt64, 1] {
                for index in 0..<8 { header.append(UInt8(truncatingIfNeeded: value >> (8 * index))) }
            }
            #expect(pwrite(descriptor, header, header.count, 0) == header.count)
            #expect(ftruncate(descriptor, 1 << 40) == 0)
            close(descriptor)
            let run = try await HaulProcess.run(["get", "-d", out, bytes(server, "f", size: 1000)])
            #expect(run.status == 0 || run.status == 2, "\(run.status): \(run.stderr.prefix(300))")
        }
    }
}
