#if canImport(Glibc)
import Foundation
import Glibc
import Testing

@testable import HaulCommandLine

/// What `haul daemon` and `haul worker` do to give memory back (``ServiceMemory``), on glibc.
@Suite("haul daemon and haul worker: memory given back", .serialized, .timeLimit(.minutes(1)))
struct ServiceMemoryTests {
    /// This process's anonymous resident memory, in KiB.
    static func residentAnonymousKiB() throws -> Int {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("RssAnon:") })
        return try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]))
    }

    @Test("free pages between blocks still in use go back to the system, which glibc's free alone does not do")
    func freePagesGoBack() throws {
        // 64 MiB in blocks of 4,000 bytes, one in 64 kept: the free space lies between blocks in use, where glibc
        // leaves it resident.
        let blocks = (0..<16_384).map { _ -> UnsafeMutableRawPointer in
            let block = malloc(4000)!
            memset(block, 1, 4000)
            return block
        }
        for (index, block) in blocks.enumerated() where index % 64 != 0 { free(block) }
        let before = try Self.residentAnonymousKiB()
        ServiceMemory.returnFreePages()
        let after = try Self.residentAnonymousKiB()
        for (index, block) in blocks.enumerated() where index % 64 == 0 { free(block) }
        #expect(before - after > 32 * 1024, "resident \(before) KiB before, \(after) KiB after")
    }

    @Test("the allocator's arenas are limited without an error (glibc's mallopt found and accepting the limit)")
    func arenasLimited() {
        #expect(ServiceMemory.limitArenas())
    }
}
#endif
