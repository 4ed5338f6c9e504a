import ArgumentParser
import Foundation
import Haul
import HaulPostgres

/// `haul enqueue`: adds downloads to a shared queue in PostgreSQL, for `haul worker`s to fetch.
struct EnqueueCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enqueue",
        abstract: "Add URLs to a shared download queue in PostgreSQL, for 'haul worker' processes to fetch.",
        discussion: """
            The input is 'haul get's: URLs as arguments or one per line in -i FILE ('-' = stdin), with the same \
            indented option lines (out=, dir=, checksum=, header=, limit-rate=, max-time=, speed-limit=, \
            speed-time=, split=, and mirrors after a tab). Each download's file goes to its path (dir=/out=, or the \
            URL's name) under the directory of whichever worker fetches it.

            The whole input is checked first: every bad line is reported, and nothing is enqueued (exit 2). The \
            downloads are added in one transaction: all or none. A URL whose path is queued already is left as it \
            is (enqueueing a list twice adds nothing the second time). A URL that differs from the queued one only \
            in its query (a fresh token) renews a download that waits, failed or was cancelled: it takes the new \
            URL and waits again, and the worker resumes what it has of the file. A path queued for another \
            resource stops the enqueue, naming both.

            Credentials are not stored in the queue: a URL with a user and password, or an Authorization or \
            Cookie header, is refused. Give the workers their credentials (--netrc-file, --user, --cookie).

            Exit status: 0 enqueued; 1 the database could not be reached or refused (nothing enqueued); 2 usage \
            error or invalid input (nothing enqueued).
            """)

    @OptionGroup
    var input: InputOptions

    @OptionGroup
    var database: DatabaseOptions

    @Option(
        name: .customLong("per-host"),
        help: ArgumentHelp(
            "Connections to one host at once, all workers together, from now on ('none': no limit; default: the "
                + "queue's setting, no limit for a new queue).", valueName: "N"))
    var perHost: String?

    @Option(
        name: .customLong("per-host-rate"),
        help: ArgumentHelp(
            "At most N download starts per unit of time from one host, all workers together (N/s, N/m, N/h; "
                + "'none': no limit).", valueName: "N/UNIT"))
    var perHostRate: String?

    @Option(help: ArgumentHelp("Retries of transient failures, on any worker (0 = none).", valueName: "N"))
    var retries: Int = 3

    @Option(
        name: [.customShort("s"), .customLong("split")], parsing: .unconditional,
        help: ArgumentHelp("Connections per file, for the lines without split= (as 'haul get -s').", valueName: "N"))
    var split: Int = 1

    @OptionGroup
    var sizeLimit: MaxSizeOptions

    @Option(
        name: .customLong("header"),
        help: ArgumentHelp("Extra request header, repeatable (not Authorization or Cookie).", valueName: "K: V"))
    var headers: [String] = []

    @Option(
        name: .customLong("on-conflict"),
        help: ArgumentHelp(
            "When a worker finds a file at the path that Haul did not write: fail, skip, overwrite or rename.",
            valueName: "fail|skip|overwrite|rename"))
    var onConflict: ConflictPolicy = .fail

    /// The most retries a download may be given: far beyond any use, and its attempts still count in the database.
    static let maxRetries = 1_000

    func validate() throws {
        if !(0...Self.maxRetries).contains(retries) {
            throw ValidationError("--retries must be from 0 to \(Self.maxRetries), not \(retries)")
        }
        if !(1...64).contains(split) { throw ValidationError("-s/--split must be from 1 to 64, not \(split)") }
        _ = try HostOptions(perHost: perHost, perHostRate: perHostRate)
    }

    func run() async throws {
        Interruption.install()
        try database.checkURL()
        let source = try input.open(summary: Self.nothingEnqueued)
        let planner = Planner(settings: planSettings)
        let attempts = retries + 1
        do {
            _ = try InputCheck.run(source, planner: planner, directories: nil) { planned in
                Self.sharedDownload(planned, attempts: attempts).failure
            }
        } catch {
            throw UsageFailure(error.problems, summary: Self.nothingEnqueued)
        }
        let hosts = try HostOptions(perHost: perHost, perHostRate: perHostRate)
        let downloads = SharedDownloads(source: source, planner: planner, attempts: attempts)
        let report = try await database.withQueue { queue in
            let settings = hosts.isEmpty ? nil : hosts.applied(to: try await queue.hostSettings())
            do {
                return try await queue.enqueue(downloads, hostSettings: settings)
            } catch let error as SharedQueueError {
                // A problem with the input found while it was read again is the input's, not the database's.
                if let failure = error.underlying as? UsageFailure { throw failure }
                throw error
            }
        }
        var notes: [String] = []
        if report.renewed > 0 { notes.append("\(report.renewed) renewed with a new URL") }
        if report.alreadyQueued > 0 { notes.append("\(report.alreadyQueued) queued already") }
        let already = notes.isEmpty ? "" : " (" + notes.joined(separator: ", ") + ")"
        Console.out(
            "haul: enqueued \(report.added) download\(report.added == 1 ? "" : "s")\(already) in queue "
                + "'\(database.queue)'\n")
    }

    /// What every entry's plan takes from the options; the directory is the root, see ``root``.
    var planSettings: PlanSettings {
        var settings = PlanSettings(directory: Self.root)
        settings.headers = headers
        sizeLimit.apply(to: &settings)
        settings.split = split
        settings.conflictPolicy = onConflict
        return settings
    }

    static let nothingEnqueued = "nothing was enqueued (see 'haul enqueue --help')"

    /// Where an enqueued download is planned: its path is then its planned path without the leading `/`.
    static let root = URL(fileURLWithPath: "/", isDirectory: true)

    /// The download the queue stores for `planned`, or why it cannot store it.
    static func sharedDownload(_ planned: PlannedDownload, attempts: Int) -> (
        download: SharedDownload?, failure: String?
    ) {
        guard let path = planned.plannedPath else {
            return (nil, "the file's name must be known before any response (out=NAME, or a URL that names it)")
        }
        do {
            return (
                try SharedDownload(request: planned.request, path: String(path.dropFirst()), maxAttempts: attempts), nil
            )
        } catch {
            return (nil, error.message)
        }
    }
}

/// The entries of the input as the queue stores them, read again once checked; an entry that no longer plans (the
/// input changed) stops the enqueue, and the transaction adds nothing.
struct SharedDownloads: AsyncSequence, Sendable {
    let source: InputSource
    let planner: Planner
    let attempts: Int

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(downloads: self, reader: source.makeReader()) }

    struct AsyncIterator: AsyncIteratorProtocol {
        let downloads: SharedDownloads
        var reader: InputSource.Reader

        mutating func next() async throws -> SharedDownload? {
            while let item = try reader.next() {
                switch item {
                case .problem(let problem):
                    throw UsageFailure(
                        [problem], summary: "the input changed while it was enqueued: nothing was enqueued")
                case .entry(let entry):
                    switch downloads.planner.plan(entry) {
                    case .failure(let failure):
                        throw UsageFailure(
                            failure.problems, summary: "the input changed while it was enqueued: nothing was enqueued")
                    case .success(let planned):
                        let made = EnqueueCommand.sharedDownload(planned, attempts: downloads.attempts)
                        guard let download = made.download else {
                            throw UsageFailure(
                                [InputProblem(origin: planned.origin, message: made.failure ?? "")],
                                summary: "the input changed while it was enqueued: nothing was enqueued")
                        }
                        return download
                    }
                }
            }
            return nil
        }
    }
}

/// `--per-host` and `--per-host-rate`: each given one replaces the queue's setting, the other stays as it is.
struct HostOptions {
    /// `nil`: not given; `.some(nil)`: `none`.
    let perHost: Int??
    let interval: Duration?

    init(perHost: String?, perHostRate: String?) throws(ValidationError) {
        switch perHost {
        case nil: self.perHost = nil
        case "none": self.perHost = .some(nil)
        case let text?:
            guard let count = Int(text), count >= 1 else {
                throw ValidationError("--per-host must be a number of connections from 1, or 'none', not '\(text)'")
            }
            self.perHost = .some(count)
        }
        switch perHostRate {
        case nil: interval = nil
        case "none": interval = .zero
        case let text?:
            guard let rate = RequestRate(parsing: text) else {
                throw ValidationError("--per-host-rate '\(text)' is not a rate like 10/s, 30/m or 100/h, or 'none'")
            }
            interval = rate.period / rate.count
        }
    }

    /// Whether either option was given.
    var isEmpty: Bool { perHost == nil && interval == nil }

    /// The queue's settings `current` with the options given.
    func applied(to current: HostSettings) -> HostSettings {
        var settings = current
        if let perHost { settings.maxConnectionsPerHost = perHost }
        if let interval { settings.minimumInterval = interval }
        return settings
    }
}
