import Foundation
import Haul
import HaulSQLite
import Logging
import Testing

@testable import HaulCommandLine

/// `--json`, `-q`, `-v`, `--journal`, `--no-journal`, `-d` and `-j`: the same in `get` and `worker`.
@Suite("Output, journal, directory and concurrency options", .timeLimit(.minutes(1)))
struct OutputAndJournalOptionsTests {
    @Test(
        "by default: text, no log, the journal in DIR/.haul, the current directory, 4 connections",
        arguments: downloadingCommands)
    func defaults(command: String) throws {
        let parsed = try parseDownloading(command, [])
        #expect(!parsed.output.json && !parsed.output.quiet && !parsed.output.verbose)
        #expect(try configuration(command, []).logger.logLevel != .debug)
        let here = URL(fileURLWithPath: ".", isDirectory: true).standardizedFileURL
        #expect(parsed.destination.url == here)
        #expect(parsed.journal.isEnabled)
        #expect(parsed.journal.path(directory: here) == here.appendingPathComponent(".haul/journal.sqlite").path)
        #expect(parsed.concurrency.connections() == 4)
    }

    @Test("--json, -q and -v", arguments: downloadingCommands)
    func output(command: String) throws {
        #expect(try parseDownloading(command, ["--json"]).output.json)
        #expect(try parseDownloading(command, ["-q"]).output.quiet)
        #expect(try parseDownloading(command, ["--quiet"]).output.quiet)
        #expect(try parseDownloading(command, ["--verbose"]).output.verbose)
        #expect(try configuration(command, ["-v"]).logger.logLevel == .debug)
        #expect(try parseDownloading(command, ["--json", "-v"]).output.json)
    }

    @Test("--json and --quiet are refused together", arguments: downloadingCommands)
    func jsonAndQuiet(command: String) {
        expectUsageError([command, "--json", "-q"], naming: ["--json", "--quiet"])
    }

    @Test("--journal PATH and --no-journal", arguments: downloadingCommands)
    func journal(command: String) throws {
        let directory = URL(fileURLWithPath: "/tmp/files", isDirectory: true)
        let given = try parseDownloading(command, ["--journal", "/tmp/j/../journal.sqlite"])
        #expect(given.journal.path(directory: directory) == "/tmp/journal.sqlite")
        let none = try parseDownloading(command, ["--no-journal"])
        #expect(!none.journal.isEnabled)
        #expect(none.journal.path(directory: directory) == nil)
        var configuration = Downloader.Configuration.commandLine
        #expect(try none.journal.apply(to: &configuration, directory: directory, summary: "") == nil)
        #expect(configuration.journal == nil)
    }

    @Test("--journal opens a SQLite journal and gives it to the engine", arguments: downloadingCommands)
    func journalOpened(command: String) throws {
        try withScratchDirectory { directory in
            let parsed = try parseDownloading(
                command, ["--journal", directory.appendingPathComponent("j.sqlite").path])
            var configuration = Downloader.Configuration.commandLine
            let journal = try parsed.journal.apply(to: &configuration, directory: directory, summary: "")
            #expect(journal != nil && configuration.journal != nil)
            journal?.finish()
        }
    }

    @Test("a journal that cannot be opened names --journal", arguments: downloadingCommands)
    func journalRefused(command: String) throws {
        try withScratchDirectory { directory in
            let file = directory.appendingPathComponent("file")
            try Data().write(to: file)
            let parsed = try parseDownloading(command, ["--journal", file.appendingPathComponent("j.sqlite").path])
            var configuration = Downloader.Configuration.commandLine
            let failure = #expect(throws: UsageFailure.self) {
                try parsed.journal.apply(to: &configuration, directory: directory, summary: "nothing")
            }
            #expect(failure?.problems.first?.origin == "--journal")
            #expect(failure?.summary == "nothing")
        }
    }

    @Test("--journal and --no-journal are refused together", arguments: downloadingCommands)
    func journalConflict(command: String) {
        expectUsageError([command, "--journal", "j.sqlite", "--no-journal"], naming: ["--journal", "--no-journal"])
    }

    @Test("-d/--dir", arguments: downloadingCommands)
    func directory(command: String) throws {
        #expect(try parseDownloading(command, ["-d", "/tmp/a/../b"]).destination.url.path == "/tmp/b")
        #expect(try parseDownloading(command, ["--dir", "/srv"]).destination.url.path == "/srv")
    }

    @Test("-j/--max-concurrent", arguments: downloadingCommands)
    func maxConcurrent(command: String) throws {
        #expect(try parseDownloading(command, ["-j", "1"]).concurrency.connections() == 1)
        #expect(try parseDownloading(command, ["--max-concurrent", "16"]).concurrency.connections(split: 32) == 16)
    }

    @Test(
        "-j below 1 or not a number is refused, naming the value",
        arguments: downloadingCommands, [("0", "-j/--max-concurrent"), ("-1", "-j/--max-concurrent"), ("four", "-j")])
    func maxConcurrentRefused(command: String, value: (String, String)) {
        expectUsageError([command, "-j", value.0], naming: [value.1, value.0])
    }

    @Test(
        "an option without its value is refused, naming it", arguments: downloadingCommands, ["-d", "-j", "--journal"])
    func missingValue(command: String, option: String) {
        expectUsageError([command, option], naming: ["Missing value", option])
    }

    @Test("an unknown option is refused, naming it", arguments: downloadingCommands)
    func unknownOption(command: String) {
        expectUsageError([command, "--no-such-option"], naming: ["--no-such-option"])
    }
}
