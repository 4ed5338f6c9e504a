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
        var logger = Logger(
            label: "haul", factory: { PrintableLogHandler(wrapped: StreamLogHandler.standardError(label: $0)) })
        logger.logLevel = .debug
        configuration.logger = logger
    }
}

/// swift-log's stream handler for `-v`, with every message and metadata value made printable and kept on one line:
/// they carry what servers sent (a reason phrase in a retry's reason), which raw would drive the terminal (OSC 52,
/// `\r`) or forge log lines.
struct PrintableLogHandler: LogHandler {
    var wrapped: StreamLogHandler

    var metadata: Logger.Metadata {
        get { wrapped.metadata }
        set { wrapped.metadata = newValue }
    }

    var logLevel: Logger.Level {
        get { wrapped.logLevel }
        set { wrapped.logLevel = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { wrapped[metadataKey: key] }
        set { wrapped[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        var event = event
        event.message = "\(Format.oneLine("\(event.message)"))"
        event.metadata = event.metadata?.mapValues { .string(Format.oneLine("\($0)")) }
        wrapped.log(event: event)
    }
}
