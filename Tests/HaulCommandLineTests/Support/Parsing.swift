import ArgumentParser
import Foundation
import Haul
import Testing

@testable import HaulCommandLine

/// `arguments` parsed as `haul` parses them (``HaulCommand/parseAsRoot(_:)``), which must give a `C`.
func parse<C: ParsableCommand>(
    _ arguments: [String], as type: C.Type = C.self, sourceLocation: SourceLocation = #_sourceLocation
) throws -> C {
    let command = try HaulCommand.parseAsRoot(arguments)
    return try #require(command as? C, "parsed as \(Swift.type(of: command))", sourceLocation: sourceLocation)
}

/// Checks that `arguments` are a usage error (exit status 2 from `haul`) whose message contains each of `words`
/// (the option and the value), and returns the message.
@discardableResult
func expectUsageError(
    _ arguments: [String], naming words: [String], sourceLocation: SourceLocation = #_sourceLocation
) -> String {
    do {
        let command = try HaulCommand.parseAsRoot(arguments)
        Issue.record(
            "\(arguments) parsed as \(type(of: command)); a usage error was expected", sourceLocation: sourceLocation)
        return ""
    } catch {
        // `HaulCommand.main()` exits 2 for ArgumentParser's validation failures.
        #expect(HaulCommand.exitCode(for: error) == .validationFailure, sourceLocation: sourceLocation)
        let message = HaulCommand.message(for: error)
        for word in words {
            #expect(
                message.contains(word), "\(arguments): '\(message)' does not name \(word)",
                sourceLocation: sourceLocation)
        }
        return message
    }
}

/// What `get` and `worker` share: the option groups, and how they set the engine's configuration.
protocol DownloadingCommand: ParsableCommand {
    var destination: DirectoryOptions { get }
    var concurrency: ConcurrencyOptions { get }
    var output: OutputOptions { get }
    var journal: JournalOptions { get }
    var connection: ConnectionOptions { get }
    var network: NetworkOptions { get }
    func apply(to configuration: inout Downloader.Configuration)
}

extension GetCommand: DownloadingCommand {}
extension WorkerCommand: DownloadingCommand {}

/// The commands that run downloads, as their first argument.
let downloadingCommands = ["get", "worker"]

/// `haul COMMAND ARGUMENTS` parsed, for `get` or `worker`.
func parseDownloading(_ command: String, _ arguments: [String]) throws -> any DownloadingCommand {
    let parsed = try HaulCommand.parseAsRoot([command] + arguments)
    return try #require(parsed as? any DownloadingCommand)
}

/// The engine's configuration `haul COMMAND ARGUMENTS` asks for, without the files the options name.
func configuration(_ command: String, _ arguments: [String]) throws -> Downloader.Configuration {
    var configuration = Downloader.Configuration.commandLine
    try parseDownloading(command, arguments).apply(to: &configuration)
    return configuration
}

/// A fresh directory for files the options read, removed by `body`'s end.
func withScratchDirectory<T>(_ body: (URL) throws -> T) throws -> T {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
        "haul-parse-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    return try body(directory)
}
