public import ArgumentParser
import Foundation
import Haul
import HaulNIOSupport
import HaulOperations
import HaulSQLite

/// `haul get`: download URLs through a queue with controlled concurrency.
struct GetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "get",
        abstract: "Download URLs into a directory, a few at a time, with retries, resume and live progress.",
        discussion: """
            Input file format (-i): one URL per line; blank lines and lines starting with '#' are ignored. \
            A URL may be followed by indented option lines:
              out=NAME              file name for this URL
              dir=SUBDIR            directory under --dir for this URL
              checksum=sha-256=HEX  expected digest (sha-256, sha-384, sha-512)
              header=K: V           extra request header (repeatable)
              limit-rate=RATE       bytes per second for this URL (K, M, G suffixes)
              max-time=S            seconds this download may take in all
              speed-limit=BYTES     minimum bytes per second (with speed-time=S, default 30)
              speed-time=S          how long it may stay under speed-limit
              split=N               connections for this URL's file (as -s)
            Mirrors: more URLs of the same file on the URL's line, separated by tabs (aria2's convention). A \
            source that fails for good (a 4xx, or a 5xx, cut or stall after its own --retries) is dropped and the \
            next one asked, the bytes received so far resumed from it; a split file's segments are spread over \
            them, and one much slower than the others is dropped too.
            Lists of any length: the input is checked whole before the first request, then read again as \
            downloads finish, in memory that does not grow with it (standard input and pipes are copied to an \
            unnamed temporary file in $TMPDIR for that).

            Exit status: 0 all succeeded; 1 at least one download failed (the others still completed); \
            2 usage error or invalid input (nothing is downloaded; every bad line is reported); \
            130 interrupted by SIGINT, SIGTERM or SIGHUP (no partial file at any destination; run the same \
            command again to finish; SIGHUP is ignored when started ignoring it, as under nohup); 141 standard output was closed (e.g. piped into 'head'): the run stops \
            as if interrupted.

            Haul remembers what it completed and what it left partial in a journal (DIR/.haul/journal.sqlite \
            unless --journal or --no-journal), so rerunning a command skips files it already wrote (if \
            unchanged; with -N, if the server says so too) and resumes partial ones with Range, including those \
            of downloads that failed (unless --no-keep-partial). A partial or a finished file belongs to its \
            destination: a rerun whose URLs carry new tokens (only the query changed) resumes and skips them too.
            """
    )

    @OptionGroup
    var input: InputOptions

    @OptionGroup
    var destination: DirectoryOptions

    @Option(
        name: [.customShort("o"), .customLong("output")],
        help: ArgumentHelp("File name; only with exactly one URL.", valueName: "NAME"))
    var fileName: String?

    @OptionGroup
    var concurrency: ConcurrencyOptions

    // Unconditional, like -j: `--per-host -3` and `--retries -1` are reported as bad numbers, not missing values.
    @Option(
        name: .customLong("per-host"), parsing: .unconditional,
        help: ArgumentHelp("Connections at once per host (default: no limit).", valueName: "N"))
    var perHost: Int?

    @Option(parsing: .unconditional, help: ArgumentHelp("Retries of transient failures (0 = none).", valueName: "N"))
    var retries: Int = 3

    // Unconditional, like -j: `-s -1` is reported as a bad number, not a missing value.
    @Option(
        name: [.customShort("s"), .customLong("split")], parsing: .unconditional,
        help: ArgumentHelp(
            "Connections per file: a large file whose server takes Range is fetched in up to N segments at once; "
                + "each counts against -j and --per-host.", valueName: "N"))
    var split: Int = 1

    @Option(
        name: .customLong("min-split-size"),
        help: ArgumentHelp(
            "Smallest segment worth a connection of its own (K, M, G suffixes; default 20M).", valueName: "SIZE"))
    var minSplitSize: String?

    @Option(help: ArgumentHelp("Expected digest for a single URL.", valueName: "ALGO=HEX"))
    var checksum: String?

    @OptionGroup
    var sizeLimit: MaxSizeOptions

    @Option(
        name: .customLong("header"),
        help: ArgumentHelp(
            "Extra request header, repeatable (Authorization and Cookie never follow a redirect to another origin).",
            valueName: "K: V"))
    var headers: [String] = []

    @Flag(name: .customLong("content-disposition"), help: "Use the server's suggested file name (made safe).")
    var contentDisposition = false

    @Option(
        name: .customLong("on-conflict"),
        help: ArgumentHelp(
            "When the destination exists and Haul did not write it: fail (that download fails, the file is untouched), skip, overwrite or rename.",
            valueName: "fail|skip|overwrite|rename"))
    var onConflict: ConflictPolicy = .fail

    @Flag(
        name: .customLong("sha256"),
        help: "Compute each file's SHA-256 while writing it, and print it on its line (and in --json's finish).")
    var sha256 = false

    @OptionGroup
    var output: OutputOptions

    @OptionGroup
    var journal: JournalOptions

    @OptionGroup
    var connection: ConnectionOptions

    @OptionGroup(title: "Proxies, credentials and cookies")
    var network: NetworkOptions

    @OptionGroup(title: "Freshness, politeness and time limits")
    var politeness: PolitenessOptions

    func validate() throws {
        try connection.validate(with: network)
        if let perHost, perHost < 1 { throw ValidationError("--per-host must be at least 1, not \(perHost)") }
        if let perHost, perHost > ConcurrencyOptions.limit {
            throw ValidationError("--per-host must be at most \(ConcurrencyOptions.limit), not \(perHost)")
        }
        if retries < 0 { throw ValidationError("--retries must be 0 or more, not \(retries)") }
        if !(1...64).contains(split) { throw ValidationError("-s/--split must be from 1 to 64, not \(split)") }
        if let minSplitSize, (parseByteCount(minSplitSize) ?? 0) < 1 {
            throw ValidationError("--min-split-size '\(minSplitSize)' is not a size above 0 (e.g. 1M, 20M)")
        }
        try politeness.validate(journalEnabled: journal.isEnabled)
    }

    mutating func run() async throws {
        // First: a signal while the input is read or the journal opened must stop the run cleanly too.
        Interruption.install()
        let directory = destination.url
        let source = try input.open(summary: UsageFailure.nothingDownloaded)
        let planner = makePlanner(directory: directory)
        let directories = DestinationDirectories(base: directory)
        // The whole input is checked before anything is downloaded, then read again to run: a list of any length
        // takes the same memory.
        let checked = try InputCheck.run(source, planner: planner, directories: directories)
        var configuration = Downloader.Configuration.commandLine
        // `dir=` directories were checked with the input; a link planted under the destination since is refused.
        configuration.containingDirectory = directory
        let netrc = try network.apply(to: &configuration, transport: connection.transport)
        let proxy = configuration.proxy
        // As curl does, the CA and certificate files are read only when something is fetched over https: a stale
        // SSL_CERT_FILE does not stop a run of http URLs.
        configuration.tls = try connection.tlsSettings(
            checkingFiles: checked.usesHTTPS || proxy.http?.kind == .https || proxy.https?.kind == .https)
        try directories.createBase()
        // Opened once the input is known to be good: a bad input leaves nothing behind.
        let journal = try self.journal.apply(
            to: &configuration, directory: directory, summary: UsageFailure.nothingDownloaded)
        apply(to: &configuration)
        let queue = queueConfiguration
        let engine = connection.makeEngine(configuration: configuration, maxConcurrent: queue.maxConcurrentDownloads)
        let names = NameBook()
        let requests = PlannedRequests(
            source: source, planner: planner, credentials: network.credentialRule(netrc: netrc),
            directories: directories, names: names)
        let (cookies, jar) = (configuration.cookies, network.cookieJar)
        let report = await GetRun.run(
            requests, count: checked.count, names: names, engine: engine, queue: queue, output: output
        ) {
            guard let cookies, let jar else { return true }
            do {
                try cookies.write(to: URL(fileURLWithPath: jar))
                return true
            } catch {
                Console.err("haul: --cookie-jar: \(error)\n")
                return false
            }
        }
        // The process exits without releasing the journal, so its last changes are folded in here.
        journal?.finish()
        Foundation.exit(report.exitCode)
    }

    /// Sets what the options of every group, and `get`'s own, ask of the engine: timeouts and HTTP version,
    /// politeness, logging, retries and digests. Files the options name (TLS, journal, netrc, cookies) are read by
    /// ``run()``.
    func apply(to configuration: inout Downloader.Configuration) {
        connection.apply(to: &configuration)
        politeness.apply(to: &configuration)
        output.apply(to: &configuration)
        configuration.retryPolicy.maxRetries = retries
        configuration.computesSHA256 = sha256
    }

    /// The queue the downloads run through: `-j` connections at once, `--per-host` to one host.
    var queueConfiguration: DownloadQueue.Configuration {
        // Rerunning the command is how `haul get` resumes, so the queue need not record the requests.
        var configuration = DownloadQueue.Configuration(perHostLimit: perHost, recordsRequests: false)
        concurrency.apply(to: &configuration, split: split)
        return configuration
    }

    /// How every entry is planned.
    func planSettings(directory: URL) -> PlanSettings {
        var settings = PlanSettings(directory: directory)
        settings.fileName = fileName
        settings.checksum = checksum
        settings.headers = headers
        sizeLimit.apply(to: &settings)
        settings.split = split
        settings.minimumSegmentSize =
            minSplitSize.flatMap(parseByteCount) ?? DownloadRequest.defaultMinimumSegmentSize
        settings.conflictPolicy = onConflict
        settings.useContentDisposition = contentDisposition
        politeness.apply(to: &settings)
        return settings
    }

    private func makePlanner(directory: URL) -> Planner { Planner(settings: planSettings(directory: directory)) }

    /// The POSIX reason of a Foundation file error ("No such file or directory"), else its description.
    static func reason(_ error: any Error) -> String {
        let nsError = error as NSError
        if nsError.domain == NSPOSIXErrorDomain, let message = strerrorMessage(Int32(nsError.code)) { return message }
        if let underlying = nsError.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain,
            let message = strerrorMessage(Int32(underlying.code))
        {
            return message
        }
        if nsError.domain == NSCocoaErrorDomain {
            switch CocoaError.Code(rawValue: nsError.code) {
            case .fileReadNoSuchFile, .fileNoSuchFile: return "no such file"
            case .fileReadNoPermission, .fileWriteNoPermission: return "permission denied"
            default: break
            }
        }
        return nsError.localizedDescription
    }

    private static func strerrorMessage(_ code: Int32) -> String? {
        guard let text = strerror(code) else { return nil }
        return String(cString: text)
    }
}

/// Invalid input: every problem is printed, then `summary` (what was not done), and the exit status is 2.
struct UsageFailure: Error {
    var problems: [InputProblem]
    var summary: String
    init(_ problems: [InputProblem], summary: String = nothingDownloaded) {
        self.problems = problems
        self.summary = summary
    }

    /// `haul get`'s summary of a usage failure.
    static let nothingDownloaded = "nothing was downloaded (see 'haul get --help')"
}

extension ConflictPolicy: ExpressibleByArgument {}
