import ArgumentParser
import Foundation
import HaulDaemon
import HaulMetrics
import HaulOperations
import HaulPostgres
import HaulSQLite
import Logging
import ServiceLifecycle
import UnixSignals

/// How `haul daemon` and `haul worker` write their log lines.
enum LogFormat: String, ExpressibleByArgument, CaseIterable {
    /// Lines of text, as today on standard error (and the worker's results on standard output).
    case text
    /// One JSON object per line on standard error: `time`, `level`, `message`, and the line's metadata (a download's
    /// `download.id` or `gid`, `download.url` without credentials, `download.path`).
    case json
}

/// `--log-format`, shared by the services.
struct LogOptions: ParsableArguments {
    @Option(
        name: .customLong("log-format"),
        help: ArgumentHelp(
            "text (default), or json: one JSON object per log line on standard error, with each download's id and "
                + "URL, for log shippers.",
            valueName: "FORMAT"))
    var format: LogFormat = .text

    /// The log a service writes its lines to: `label` names it (`haul.worker`), `quiet` keeps info lines out.
    func log(label: String, quiet: Bool = false) -> ServiceLog {
        ServiceLog(format: format, label: label, level: quiet ? .warning : .info)
    }
}

/// A service's log lines: in text, as the commands always printed them; in JSON, one object per line.
struct ServiceLog: Sendable {
    let format: LogFormat
    let label: String
    let level: Logger.Level

    /// A swift-log logger writing JSON lines, for the libraries' own records (each download's end); logs nothing
    /// in text format, where the command prints those itself.
    var logger: Logger {
        guard format == .json else { return Logger(label: label, factory: { _ in SwiftLogNoOpLogHandler() }) }
        var logger = Logger(label: label, factory: { JSONLogHandler(label: $0) })
        logger.logLevel = level
        return logger
    }

    /// Writes one line: `text` on standard error in text format, or a JSON object with `metadata`.
    func line(_ level: Logger.Level, _ text: String, metadata: [String: String] = [:]) {
        guard level >= self.level else { return }
        switch format {
        case .text: Console.err(text + "\n")
        case .json:
            // The record names its logger and level; the text's own "haul worker: " and "warning: " would repeat them.
            var message = Substring(text)
            for prefix in ["haul daemon: ", "haul worker: ", "warning: "] where message.hasPrefix(prefix) {
                message = message.dropFirst(prefix.count)
            }
            JSONLogHandler.write(label: label, level: level, message: String(message), metadata: metadata)
        }
    }
}

/// swift-log's handler for `--log-format json`: one JSON object per record on standard error.
struct JSONLogHandler: LogHandler {
    let label: String
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .info

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var all: [String: String] = [:]
        for (key, value) in metadata.merging(event.metadata ?? [:], uniquingKeysWith: { $1 }) {
            all[key] = "\(value)"
        }
        Self.write(label: label, level: event.level, message: "\(event.message)", metadata: all)
    }

    /// Writes a record: `time` (UTC, milliseconds), `level`, `logger`, `message`, then the metadata by name.
    static func write(label: String, level: Logger.Level, message: String, metadata: [String: String]) {
        var line = "{\"time\":\(quoted(timestamp())),\"level\":\(quoted(level.rawValue)),\"logger\":\(quoted(label))"
        line += ",\"message\":\(quoted(message))"
        for (key, value) in metadata.sorted(by: { $0.key < $1.key })
        where !["time", "level", "logger", "message"].contains(key) {
            line += ",\(quoted(key)):\(quoted(value))"
        }
        Console.rawErr(line + "}\n")
    }

    private static func timestamp() -> String {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        var parts = tm()
        var seconds = time.tv_sec
        gmtime_r(&seconds, &parts)
        return String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
            parts.tm_hour, parts.tm_min, parts.tm_sec, Int32(time.tv_nsec / 1_000_000))
    }

    /// `text` as a JSON string: quotes, backslashes and every control character escaped, so a name from a server
    /// can neither break the line nor forge another record.
    static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20 || Format.isRawInJSONButNotPrintable(scalar):
                out += String(format: "\\u%04x", scalar.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}

/// `--metrics-listen` and `--metrics-secret-file`: `haul worker`'s `/metrics`, `/healthz` and `/readyz`.
struct MonitoringOptions: ParsableArguments {
    @Option(
        name: .customLong("metrics-listen"),
        help: ArgumentHelp(
            "Serve Prometheus metrics at /metrics, and /healthz and /readyz, on this address and port; an address "
                + "other than loopback needs --metrics-secret-file.",
            valueName: "HOST:PORT"))
    var listen: String?

    @Option(
        name: .customLong("metrics-secret-file"),
        help: ArgumentHelp(
            "File holding a token (its first line) that /metrics requires as 'Authorization: Bearer TOKEN' "
                + "(Prometheus: authorization.credentials_file).",
            valueName: "FILE"))
    var secretFile: String?

    func validate() throws {
        guard let listen else {
            if secretFile != nil { throw ValidationError("--metrics-secret-file needs --metrics-listen") }
            return
        }
        let (host, _) = try DaemonCommand.parseListen(listen, option: "--metrics-listen")
        if !DaemonCommand.isLoopback(host) && secretFile == nil {
            throw ValidationError(
                "--metrics-listen '\(listen)' is not a loopback address: the metrics name the hosts this worker "
                    + "downloads from, so give --metrics-secret-file (Prometheus sends it as a bearer token)")
        }
    }

    /// The token of --metrics-secret-file, read from a file only its owner may read.
    func token() throws -> String? {
        guard let secretFile else { return nil }
        return try DaemonCommand.readSecret(at: secretFile, option: "--metrics-secret-file").value
    }

    /// Starts serving `endpoint` where --metrics-listen says; `nil` without it.
    func start(_ endpoint: MonitoringEndpoint) async throws -> MonitoringServer? {
        guard let listen else { return nil }
        let (host, port) = try DaemonCommand.parseListen(listen, option: "--metrics-listen")
        do {
            return try await MonitoringServer.start(
                endpoint: endpoint, host: host, port: port, requiresAddressHost: secretFile == nil)
        } catch {
            throw UsageFailure(
                [InputProblem(origin: "--metrics-listen", message: "cannot listen on \(listen): \(error)")],
                summary: "nothing was done")
        }
    }
}

/// One part of a command run under swift-service-lifecycle.
struct CommandService: Service {
    let body: @Sendable () async throws -> Void

    func run() async throws {
        try await body()
    }

    /// Runs `operation`, which a graceful shutdown cancels (it must then end promptly, keeping what it must).
    static func cancelled(onShutdown operation: @escaping @Sendable () async -> Void) -> CommandService {
        CommandService { await cancelWhenGracefulShutdown(operation) }
    }

    /// Waits until `stop` is resolved (by the command itself: `aria2.shutdown`) or a graceful shutdown comes.
    static func until(_ stop: ResultBox<Void>) -> CommandService {
        CommandService {
            await withGracefulShutdownHandler {
                await stop.wait()
            } onGracefulShutdown: {
                stop.resolve(())
            }
        }
    }

    /// Waits for the graceful shutdown, then runs `finish` (a listener that must answer until then).
    static func untilShutdown(then finish: @escaping @Sendable () async -> Void) -> CommandService {
        CommandService {
            try? await gracefulShutdown()
            await finish()
        }
    }

    /// Runs `main` and `helpers` as one service group. Its signal handlers are in place before any of them starts:
    /// SIGTERM and SIGINT begin a graceful shutdown, `main` first, then the helpers (a metrics listener answers until
    /// `main` has stopped); when `main` returns by itself the helpers are shut down too. A shutdown that takes longer
    /// than `bound` is escalated to cancellation, and one that still does not end within `cancellationBound` ends the
    /// process.
    static func run(
        main: CommandService, helpers: [CommandService] = [], log: ServiceLog, bound: Duration,
        cancellationBound: Duration = .seconds(10)
    ) async throws {
        var logger = log.logger
        // The group's own records (signal caught, shutting down) only when something goes wrong.
        logger.logLevel = max(log.level, .warning)
        var configuration = ServiceGroupConfiguration(
            services: helpers.map { .init(service: $0, successTerminationBehavior: .ignore) }
                + [.init(service: main, successTerminationBehavior: .gracefullyShutdownGroup)],
            gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        configuration.maximumGracefulShutdownDuration = bound
        configuration.maximumCancellationDuration = cancellationBound
        try await ServiceGroup(configuration: configuration).run()
    }
}

extension MonitoringEndpoint.ReadinessCheck {
    /// Ready while the shared queue's database answers.
    static func database(_ queue: SharedQueue) -> Self {
        Self("database") {
            do throws(SharedQueueError) {
                try await queue.checkReachable()
                return nil
            } catch {
                return error.message
            }
        }
    }

    /// Ready while the daemon's store can be read.
    static func store(_ store: DaemonStore) -> Self {
        readable("store", "the daemon's store", store.checkReadable)
    }

    /// Ready while the journal can be read.
    static func journal(_ journal: SQLiteJournal) -> Self {
        readable("journal", "the journal", journal.checkReadable)
    }

    /// Ready while `check` (a read of the file `what` names) does not throw.
    private static func readable(
        _ name: String, _ what: String, _ check: @escaping @Sendable () throws -> Void
    ) -> Self {
        Self(name) {
            do {
                try check()
                return nil
            } catch {
                return "\(what) cannot be read: \(error.localizedDescription)"
            }
        }
    }
}
