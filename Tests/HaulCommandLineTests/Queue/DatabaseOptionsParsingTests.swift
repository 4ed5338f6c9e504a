import ArgumentParser
import Foundation
import HaulPostgres
import Testing

@testable import HaulCommandLine

/// `--db` and `--queue`, shared by `enqueue`, `worker`, `status` and `queue`'s subcommands.
@Suite("Database options", .timeLimit(.minutes(1)))
struct DatabaseOptionsParsingTests {
    static let commands = [
        ["enqueue"], ["worker"], ["status"], ["queue", "retry-failed"], ["queue", "cancel", "--all"],
        ["queue", "set", "--per-host", "none"], ["queue", "purge", "--older-than", "7d"],
    ]

    /// The database options of `arguments`, parsed.
    func options(_ arguments: [String]) throws -> DatabaseOptions {
        switch try HaulCommand.parseAsRoot(arguments) {
        case let command as EnqueueCommand: command.database
        case let command as WorkerCommand: command.database
        case let command as StatusCommand: command.database
        case let command as QueueCommand.RetryFailed: command.database
        case let command as QueueCommand.Cancel: command.database
        case let command as QueueCommand.Set: command.database
        case let command as QueueCommand.Purge: command.database
        case let command: throw ParsedAs(command: "\(type(of: command))")
        }
    }

    struct ParsedAs: Error { var command: String }

    @Test("--db and --queue", arguments: commands)
    func given(command: [String]) throws {
        let options = try options(command + ["--db", "postgres://ann@db:5433/files", "--queue", "q"])
        let url = try options.databaseURL(environment: ["PGPASSWORD": "secret"])
        #expect(url.host == "db" && url.port == 5433 && url.user == "ann" && url.database == "files")
        #expect(url.password == "secret")
        #expect(options.queue == "q")
    }

    @Test("without --db: $HAUL_DATABASE_URL, and the queue 'default'", arguments: commands)
    func environment(command: [String]) throws {
        let options = try options(command)
        #expect(try options.databaseURL(environment: ["HAUL_DATABASE_URL": "postgres://bob@h/d"]).user == "bob")
        #expect(options.queue == "default")
    }

    @Test("no database, or a URL that is not one, is reported against --db", arguments: commands)
    func refused(command: [String]) throws {
        let missing = #expect(throws: UsageFailure.self) { try options(command).databaseURL(environment: [:]) }
        #expect(missing?.problems.first?.origin == "--db")
        #expect(missing?.summary == "nothing was done")
        let bad = #expect(throws: UsageFailure.self) {
            try options(command + ["--db", "mysql://db/x"]).databaseURL(environment: [:])
        }
        #expect(bad?.problems.first?.origin == "--db")
        let fromEnvironment = #expect(throws: UsageFailure.self) {
            try options(command).databaseURL(environment: ["HAUL_DATABASE_URL": "mysql://db/x"])
        }
        #expect(fromEnvironment?.problems.first?.origin == "HAUL_DATABASE_URL")
    }
}
