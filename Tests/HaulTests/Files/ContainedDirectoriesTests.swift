import Foundation
import HaulTestSupport
import Testing

@testable import Haul

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The one walk that makes download directories under a base without following links (`haul get`'s `dir=`, a
/// worker's paths).
@Suite("ContainedDirectories")
struct ContainedDirectoriesTests {
    @Test("missing directories are made, with 0777 less the umask; checking alone makes nothing")
    func makesWhatIsMissing() throws {
        let directory = try TemporaryDirectory()
        let walker = ContainedDirectories(base: directory.url.path)
        #expect(walker.walk(["a", "b"], making: false) == nil)
        #expect(!FileManager.default.fileExists(atPath: directory.url.path + "/a"))
        let mask = umask(0o022)
        defer { umask(mask) }
        #expect(walker.walk(["a", "b"], making: true) == nil)
        let made = try FileManager.default.attributesOfItem(atPath: directory.url.path + "/a/b")
        #expect(made[.type] as? FileAttributeType == .typeDirectory)
        #expect((made[.posixPermissions] as? NSNumber)?.intValue == 0o755)
    }

    @Test("a symbolic link or a file in the way stops the walk, naming its path; nothing is made past it")
    func refusesLinksAndFiles() throws {
        let directory = try TemporaryDirectory()
        let outside = try TemporaryDirectory()
        let base = directory.url.path
        #expect(symlink(outside.url.path, base + "/link") == 0)
        #expect(FileManager.default.createFile(atPath: base + "/file", contents: Data("x".utf8)))
        let walker = ContainedDirectories(base: base)
        for making in [false, true] {
            #expect(
                walker.walk(["link", "sub"], making: making)
                    == ContainedDirectories.Problem(path: base + "/link", finding: .symbolicLink))
            #expect(
                walker.walk(["file", "sub"], making: making)
                    == ContainedDirectories.Problem(path: base + "/file", finding: .notDirectory))
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: outside.url.path).isEmpty)
    }

    @Test("a directory that cannot be made is named with the system's reason")
    func cannotCreate() throws {
        let directory = try TemporaryDirectory()
        let base = directory.url.path + "/missing-parent/base"
        let problem = ContainedDirectories(base: base).walk(["a"], making: true)
        #expect(problem == ContainedDirectories.Problem(path: base + "/a", finding: .cannotCreate(errno: ENOENT)))
    }
}
