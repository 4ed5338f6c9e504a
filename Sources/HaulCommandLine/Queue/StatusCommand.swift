import ArgumentParser
import Foundation
import HaulPostgres

/// `haul status`: the state of a shared queue.
struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show a shared queue's downloads by state, per host and per worker, its pace and its failures.",
        discussion: """
            --json prints one object: the counts 'waiting', 'running', 'paused', 'done', 'failed' and 'cancelled', \
            'bytes_done', 'bytes_per_second' and 'files_per_second' (over the last minute), 'eta_seconds', and the \
            lists 'hosts', 'workers' and 'failures' (with each failure's reason). With --watch, one such object per \
            line, every --interval seconds.

            Exit status: 0; 1 when the database cannot be reached; 2 usage error.
            """)

    @OptionGroup
    var database: DatabaseOptions

    @Flag(help: "Redraw every --interval seconds until interrupted (with --json: one object per line).")
    var watch = false

    @Option(help: ArgumentHelp("Seconds between two readings with --watch (default 2).", valueName: "S"))
    var interval: Double = 2

    @Flag(help: "One JSON object (see below).")
    var json = false

    @Option(help: ArgumentHelp("Failed downloads listed with their reasons (default 20).", valueName: "N"))
    var failures: Int = 20

    func validate() throws {
        if !(interval >= 0.1 && interval <= 3600) {
            throw ValidationError("--interval must be a number of seconds from 0.1 to 3600, not \(interval)")
        }
        if failures < 0 { throw ValidationError("--failures must be 0 or more, not \(failures)") }
    }

    func run() async throws {
        let json = json
        let watch = watch
        let failures = failures
        let interval = interval
        try await database.withQueue(maximumConnections: 1) { queue in
            while true {
                let status = try await queue.status(failures: failures)
                if json {
                    Console.jsonLine(Self.json(status))
                } else {
                    if watch && Console.isInteractiveTerminal { Console.raw("\u{1B}[H\u{1B}[2J") }
                    Console.out(Self.text(status))
                }
                guard watch else { return }
                try await Task.sleep(for: .milliseconds(Int64(interval * 1000)))
            }
        }
    }

    static func json(_ status: QueueStatus) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.keyEncodingStrategy = .convertToSnakeCase
        return (try? encoder.encode(status)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    static func text(_ status: QueueStatus) -> String {
        var lines: [String] = []
        let total = status.waiting + status.running + status.paused + status.done + status.failed + status.cancelled
        // Paused downloads are said only where there are some (pausing is the fleet page's).
        let paused = status.paused > 0 ? "\(status.paused) paused, " : ""
        lines.append(
            "queue '\(status.queue)': \(total) downloads: \(status.waiting) waiting, \(status.running) running, "
                + "\(paused)\(status.done) done, \(status.failed) failed, \(status.cancelled) cancelled")
        var pace = "\(Format.bytes(status.bytesDone)) published"
        if status.filesPerSecond > 0 {
            pace += String(
                format: ", %.1f files/s, %@ (last minute)", status.filesPerSecond, Format.speed(status.bytesPerSecond))
        }
        if let eta = status.etaSeconds { pace += ", about \(Format.clock(.seconds(eta))) left" }
        lines.append(pace)
        if !status.hosts.isEmpty {
            lines.append("hosts:")
            for host in status.hosts {
                let limit = host.limit.map { "/\($0)" } ?? ""
                lines.append(
                    "  \(host.host): \(host.waiting) waiting, \(host.running)\(limit) connections, \(host.done) done, "
                        + "\(host.failed) failed")
            }
        }
        if !status.workers.isEmpty {
            lines.append("workers:")
            for worker in status.workers {
                let seen = String(format: "%.0f", worker.secondsSinceHeartbeat)
                lines.append(
                    "  \(worker.id) \(Format.oneLine(worker.name)) (\(worker.state), heartbeat \(seen) s ago): "
                        + "\(worker.running) running, \(worker.done) done, \(Format.bytes(worker.bytesDone))")
            }
        }
        if !status.failures.isEmpty {
            lines.append("failures:")
            for failure in status.failures {
                lines.append(
                    "  \(Format.oneLine(failure.path)) (\(Format.oneLine(failure.url)), \(failure.attempts) attempts): "
                        + Format.oneLine(failure.reason))
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
