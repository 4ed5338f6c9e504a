import Foundation
import Synchronization
import Testing

@testable import Haul

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The named partial's creation, and the unnamed partial (Linux `O_TMPFILE`) and the two ways it gets its name.
@Suite("PartialFile", .timeLimit(.minutes(1)))
struct PartialFileTests {
    @Test("a new partial starts empty, and a leftover nobody holds is emptied before it is written again")
    func createOrEmpty() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-partial-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = URL(string: "http://127.0.0.1/file")!
        let path = directory.appendingPathComponent(".file.haul-partial").path

        let fresh = try PartialFile(creatingAt: path, url: url)
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int == 0)
        fresh.remove()

        try Data(repeating: 0x41, count: 10_000).write(to: URL(fileURLWithPath: path))
        let reused = try PartialFile(creatingAt: path, url: url)
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int == 0)
        try reused.write(Data("new".utf8), url: url)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data("new".utf8))
        #expect(reused.size == 3)
    }

    #if os(Linux)
    @Test(
        "an unnamed file is linked by descriptor and through /proc alike, never over an existing file",
        arguments: [false, true])
    func linkUnnamed(throughProc: Bool) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-partial-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let destination = directory.appendingPathComponent("file").path

        let fd = open(directory.path, __O_TMPFILE | O_WRONLY | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        defer { close(fd) }
        let bytes = Array("unnamed until linked".utf8)
        #expect(write(fd, bytes, bytes.count) == bytes.count)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)

        #expect(PartialFile.linkDescriptor(fd, to: destination, throughProc: throughProc) == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == Data(bytes))
        // A second name over the first is refused, whichever way it is asked.
        #expect(PartialFile.linkDescriptor(fd, to: destination, throughProc: throughProc) == -1)
        #expect(errno == EEXIST)
        // A missing directory is an error of its own, not a reason to stop linking by descriptor.
        let refusedBefore = PartialFile.emptyPathRefused.load(ordering: .relaxed)
        #expect(PartialFile.linkDescriptor(fd, to: directory.path + "/missing/file", throughProc: throughProc) == -1)
        #expect(errno == ENOENT)
        #expect(PartialFile.emptyPathRefused.load(ordering: .relaxed) == refusedBefore)
    }
    #endif
}
