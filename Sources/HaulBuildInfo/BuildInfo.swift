/// What the running program was built from, learnt at build time by the BuildCommit plugin (scripts/build-commit).
package enum BuildInfo {
    /// The full hash of the commit the sources were checked out at, or nil when the build could not tell (sources
    /// outside a git checkout and not from `git archive`, or no git).
    package static let commit: String? = generatedCommit

    /// Whether tracked files differed from ``commit`` when it was built.
    package static let hasLocalChanges = generatedHasLocalChanges

    /// The commit as `--version` shows it: its first 12 hex digits, `-dirty` after them when tracked files had
    /// changes, or `unknown`.
    package static var commitDescription: String {
        guard let commit else { return "unknown" }
        return String(commit.prefix(12)) + (hasLocalChanges ? "-dirty" : "")
    }
}
