import Foundation
import PackagePlugin

/// Tells the target it is applied to which commit its sources are: before every build, scripts/build-commit writes
/// `generatedCommit` and `generatedHasLocalChanges` into a Swift file compiled with the target.
///
/// A prebuild command, not a build command: which files git reads to find the commit (HEAD, a loose or packed ref, a
/// worktree's own HEAD) is only known by asking git, so there are no inputs to declare. It costs a `git rev-parse`
/// and a `git status` per build (about 45 ms), and the file is rewritten only when what it says changes.
@main
struct BuildCommit: BuildToolPlugin {
    /// The one prebuild command that writes `BuildCommit.swift` for `target`.
    func createBuildCommands(context: PluginContext, target: any Target) throws -> [Command] {
        let outputDirectory = context.pluginWorkDirectoryURL.appending(path: "Generated")
        let script = context.package.directoryURL.appending(path: "scripts/build-commit")
        // The command gets this environment and no other: git is found on the PATH the build was started with, and
        // reads the user's configuration under HOME (a safe.directory for a checkout another user owns).
        let inherited = ProcessInfo.processInfo.environment
        var environment = ["PATH": inherited["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"]
        environment["HOME"] = inherited["HOME"]
        return [
            .prebuildCommand(
                displayName: "Reading the commit \(target.name) is built from",
                executable: URL(filePath: "/bin/sh"),
                arguments: [
                    script.path(percentEncoded: false),
                    outputDirectory.appending(path: "BuildCommit.swift").path(percentEncoded: false),
                ],
                environment: environment,
                outputFilesDirectory: outputDirectory)
        ]
    }
}
