import ArgumentParser
import CoreMetrics
import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulMetrics
import HaulOperations
import HaulPostgres
import HaulSQLite
import Logging
import Prometheus

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

            With --metrics-listen HOST:PORT it serves Prometheus metrics at /metrics (downloads started and finished \
            by outcome, bytes received, downloads running per host, the queue's downloads by state, retries, time \
            waiting, claims and their latency, lease renewals, database errors), /healthz (alive) and /readyz (the \
            database answers and the journal is open).

            Exit status: 130 on SIGINT or SIGTERM (unfinished claims are handed back at once; partial files are \
            kept); with --until-empty, 0 once nothing is waiting or running in the queue, or 1 if a download this \
            worker ran failed for good; 1 when the database cannot be reached at start; 2 usage error.
            """)

    @OptionGroup
    var database: DatabaseOptions

    @OptionGroup
    var destination: DirectoryOptions

    @OptionGroup
    var concurrency: ConcurrencyOptions

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

    @OptionGroup
    var output: OutputOptions

    @OptionGroup(title: "Running as a service")
    var monitoring: MonitoringOptions

    @OptionGroup(title: "Running as a service")
    var logging: LogOptions

    @OptionGroup
    var journal: JournalOptions

    /// For benchmarks: every claimed download succeeds at once without a request, so that what is measured is the
    /// queue's own cost.
    @Flag(name: .customLong("no-op-downloads"), help: .hidden)
    var noOpDownloads = false

    @OptionGroup
    var connection: ConnectionOptions

    @OptionGroup(title: "Proxies, credentials and cookies")
    var network: NetworkOptions

    func validate() throws {
        if !(lease >= 1 && lease <= 86_400) {
            throw ValidationError("--lease must be a number of seconds from 1 to 86400, not \(lease)")
        }
        try connection.validate(with: network)
    }

    func run() async throws {
        Interruption.install()
        try database.checkURL()
        let directory = destination.url
        var configuration = Downloader.Configuration.commandLine
        configuration.tls = try connection.tlsSettings(checkingFiles: true)
        try network.apply(to: &configuration, transport: connection.transport)
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
        let journal = try self.journal.apply(to: &configuration, directory: directory, summary: "nothing was done")
        apply(to: &configuration)
        let log = logging.log(label: "haul.worker", quiet: self.output.quiet)
        let registry = PrometheusCollectorRegistry()
        var workerConfiguration = self.workerConfiguration(directory: directory)
        workerConfiguration.logger = log.logger
        if monitoring.listen != nil {
            workerConfiguration.metricsFactory = PrometheusMetricsFactory(registry: registry)
        }
        let engine = connection.makeEngine(
            configuration: configuration, maxConcurrent: workerConfiguration.maxConcurrent)
        let output = WorkerOutput(json: self.output.json, quiet: self.output.quiet, log: log)
        let noOp = noOpDownloads
        let token = try monitoring.token()
        let monitoring = self.monitoring
        let lease = workerConfiguration.lease
        let report = try await database.withQueue(maximumConnections: 6) { queue in
            let worker =
                noOp
                ? SharedQueueWorker.withoutDownloads(queue: queue, configuration: workerConfiguration)
                : SharedQueueWorker(
                    queue: queue, transport: engine.transport, downloaderConfiguration: engine.configuration,
                    configuration: workerConfiguration)
            // Metrics only when asked for: their events cost something per download.
            let server =
                monitoring.listen == nil
                ? nil
                : try await monitoring.start(
                    Self.monitoringEndpoint(
                        registry: registry, token: token, worker: worker, queue: queue, journal: journal))
            if let server, let listen = monitoring.listen {
                let host = listen[..<(listen.lastIndex(of: ":") ?? listen.endIndex)]
                log.line(.info, "haul worker: metrics on http://\(host):\(server.port)/metrics")
            }
            let printer = Task {
                for await event in worker.events { output.print(event, queue: queue.name) }
            }
            // SIGTERM and SIGINT stop the run cleanly once it has started (claims handed back), never the process at
            // once; the shutdown is bounded by the lease (a silent database fences the worker after half of it).
            let report = ResultBox<WorkerReport>()
            try await CommandService.run(
                main: .cancelled(onShutdown: { report.resolve(await worker.run()) }),
                helpers: server.map { server in [.untilShutdown(then: { await server.stop() })] } ?? [], log: log,
                bound: lease + .seconds(15))
            await printer.value
            return await report.wait()
        }
        // The process exits without releasing the journal, so its last changes are folded in here.
        journal?.finish()
        try? await engine.ownedTransport?.shutdown()
        output.summarize(report)
        Foundation.exit(report.interrupted ? 130 : report.failed > 0 ? 1 : 0)
    }

    /// `/metrics`, `/healthz` and `/readyz` for `worker`'s downloads (none without one: a control plane), with the
    /// shared queue's downloads by state; ready while `queue`'s database answers and `journal` can be read.
    static func monitoringEndpoint(
        registry: PrometheusCollectorRegistry, token: String?, worker: SharedQueueWorker?, queue: SharedQueue,
        journal: SQLiteJournal?
    ) -> MonitoringEndpoint {
        let factory = PrometheusMetricsFactory(registry: registry)
        // The queue's depth is the shared queue's, fleet-wide; a scrape while the database is away keeps the last.
        let depth: @Sendable () async -> [(state: String, count: Int)] = {
            guard let counts = try? await queue.counts() else { return [] }
            // Every state, those with no download at 0: the count leaves them out, and a state that emptied must not
            // keep its last value.
            return SharedDownloadState.allCases.map { ($0.rawValue, counts[$0] ?? 0) }.sorted { $0.0 < $1.0 }
        }
        let queueMetrics = worker?.downloads.map { QueueMetrics(queue: $0, factory: factory, depth: depth) }
        queueMetrics?.start()
        let depthGauges = queueMetrics == nil ? DepthGauges(factory: factory) : nil
        var readiness = [MonitoringEndpoint.ReadinessCheck.database(queue)]
        if let journal { readiness.append(.journal(journal)) }
        return MonitoringEndpoint(
            registry: registry, bearerToken: token, readiness: readiness,
            refresh: {
                await queueMetrics?.refresh()
                if let depthGauges { depthGauges.record(await depth()) }
            })
    }

    /// Sets what the options ask of the engine: timeouts and HTTP version, and logging. Every file gets its SHA-256,
    /// which the database records. Files the options name (TLS, journal, netrc, cookies) are read by ``run()``.
    func apply(to configuration: inout Downloader.Configuration) {
        connection.apply(to: &configuration)
        output.apply(to: &configuration)
        configuration.computesSHA256 = true
    }

    /// How this worker claims and runs downloads into `directory`.
    func workerConfiguration(directory: URL) -> SharedQueueWorker.Configuration {
        var configuration = SharedQueueWorker.Configuration(
            directory: directory, maxConcurrent: concurrency.connections(),
            lease: .milliseconds(Int64(lease * 1000)), name: name, exitsWhenEmpty: untilEmpty)
        configuration.credentials = network.user.map(Credentials.init(userColonPassword:))
        return configuration
    }
}

/// What `haul worker` prints of its events.
struct WorkerOutput: Sendable {
    let json: Bool
    let quiet: Bool
    var log = ServiceLog(format: .text, label: "haul.worker", level: .info)

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

    /// `line`'s members as a log line's metadata (`event`, `worker`, `count`...).
    private static func metadata(of line: Line) -> [String: String] {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        guard let data = try? encoder.encode(line),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { return [:] }
        return object.mapValues { "\($0)" }.filter { $0.key != "event" }.merging(["event": line.event]) { $1 }
    }

    /// `line` as JSON on standard output with `--json`; else `text` (on standard error when `err`), unless `--quiet`
    /// and not `always`.
    private func emit(_ line: Line, _ text: String, err: Bool, always: Bool = false) {
        if !json && log.format == .json {
            // A download's end is logged by the worker itself, with the download's id in the queue.
            if ["finish", "fail"].contains(line.event) { return }
            log.line(always ? .warning : .info, text, metadata: Self.metadata(of: line))
            return
        }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            encoder.keyEncodingStrategy = .convertToSnakeCase
            if let data = try? encoder.encode(line) { Console.jsonLine(String(decoding: data, as: UTF8.self)) }
            return
        }
        if quiet && !always { return }
        if err || always && quiet { Console.err(text + "\n") } else { Console.out(text + "\n") }
    }
}
