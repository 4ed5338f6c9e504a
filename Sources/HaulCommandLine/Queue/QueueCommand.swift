import ArgumentParser
import Foundation
import Haul
import HaulPostgres

/// `haul queue`: changes to a shared queue.
struct QueueCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "queue",
        abstract: "Change a shared queue: retry its failures, cancel downloads, set per-host limits, purge old rows.",
        subcommands: [RetryFailed.self, Cancel.self, Set.self, Purge.self])

    struct RetryFailed: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "retry-failed", abstract: "Put every failed download back to waiting, its attempts anew.")

        @OptionGroup
        var database: DatabaseOptions

        func run() async throws {
            let count = try await database.withQueue(maximumConnections: 1) { try await $0.retryFailed() }
            Console.out("haul: \(count) failed download\(count == 1 ? "" : "s") back to waiting\n")
        }
    }

    struct Cancel: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "cancel",
            abstract: "Cancel downloads: waiting ones at once, running ones at their worker's next heartbeat.")

        @OptionGroup
        var database: DatabaseOptions

        @Option(help: ArgumentHelp("Cancel the downloads of this URL.", valueName: "URL"))
        var url: String?

        @Option(
            help: ArgumentHelp(
                "Cancel the downloads from this host (a name, or an origin such as https://example.org:443).",
                valueName: "HOST"))
        var host: String?

        @Flag(help: "Cancel every unfinished download.")
        var all = false

        func validate() throws {
            guard [url != nil, host != nil, all].filter({ $0 }).count == 1 else {
                throw ValidationError("give exactly one of --url, --host and --all")
            }
        }

        /// The downloads the options select.
        var selection: CancelSelection { url.map { .url($0) } ?? host.map { .host($0) } ?? .all }

        func run() async throws {
            let count = try await database.withQueue(maximumConnections: 1) { try await $0.cancel(selection) }
            Console.out("haul: \(count) download\(count == 1 ? "" : "s") cancelled\n")
        }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Set the queue's per-host limits, for all workers together (the options not given stay).")

        @OptionGroup
        var database: DatabaseOptions

        @Option(
            name: .customLong("per-host"),
            help: ArgumentHelp("Connections to one host at once ('none': no limit).", valueName: "N"))
        var perHost: String?

        @Option(
            name: .customLong("per-host-rate"),
            help: ArgumentHelp(
                "Download starts per unit of time from one host (N/s, N/m, N/h, 'none').", valueName: "N/UNIT"))
        var perHostRate: String?

        func validate() throws {
            guard perHost != nil || perHostRate != nil else {
                throw ValidationError("give --per-host, --per-host-rate or both")
            }
            _ = try HostOptions(perHost: perHost, perHostRate: perHostRate)
        }

        func run() async throws {
            let options = try HostOptions(perHost: perHost, perHostRate: perHostRate)
            let settings = try await database.withQueue(maximumConnections: 1) { queue in
                let settings = options.applied(to: try await queue.hostSettings())
                try await queue.setHostSettings(settings)
                return settings
            }
            let limit = settings.maxConnectionsPerHost.map { "\($0) connections" } ?? "no connection limit"
            let interval =
                settings.minimumInterval == .zero
                ? "no interval" : "\(settings.minimumInterval.seconds) s between starts"
            Console.out("haul: queue '\(database.queue)': per host \(limit), \(interval)\n")
        }
    }

    struct Purge: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "purge",
            abstract: "Delete the rows of downloads that ended (done, failed, cancelled) before a time.")

        @OptionGroup
        var database: DatabaseOptions

        @Option(
            name: .customLong("older-than"),
            help: ArgumentHelp("How long ago they ended: N followed by s, m, h or d (e.g. 7d, 12h).", valueName: "AGE"))
        var olderThan: String

        func validate() throws {
            if Self.age(olderThan) == nil {
                throw ValidationError(
                    "--older-than '\(olderThan)' is not an age like 30m, 12h or 7d (at most 1000 years)")
            }
        }

        func run() async throws {
            guard let age = Self.age(olderThan) else { throw ExitCode(2) }
            let count = try await database.withQueue(maximumConnections: 1) { try await $0.purge(olderThan: age) }
            Console.out("haul: \(count) finished download\(count == 1 ? "" : "s") purged\n")
        }

        /// `N` with a unit: `s`, `m`, `h` or `d`; `nil` for anything else, an age over a thousand years included.
        static func age(_ text: String) -> Duration? {
            guard let unit = text.last, let count = Int(text.dropLast()), count >= 0 else { return nil }
            let seconds: [Character: Int] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
            guard let scale = seconds[unit] else { return nil }
            let (age, overflow) = count.multipliedReportingOverflow(by: scale)
            guard !overflow, age <= 1_000 * 366 * 86_400 else { return nil }
            return .seconds(age)
        }
    }
}
