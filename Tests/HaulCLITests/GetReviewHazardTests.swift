import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A hostile review of `haul get` and the files it writes.
@Suite("haul get: review hazards", .timeLimit(.minutes(3)))
struct GetReviewHazardTests {
    /// Promise: Haul's records directory (DIR/.haul) is not a download's to write into: `-o .haul` is refused for
    /// that reason, and the journal must stay usable whatever a list asks.
    @Test("dir=.haul in an input file is refused; the journal is never replaced by a download")
    func dirIntoRecordsDirectory() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let out = dir.path + "/D"
            // A first run makes the journal.
            let first = bytes(server, "first", size: 1000)
            #expect(try await HaulProcess.run(["get", "-d", out, first]).status == 0)
            let journal = out + "/.haul/journal.sqlite"
            #expect(FileManager.default.fileExists(atPath: journal))
            let list = dir.file("list.txt")
            try Data("\(bytes(server, "journal.sqlite", size: 5000))\n  dir=.haul\n".utf8).write(to: list)
            let run = try await HaulProcess.run(["get", "--on-conflict", "overwrite", "-d", out, "-i", list.path])
            // A usage error naming the entry and the value; nothing downloaded.
            #expect(run.status == 2, "\(run)")
            // Named by its entry's line (the URL's, as every option's problem is) and its value.
            #expect(run.stderr.contains("list.txt:1") && run.stderr.contains("dir='.haul'"), "\(run)")
            #expect(server.stats.requests.count == 1, "dir=.haul was downloaded into Haul's records directory")
            // And the journal is still a journal: a rerun of the first command skips its file.
            let again = try await HaulProcess.run(["get", "-d", out, first])
            #expect(again.status == 0 && again.stdout.contains("already complete"), "\(again)")
        }
    }

    /// Promise: no download writes through a symbolic link planted in the destination (ContainedDirectories refuses
    /// a link at a dir= directory). Here the link is planted after the input was checked, while the first download
    /// of the list is held by the server.
    @Test("a symbolic link planted at a dir= directory during the run is not written through")
    func dirSymlinkPlantedDuringRun() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let out = dir.path + "/D"
            let outside = dir.path + "/outside"
            try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
            let gate = "plant-\(UUID().uuidString)"
            let held = bytes(server, "held", size: 1000, ["hold": gate])
            let victim = bytes(server, "victim", size: 1000)
            let list = dir.file("list.txt")
            try Data("\(held)\n\(victim)\n  dir=sub\n".utf8).write(to: list)
            let process = try HaulProcess(["get", "-j", "1", "-d", out, "-i", list.path])
            try await eventually("the first download is held") { server.heldCount(at: gate) > 0 }
            // The input was checked: now `sub` (made already, or not yet) becomes a link out of the destination.
            try? FileManager.default.removeItem(atPath: out + "/sub")
            #expect(symlink(outside, out + "/sub") == 0)
            server.openGate(gate)
            let run = await process.finish()
            let escaped = (try? FileManager.default.contentsOfDirectory(atPath: outside)) ?? []
            #expect(escaped.isEmpty, "written outside the destination through the link: \(escaped)\n\(run)")
            #expect(run.status != 0, "the download through the link was reported done\n\(run)")
        }
    }
}
