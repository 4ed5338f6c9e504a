import Foundation
import HaulTestSupport
import Testing

/// `haul --version`: the version and the commit of the sources the binary was built from, on one line.
@Suite("haul --version", .timeLimit(.minutes(1)))
struct VersionTests {
    /// This file is Tests/HaulCLITests/VersionTests.swift: three levels below the package root.
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// What `git ARGUMENTS` prints about the package root, asked as scripts/build-commit asks (no repository above the
    /// package counts); nil when git fails or is missing.
    static func git(_ arguments: [String]) async -> String? {
        var environment = ProcessInfo.processInfo.environment
        environment["GIT_CEILING_DIRECTORIES"] = packageRoot.deletingLastPathComponent().path
        guard let child = try? ChildProcess("git", ["-C", packageRoot.path] + arguments, environment: environment)
        else { return nil }
        let run = await child.finish()
        return run.status == 0 ? run.stdout : nil
    }

    /// The commit the binary must name, learnt from the sources independently of the build: a checkout's HEAD (12
    /// digits, `-dirty` with tracked files changed), or else the commit `git archive` wrote, or else `unknown`.
    static func expectedCommit() async -> String {
        if let head = await git(["rev-parse", "--verify", "--quiet", "HEAD"]) {
            let status = await git(["--no-optional-locks", "status", "--porcelain", "--untracked-files=no"])
            return String(head.prefix(12)) + (status == "" ? "" : "-dirty")
        }
        let archived = try? String(
            contentsOf: packageRoot.appendingPathComponent(".git-archive-commit"), encoding: .utf8)
        if let archived, archived.wholeMatch(of: #/[0-9a-f]+\n?/#) != nil { return String(archived.prefix(12)) }
        return "unknown"
    }

    @Test("prints `haul VERSION (commit HASH)` and exits 0, HASH being the commit the sources are at")
    func versionAndCommit() async throws {
        let run = try await HaulProcess.run(["--version"])
        #expect(run.status == 0, "\(run)")
        #expect(run.stderr.isEmpty, "\(run)")
        let line = try #require(
            run.stdout.wholeMatch(of: #/haul (\d+\.\d+\.\d+) \(commit ([0-9a-f]{12}(?:-dirty)?|unknown)\)\n/#),
            "not `haul VERSION (commit HASH)`: \(run)")
        #expect(line.output.2 == (await Self.expectedCommit()), "\(run)")
    }
}
