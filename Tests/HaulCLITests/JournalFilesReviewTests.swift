import Foundation
import Haul
import HaulSQLite
import HaulTestServer
import HaulTestSupport
import Testing

/// Hostile review of the files Haul keeps for itself (the journal), through `haul get`: what they say is not enough
/// to write outside the directory asked for.
@Suite("haul get: hostile journal files", .timeLimit(.minutes(2)))
struct JournalFilesReviewTests {
    /// Promise: a file outside DIR is never written because of what a journal says. The record of a download named by
    /// Content-Disposition carries the path it was published at; a journal naming a path elsewhere (damaged, foreign,
    /// or planted) must not have the download resumed or published there.
    @Test("a partial record naming a path outside DIR is not resumed there")
    func partialRecordOutsideDirectory() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let out = dir.path + "/D"
            let elsewhere = dir.path + "/elsewhere"
            try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
            let url = bytes(server, "f", size: 4000)
            let expected = TestServer.expectedBytes(name: "f", size: 4000)
            let first = try await HaulProcess.run(["get", "--content-disposition", "-d", out, url])
            #expect(first.status == 0, "\(first)")
            try FileManager.default.removeItem(atPath: out + "/f")

            // The journal now says the download was left partial at a file of another directory, with its partial.
            let victim = elsewhere + "/victim"
            let partial = elsewhere + "/.victim.haul-partial"
            #expect(FileManager.default.createFile(atPath: partial, contents: Data(expected.prefix(1000))))
            do {
                let journal = try SQLiteJournal(path: out + "/.haul/journal.sqlite", durability: .powerLoss)
                let record = try #require(journal.allRecords().first)
                guard case .completed(_, _, _, let validator?) = record.state else {
                    Issue.record("not a completed record with a validator: \(record)")
                    return
                }
                journal.store(
                    JournalRecord(
                        key: record.key, path: victim,
                        state: .partial(validator: validator, totalBytes: 4000, missingRanges: nil),
                        request: record.request))
            }

            let run = try await HaulProcess.run(["get", "--content-disposition", "-d", out, url])
            #expect(run.status == 0, "\(run)")
            #expect(!FileManager.default.fileExists(atPath: victim), "a file was published outside DIR: \(run)")
            #expect(contentsOf(URL(fileURLWithPath: partial)) == Array(expected.prefix(1000)), "the partial elsewhere")
            #expect(contentsOf(URL(fileURLWithPath: out + "/f")) == expected)
        }
    }
}
