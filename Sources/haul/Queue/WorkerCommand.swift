import ArgumentParser
import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulOperations
import HaulPostgres
import HaulSQLite

/// `haul worker`: fetches downloads of a shared queue in PostgreSQL, with every rule of `haul get`.
struct WorkerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract:
            "Fetch the downloads of a shared queue in PostgreSQL (see 'haul enqueue'), with many workers at once.",
        discussion: """
            A worker claims downloads in batches, runs them as 'haul get' does (resume, checksums, safe names, \
            redirect rules), writes each file at its path under -d DIR, and records in the database its size, \
            SHA-256 and this worker. Run as many workers as you like, on one machine or many: per-host limits \
            (haul enqueue --per-host, haul queue set) hold across all of them together.

            Claims are a lease, renewed every sixth of --lease: a worker that stops (killed, its machine lost) \
            loses its claims to the others once its lease runs out, and what it finishes after that is refused. A \
            worker that cannot reach the database for half its lease stops its downloads itself, then goes on once \
            the database answers. A download taken over by another worker starts again, unless the workers share \
            DIR (a shared file system): then it resumes from the partial file.

            Retries live in the database: a transient failure goes back to the queue with a backoff (or the \
            server's Retry-After, which holds the host back for every worker), and any worker may take it.

            Exit status: 130 on SIGINT or SIGTERM (unfinished claims are handed back at once; partial files are \
            kept); with --until-empty, 0 once nothing is waiting or running in the queue, or 1 if a download this \
            worker ran failed for good; 1 when the database cannot be reached at start; 2 usage error.
            """)

    @OptionGroup
    var database: DatabaseOptions

    @Option(
        name: [.customShort("d"), .customLong("dir")],
        help: ArgumentHelp("Directory the files are written under (created if missing).", valueName: "DIR"))
    var directory: String = "."

    @Option(
        name: [.customShort("j"), .customLong("max-concurrent")], parsing: .unconditional,
        help: ArgumentHelp("Connections at once on this worker (default 4).", valueName: "N"))
    var maxConcurrent: Int = 4

    @Option(
        help: ArgumentHelp(
            "Seconds this worker's claims stay its own without a heartbeat (default 30).", valueName: "S"))
    var lease: Double = 30

    @Flag(
        name: .customLong("until-empty"),
        help: "Exit once nothing in the queue is waiting or running (0, or 1 if a download failed here).")
    var untilEmpty = false

    @Option(help: ArgumentHelp("This worker's name in 'haul status' (default HOST:PID).", valueName: "NAME"))
    var name: String?

    @Flag(help: "NDJSON on stdout: one object per finished, failed or refused download, and a last summary.")
    var json = false

    @Flag(name: [.customShort("q"), .long], help: "Errors only.")
    var quiet = false

    @Flag(
        name: [.customShort("v"), .long],
        help: "Log requests, responses, retry and redirect decisions to stderr.")
    var verbose = false

    @Option(
        help: ArgumentHelp(
            "Where completed and partial downloads are remembered (default: DIR/.haul/journal.sqlite).",
            valueName: "PATH"))
    var journal: String?

    @Flag(name: .customLong("no-journal"), help: "Remember nothing: a download taken again starts over.")
    var noJournal = false

    /// For benchmarks: every claimed download succeeds at once without a request, so that what is measured is the
    /// queue's own cost.
    @Flag(name: .customLong("no-op-downloads"), help: .hidden)
    var noOpDownloads = false

    @OptionGroup
    var connection: TransportOptions

    @OptionGroup(title: "Proxies, credentials and cookies")
    var network: NetworkOptions

    func validate() throws {
        if maxConcurrent < 1 { throw ValidationError("-j/--max-concurrent must be at least 1, not \(maxConcurrent)") }
        if !(lease >= 1 && lease <= 86_400) {
            throw ValidationError("--lease must be a number of seconds from 1 to 86400, not \(lease)")
        }
        if json && quiet { throw ValidationError("--json and --quiet cannot be combined") }
        if journal != nil && noJournal { throw ValidationError("--journal and --no-journal cannot be combined") }
        if connection.transport.isSystemStack, network.proxy?.isEmpty == false {
            throw ValidationError("--transport urlsession takes the system's proxy settings: --proxy needs another")
        }
    }

    func run() async throws {
        Interruption.install()
        try database.checkURL()
        let directory = URL(fileURLWithPath: directory, isDirectory: true).standardizedFileURL
        let proxy = connection.transport.isSystemStack ? ProxyConfiguration.none : try network.proxyConfiguration()
        var settings = RunSettings(directory: directory)
        settings.maxConcurrent = maxConcurrent
        settings.tls = try connection.tlsSettings(checkingFiles: true)
        connection.apply(to: &settings)
        settings.proxy = proxy
        settings.credentials = try network.readNetrc()
        settings.cookies = try network.loadCookies()
        settings.verbose = verbose
        settings.computesSHA256 = true
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw UsageFailure(
                [
                    InputProblem(
                        origin: "-d/--dir", message: "cannot make '\(directory.path)': \(GetCommand.reason(error))")
                ],
                summary: "nothing was done")
        }
        let journal = try GetCommand.journalPath(self.journal, disabled: noJournal, directory: directory).map {
            try GetCommand.openJournal(at: $0, summary: "nothing was done")
        }
        settings.journal = journal
        let engine = GetRun.makeEngine(settings)
        let workerConfiguration = SharedQueueWorker.Configuration(
            directory: directory, maxConcurrent: maxConcurrent, lease: .milliseconds(Int64(lease * 1000)), name: name,
            exitsWhenEmpty: untilEmpty)
        let output = WorkerOutput(json: json, quiet: quiet)
        let noOp = noOpDownloads
        let report = try await database.withQueue(maximumConnections: 6) { queue in
            let worker =
                noOp
                ? SharedQueueWorker.withoutDownloads(queue: queue, configuration: workerConfiguration)
                : SharedQueueWorker(
                    queue: queue, transport: engine.transport, downloaderConfiguration: engine.configuration,
                    configuration: workerConfiguration)
            let printer = Task {
                for await event in worker.events { output.print(event, queue: queue.name) }
            }
            // The handler is in place before the run starts: a signal from then on stops the run cleanly (claims
            // handed back), never the process at once.
            let running = Locked<(task: Task<WorkerReport, Never>?, stopped: Bool)>((nil, false))
            let interruption = Interruption {
                let task = running.withLock { state in
                    state.stopped = true
                    return state.task
                }
                task?.cancel()
            }
            let run = Task { await worker.run() }
            let stoppedBeforeStart = running.withLock { state in
                state.task = run
                return state.stopped
            }
            if stoppedBeforeStart { run.cancel() }
            let report = await run.value
            interruption.stop()
            await printer.value
            return report
        }
        // The process exits without releasing the journal, so its last changes are folded in here.
        journal?.finish()
        try? await engine.ownedTransport?.shutdown()
        output.summarize(report)
        Foundation.exit(report.interrupted ? 130 : report.failed > 0 ? 1 : 0)
    }
}

/// What `haul worker` prints of its events.
struct WorkerOutput: Sendable {
    let json: Bool
    let quiet: Bool

    private struct Line: Encodable {
        var event: String
        var worker: Int64?
        var queue: String?
        var path: String?
        var url: String?
        var size: Int64?
        var sha256: String?
        var skipped: Bool?
        var reason: String?
        var willRetry: Bool?
        var count: Int?
        var done: Int?
        var failed: Int?
        var retried: Int?
        var returned: Int?
        var refused: Int?
        var interrupted: Bool?
    }

    func print(_ event: WorkerEvent, queue: String) {
        switch event {
        case .started(let id):
            emit(
                Line(event: "start", worker: id, queue: queue), "haul worker: worker \(id) on queue '\(queue)'",
                err: true)
        case .claimed:
            break
        case .finished(let path, let url, let size, let sha256, let skipped):
            emit(
                Line(event: "finish", path: path, url: url, size: size, sha256: sha256, skipped: skipped),
                "\(skipped ? "skipped" : "done") \(path) (\(Format.bytes(size)))", err: false)
        case .failed(let path, let url, let reason, let willRetry):
            emit(
                Line(event: "fail", path: path, url: url, reason: reason, willRetry: willRetry),
                "failed \(path): \(reason)\(willRetry ? " (back to the queue for another attempt)" : "")", err: true,
                always: !willRetry)
        case .returned(let count):
            emit(Line(event: "return", count: count), "returned \(count) unfinished to the queue", err: true)
        case .refused(let path):
            emit(
                Line(event: "refuse", path: path),
                "refused \(path): this worker had lost its lease, the download is another's now", err: true,
                always: true)
        case .leaseLost:
            emit(
                Line(event: "lease-lost"), "haul worker: lease lost: downloads stopped, registering again", err: true,
                always: true)
        case .databaseUnreachable(let reason):
            emit(
                Line(event: "database-unreachable", reason: reason), "haul worker: \(reason); retrying", err: true,
                always: true)
        case .databaseReachable:
            emit(Line(event: "database-reachable"), "haul worker: the database answers again", err: true)
        }
    }

    func summarize(_ report: WorkerReport) {
        let line = Line(
            event: "summary", done: report.done, failed: report.failed, retried: report.retried,
            returned: report.returned, refused: report.refused, interrupted: report.interrupted)
        emit(
            line,
            "haul worker: \(report.done) done, \(report.failed) failed, \(report.retried) sent back for retry, "
                + "\(report.returned) handed back\(report.interrupted ? " (interrupted)" : "")", err: false,
            always: report.failed > 0 || report.interrupted)
    }

    /// `line` as JSON on standard output with `--json`; else `text` (on standard error when `err`), unless `--quiet`
    /// and not `always`.
    private func emit(_ line: Line, _ text: String, err: Bool, always: Bool = false) {
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            encoder.keyEncodingStrategy = .convertToSnakeCase
            if let data = try? encoder.encode(line) { Console.out(String(decoding: data, as: UTF8.self) + "\n") }
            return
        }
        if quiet && !always { return }
        if err || always && quiet { Console.err(text + "\n") } else { Console.out(text + "\n") }
    }
}
