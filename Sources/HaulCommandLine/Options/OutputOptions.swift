import ArgumentParser
import Haul
import Logging

/// `--json`, `--quiet` and `--verbose`: what a command that runs downloads prints, for `haul get` and `haul worker`.
struct OutputOptions: ParsableArguments {
    @Flag(help: "NDJSON on stdout instead of text and progress bars: one object per event, and a last summary.")
    var json = false

    @Flag(name: [.customShort("q"), .long], help: "Errors only.")
    var quiet = false

    @Flag(
        name: [.customShort("v"), .long],
        help: "Log requests, responses, retry and redirect decisions to stderr (plain lines instead of bars).")
    var verbose = false

    func validate() throws {
        if json && quiet { throw ValidationError("--json and --quiet cannot be combined") }
    }

    /// Gives `configuration` a logger to standard error, at debug level, with `--verbose`.
    func apply(to configuration: inout Downloader.Configuration) {
        guard verbose else { return }
        var logger = Logger(label: "haul", factory: { StreamLogHandler.standardError(label: $0) })
        logger.logLevel = .debug
        configuration.logger = logger
    }
}
