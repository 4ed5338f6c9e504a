import ArgumentParser
import Foundation
import Haul
import HaulOperations
import HaulSQLite

/// `--journal` and `--no-journal`: where completed and partial downloads are remembered, for `haul get` and
/// `haul worker`.
struct JournalOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "Where completed and partial downloads are remembered (default: DIR/.haul/journal.sqlite).",
            valueName: "PATH"))
    var journal: String?

    @Flag(name: .customLong("no-journal"), help: "Remember nothing: a download run again starts over.")
    var noJournal = false

    func validate() throws {
        if journal != nil && noJournal { throw ValidationError("--journal and --no-journal cannot be combined") }
    }

    /// Whether downloads are remembered (not `--no-journal`).
    var isEnabled: Bool { !noJournal }

    /// Where the journal is kept (`--journal`, else DIR/.haul/journal.sqlite); `nil` with `--no-journal`.
    func path(directory: URL) -> String? {
        guard isEnabled else { return nil }
        return journal.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
            ?? directory.appendingPathComponent(".haul/journal.sqlite").path
    }

    /// Opens the journal of the options for downloads into `directory` and makes it `configuration`'s; returns it
    /// (`nil` with `--no-journal`), to be finished when the run is over. A journal that cannot be opened is a usage
    /// error followed by `summary`.
    func apply(to configuration: inout Downloader.Configuration, directory: URL, summary: String) throws
        -> SQLiteJournal?
    {
        let journal = try path(directory: directory).map { try Self.open(at: $0, summary: summary) }
        configuration.journal = journal
        return journal
    }

    /// Opens the journal at `path`; a failure is a usage error followed by `summary`.
    static func open(at path: String, summary: String) throws -> SQLiteJournal {
        let warned = Locked(false)
        do {
            // Each download is looked up once, before it is written: the journal need not remember its writes.
            return try SQLiteJournal(
                path: path, remembersWrites: false,
                onError: { error in
                    // Downloads go on; only what a rerun can skip or resume is affected. Said once.
                    let first = warned.withLock { warned in
                        defer { warned = true }
                        return !warned
                    }
                    if first { Console.err("haul: warning: journal '\(path)': \(error); a rerun may fetch again\n") }
                })
        } catch {
            throw UsageFailure(
                [InputProblem(origin: "--journal", message: "\(error); or use --no-journal")], summary: summary)
        }
    }
}
