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
            command again to finish); 141 standard output was closed (e.g. piped into 'head'): the run stops \
            as if interrupted.

            Haul remembers what it completed and what it left partial in a journal (DIR/.haul/journal.sqlite \
            unless --journal or --no-journal), so rerunning a command skips files it already wrote (if \
            unchanged; with -N, if the server says so too) and resumes partial ones with Range, including those \
            of downloads that failed (unless --no-keep-partial). A partial or a finished file belongs to its \
            destination: a rerun whose URLs carry new tokens (only the query changed) resumes and skips them too.
            """
    )

    @Argument(help: "URLs to download (http or https).")
    var urls: [String] = []

    @Option(
        name: [.customShort("i"), .customLong("input-file")],
        help: ArgumentHelp("Read URLs from FILE ('-' = stdin).", valueName: "FILE"))
    var inputFile: String?

    @Option(
        name: [.customShort("d"), .customLong("dir")],
        help: ArgumentHelp("Destination directory (created if missing).", valueName: "DIR"))
    var directory: String = "."

    @Option(
        name: [.customShort("o"), .customLong("output")],
        help: ArgumentHelp("File name; only with exactly one URL.", valueName: "NAME"))
    var output: String?

    // Unconditional, so that `-j -1` reaches validate() and is reported as a bad number, not a missing value.
    @Option(
        name: [.customShort("j"), .customLong("max-concurrent")], parsing: .unconditional,
        help: ArgumentHelp(
            "Connections at once: downloads, and the extra connections of split files (1 = one at a time, in input "
                + "order; default 4, or N of -s when larger).", valueName: "N"))
    var maxConcurrent: Int?

    @Option(
        name: .customLong("per-host"),
        help: ArgumentHelp("Connections at once per host (default: no limit).", valueName: "N"))
    var perHost: Int?

    @Option(help: ArgumentHelp("Retries of transient failures (0 = none).", valueName: "N"))
    var retries: Int = 3

    // Unconditional, like -j.
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

    @Option(
        name: .customLong("max-size"),
        help: ArgumentHelp("Refuse larger bodies (K, M, G suffixes: powers of 1024).", valueName: "BYTES"))
    var maxSize: String?

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

    @Flag(help: "NDJSON on stdout: start, progress, retry, finish, fail, summary; no progress bars.")
    var json = false

    @Flag(
        name: .customLong("sha256"),
        help: "Compute each file's SHA-256 while writing it, and print it on its line (and in --json's finish).")
    var sha256 = false

    @Flag(name: [.customShort("q"), .long], help: "Errors only.")
    var quiet = false

    @Flag(
        name: [.customShort("v"), .long],
        help: "Log requests, responses, retry and redirect decisions to stderr (plain lines instead of bars).")
    var verbose = false

    @Option(
        help: ArgumentHelp(
            "Where completed and partial downloads are remembered (default: DIR/.haul/journal.sqlite).",
            valueName: "PATH"))
    var journal: String?

    @Flag(name: .customLong("no-journal"), help: "Remember nothing: a rerun starts over.")
    var noJournal = false

    @OptionGroup
    var connection: TransportOptions

    @OptionGroup(title: "Proxies, credentials and cookies")
    var network: NetworkOptions

    @OptionGroup(title: "Freshness, politeness and time limits")
    var politeness: PolitenessOptions

    func validate() throws {
        if connection.transport.isSystemStack, network.proxy?.isEmpty == false {
            throw ValidationError(
                "--transport urlsession takes the system's proxy settings: --proxy needs the nio or async-http-client "
                    + "transport")
        }
        if let maxConcurrent, maxConcurrent < 1 {
            throw ValidationError("-j/--max-concurrent must be at least 1, not \(maxConcurrent)")
        }
        if let perHost, perHost < 1 { throw ValidationError("--per-host must be at least 1, not \(perHost)") }
        if retries < 0 { throw ValidationError("--retries must be 0 or more, not \(retries)") }
        if !(1...64).contains(split) { throw ValidationError("-s/--split must be from 1 to 64, not \(split)") }
        if let minSplitSize, (parseByteCount(minSplitSize) ?? 0) < 1 {
            throw ValidationError("--min-split-size '\(minSplitSize)' is not a size above 0 (e.g. 1M, 20M)")
        }
        if let maxSize, parseByteCount(maxSize) == nil {
            throw ValidationError("--max-size '\(maxSize)' is not a size (e.g. 500000, 64K, 10M, 2G)")
        }
        if json && quiet { throw ValidationError("--json and --quiet cannot be combined") }
        if journal != nil && noJournal { throw ValidationError("--journal and --no-journal cannot be combined") }
        try politeness.validate(journalEnabled: !noJournal)
    }

    mutating func run() async throws {
        // First: a signal while the input is read or the journal opened must stop the run cleanly too.
        Interruption.install()
        let directory = URL(fileURLWithPath: directory, isDirectory: true).standardizedFileURL
        let source = try openInput()
        let planner = makePlanner(directory: directory)
        let directories = DestinationDirectories(base: directory)
        // The whole input is checked before anything is downloaded, then read again to run: a list of any length
        // takes the same memory.
        let checked = try InputCheck.run(source, planner: planner, directories: directories)
        let proxy = connection.transport.isSystemStack ? ProxyConfiguration.none : try network.proxyConfiguration()
        let netrc = try network.readNetrc()
        let cookies = try network.loadCookies()
        // As curl does, the CA and certificate files are read only when something is fetched over https: a stale
        // SSL_CERT_FILE does not stop a run of http URLs.
        let tls = try connection.tlsSettings(
            checkingFiles: checked.usesHTTPS || proxy.http?.kind == .https || proxy.https?.kind == .https)
        try directories.createBase()
        // Opened once the input is known to be good: a bad input leaves nothing behind.
        let journal = try Self.journalPath(journal, disabled: noJournal, directory: directory).map {
            try Self.openJournal(at: $0)
        }

        var settings = RunSettings(directory: directory)
        // One file split over N connections should get them without -j too.
        settings.maxConcurrent = maxConcurrent ?? max(4, split)
        settings.perHost = perHost
        settings.retries = retries
        connection.apply(to: &settings)
        settings.tls = tls
        settings.output = json ? .json : .automatic
        settings.computesSHA256 = sha256
        settings.quiet = quiet
        settings.verbose = verbose
        settings.journal = journal
        settings.proxy = proxy
        settings.credentials = netrc
        settings.cookies = cookies
        politeness.apply(to: &settings)
        let names = NameBook()
        let requests = PlannedRequests(
            source: source, planner: planner, credentials: network.credentialRule(netrc: netrc),
            directories: directories, names: names)
        let report = await GetRun.run(requests, count: checked.count, names: names, settings: settings)
        // The process exits without releasing the journal, so its last changes are folded in here.
        journal?.finish()
        var exitCode = report.exitCode
        if let cookies, let path = network.cookieJar {
            do {
                try cookies.write(to: URL(fileURLWithPath: path))
            } catch {
                Console.err("haul: --cookie-jar: \(error)\n")
                exitCode = max(exitCode, 1)
            }
        }
        Foundation.exit(exitCode)
    }

    /// How every entry is planned.
    private func makePlanner(directory: URL) -> Planner {
        var planSettings = PlanSettings(directory: directory)
        planSettings.fileName = output
        planSettings.checksum = checksum
        planSettings.headers = headers
        planSettings.maxSize = maxSize.flatMap(parseByteCount)
        planSettings.split = split
        planSettings.minimumSegmentSize =
            minSplitSize.flatMap(parseByteCount) ?? DownloadRequest.defaultMinimumSegmentSize
        planSettings.conflictPolicy = onConflict
        planSettings.useContentDisposition = contentDisposition
        planSettings.continuesExistingFiles = politeness.continueExisting
        planSettings.speedLimit = politeness.speedLimit.flatMap(PolitenessOptions.byteRate)
        planSettings.speedTime = politeness.speedTime
        return Planner(settings: planSettings)
    }

    /// Where the journal is kept (`--journal`, else DIR/.haul/journal.sqlite); `nil` with `--no-journal`.
    static func journalPath(_ option: String?, disabled: Bool, directory: URL) -> String? {
        guard !disabled else { return nil }
        return option.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
            ?? directory.appendingPathComponent(".haul/journal.sqlite").path
    }

    /// Opens the journal at `path`; a failure is a usage error followed by `summary`.
    static func openJournal(
        at path: String, summary: String = "nothing was downloaded (see 'haul get --help')"
    ) throws -> SQLiteJournal {
        let warned = Locked(false)
        do {
            // Each download is looked up once, before it is written: the journal need not remember its writes.
            return try SQLiteJournal(
                path: path, remembersWrites: false,
                onError: { error in
                    // Downloads go on; only what a rerun can skip or resume is affected. Said once.
                    let first = warned.withLock { warned in
                        defer { warned = true }
                        return !warned
                    }
                    if first { Console.err("haul: warning: journal '\(path)': \(error); a rerun may fetch again\n") }
                })
        } catch {
            throw UsageFailure(
                [InputProblem(origin: "--journal", message: "\(error); or use --no-journal")], summary: summary)
        }
    }

    /// The URLs of the command line, then those of the input file.
    private func openInput() throws(UsageFailure) -> InputSource {
        var source = InputSource(arguments: urls)
        guard let inputFile else { return source }
        do {
            source.file = (
                try InputSpool(path: inputFile == "-" ? nil : inputFile), inputFile == "-" ? "<stdin>" : inputFile
            )
        } catch {
            throw UsageFailure([
                InputProblem(origin: "-i/--input-file", message: "cannot read '\(inputFile)': \(Self.reason(error))")
            ])
        }
        return source
    }

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
    init(_ problems: [InputProblem], summary: String = "nothing was downloaded (see 'haul get --help')") {
        self.problems = problems
        self.summary = summary
    }
}

extension ConflictPolicy: ExpressibleByArgument {}
