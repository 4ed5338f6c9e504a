import Foundation
import HaulTestSupport
import Testing

@testable import Haul

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A private file (a cookie jar, a session file) replaced whole: its mode, and what a process killed while writing
/// it would leave behind.
@Suite("PrivateFile", .timeLimit(.minutes(1)))
struct PrivateFileTests {
    @Test("a replaced file has the new bytes and mode 0600, with nothing beside it")
    func replaces() throws {
        let directory = try TemporaryDirectory()
        let path = directory.url.appendingPathComponent("session.txt").path
        try PrivateFile.replace(path, with: Array("old".utf8))
        umask(0)
        defer { umask(0o022) }
        try PrivateFile.replace(path, with: Array("new".utf8))
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data("new".utf8))
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["session.txt"])
    }

    #if os(Linux)
    /// A write to a file with a name in the directory is what a kill could leave behind: the directory is watched
    /// (inotify) while a file is replaced, and no file made in it may be written to, only one linked and renamed.
    @Test("the bytes are written into a file without a name: a kill while they are written leaves nothing behind")
    func writesUnnamed() throws {
        let directory = try TemporaryDirectory()
        let path = directory.url.appendingPathComponent("cookies.txt").path
        try PrivateFile.replace(path, with: Array("old".utf8))
        let watch = inotify_init1(Int32(IN_CLOEXEC))
        try #require(watch >= 0)
        defer { close(watch) }
        try #require(inotify_add_watch(watch, directory.path, UInt32(IN_CREATE | IN_MODIFY | IN_MOVED_TO)) >= 0)
        try PrivateFile.replace(path, with: Array(repeating: 0x61, count: 1 << 20))
        // The rename's event is always there: the read does not wait.
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        let count = buffer.withUnsafeMutableBytes { read(watch, $0.baseAddress, $0.count) }
        try #require(count > 0)
        var events: [(mask: UInt32, name: String)] = []
        var offset = 0
        // struct inotify_event: wd, mask, cookie, len (4 bytes each), then len bytes of name padded with NULs.
        func field(_ at: Int) -> UInt32 {
            buffer[at..<at + 4].withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }
        }
        while offset + 16 <= count {
            let length = Int(field(offset + 12))
            let name = String(decoding: buffer[offset + 16..<offset + 16 + length].prefix { $0 != 0 }, as: UTF8.self)
            events.append((field(offset + 4), name))
            offset += 16 + length
        }
        // A write to the unnamed file is reported under a name of the kernel's (`#INODE`) that no entry has: only a
        // write to a file created in the directory, before its rename, is one a kill could leave there.
        var created: Set<String> = []
        var writtenWhileNamed: [String] = []
        for event in events {
            if event.mask & UInt32(IN_CREATE) != 0 { created.insert(event.name) }
            if event.mask & UInt32(IN_MODIFY) != 0, created.contains(event.name) {
                writtenWhileNamed.append(event.name)
            }
        }
        #expect(writtenWhileNamed.isEmpty, "written while named: \(writtenWhileNamed)")
        #expect(created.count == 1, "one name linked, for the rename: \(created)")
        #expect(events.contains { $0.mask & UInt32(IN_MOVED_TO) != 0 && $0.name == "cookies.txt" })
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)).count == 1 << 20)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["cookies.txt"])
    }
    #endif
}
