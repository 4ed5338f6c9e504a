import Foundation
import HaulTestSupport
import Testing

/// `haul --version`: the version and the commit of the sources the binary was built from, on one line; and
/// scripts/build-commit, which finds that commit at build time, in each kind of source tree.
@Suite("haul --version", .timeLimit(.minutes(1)))
struct VersionTests {
    /// This file is Tests/HaulCLITests/VersionTests.swift: three levels below the package root.
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// Runs `executable ARGUMENTS` with git's identity set (a machine may have none configured); its standard output,
    /// or nil when it fails or cannot start.
    static func output(_ executable: String, _ arguments: [String]) async -> String? {
        var environment = ProcessInfo.processInfo.environment
        for name in ["GIT_AUTHOR", "GIT_COMMITTER"] {
            environment["\(name)_NAME"] = "Haul Tests"
            environment["\(name)_EMAIL"] = "tests@haul.invalid"
        }
        guard let child = try? ChildProcess(executable, arguments, environment: environment) else { return nil }
        let run = await child.finish()
        return run.status == 0 ? run.stdout : nil
    }

    /// The commit the sources are at, learnt apart from the build: a checkout's HEAD (no repository above the package
    /// counts, as for scripts/build-commit), or else the commit `git archive` wrote, or else `unknown`; 12 digits.
    static func sourcesCommit() async -> String {
        let ceiling = "GIT_CEILING_DIRECTORIES=\(packageRoot.deletingLastPathComponent().path)"
        if let head = await output("env", [ceiling, "git", "-C", packageRoot.path, "rev-parse", "--verify", "HEAD"]) {
            return String(head.prefix(12))
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
            run.stdout.wholeMatch(of: #/haul (\d+\.\d+\.\d+) \(commit ([0-9a-f]{12}|unknown)(-dirty)?\)\n/#),
            "not `haul VERSION (commit HASH)`: \(run)")
        // Whether tracked files had changed is left out: an edit between the build and this test would change it.
        #expect(line.output.2 == (await Self.sourcesCommit()), "\(run)")
    }

    /// A package root for scripts/build-commit at `directory/package`: the script in its scripts/, and a
    /// .git-archive-commit as in git.
    static func package(in directory: TemporaryDirectory, archiveCommit: String = "$Format:%H$") throws -> URL {
        let root = directory.url.appendingPathComponent("package")
        let scripts = root.appendingPathComponent("scripts")
        try FileManager.default.createDirectory(at: scripts, withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            at: packageRoot.appendingPathComponent("scripts/build-commit"),
            to: scripts.appendingPathComponent("build-commit"))
        try Data("\(archiveCommit)\n".utf8).write(to: root.appendingPathComponent(".git-archive-commit"))
        return root
    }

    /// Runs `git ARGUMENTS` in `directory`, which must succeed; its output.
    @discardableResult
    static func git(_ directory: URL, _ arguments: [String]) async throws -> String {
        try #require(await output("git", ["-C", directory.path] + arguments), "git \(arguments) failed")
    }

    /// What scripts/build-commit in `root` writes: the commit and whether tracked files changed.
    static func buildCommit(_ root: URL) async throws -> (commit: String?, changed: Bool) {
        let file = root.appendingPathComponent("generated/BuildCommit.swift")
        try #require(
            await output("/bin/sh", [root.appendingPathComponent("scripts/build-commit").path, file.path]) != nil,
            "scripts/build-commit failed")
        let source = try String(contentsOf: file, encoding: .utf8)
        let commit = try #require(source.firstMatch(of: #/let generatedCommit: String\? = (nil|"([0-9a-f]+)")/#))
        let changed = try #require(source.firstMatch(of: #/let generatedHasLocalChanges = (true|false)/#))
        return (commit.output.2.map(String.init), changed.output.1 == "true")
    }

    @Test("scripts/build-commit: a checkout's HEAD, changed tracked files marked, unchanged output left untouched")
    func buildCommitInCheckout() async throws {
        let directory = try TemporaryDirectory()
        let root = try Self.package(in: directory)
        try await Self.git(root, ["init", "--quiet"])
        try await Self.git(root, ["add", "."])
        try await Self.git(root, ["commit", "--quiet", "-m", "first"])
        let head = try await Self.git(root, ["rev-parse", "HEAD"]).trimmingCharacters(in: .newlines)

        // The generated file is untracked: no change to the commit's files.
        #expect(try await Self.buildCommit(root) == (head, false))
        let file = root.appendingPathComponent("generated/BuildCommit.swift").path
        let written = try FileManager.default.attributesOfItem(atPath: file)[.modificationDate] as? Date
        try await Task.sleep(for: .milliseconds(20))
        #expect(try await Self.buildCommit(root) == (head, false))
        let rewritten = try FileManager.default.attributesOfItem(atPath: file)[.modificationDate] as? Date
        #expect(written != nil && written == rewritten, "unchanged output rewritten: a build would recompile")

        try Data("changed\n".utf8).write(to: root.appendingPathComponent(".git-archive-commit"))
        #expect(try await Self.buildCommit(root) == (head, true))
    }

    @Test("scripts/build-commit: sources without a .git of their own name no commit of a repository around them")
    func buildCommitInsideAnotherRepository() async throws {
        let directory = try TemporaryDirectory()
        let root = try Self.package(in: directory)
        try await Self.git(directory.url, ["init", "--quiet"])
        try await Self.git(directory.url, ["add", "."])
        try await Self.git(directory.url, ["commit", "--quiet", "-m", "around"])
        #expect(try await Self.buildCommit(root) == (nil, false))
    }

    @Test("scripts/build-commit: a `git archive` tarball's commit; none when the placeholder was not filled in")
    func buildCommitFromArchive() async throws {
        let commit = "0123456789abcdef0123456789abcdef01234567"
        let archived = try TemporaryDirectory()
        #expect(try await Self.buildCommit(try Self.package(in: archived, archiveCommit: commit)) == (commit, false))
        // The placeholder itself: sources copied out of a checkout without git.
        let copied = try TemporaryDirectory()
        #expect(try await Self.buildCommit(try Self.package(in: copied)) == (nil, false))
    }
}
