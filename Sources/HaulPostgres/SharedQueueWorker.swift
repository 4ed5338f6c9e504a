public import CoreMetrics
public import Foundation
public import Haul
import HaulOperations
public import Logging
import PostgresNIO

/// A worker of a ``SharedQueue``: claims downloads in batches, runs them through a `DownloadQueue` with every rule of
/// the engine, and records how each ended, until it is cancelled (or, with ``Configuration/exitsWhenEmpty``, until
/// nothing is left to do).
///
/// Ownership is a lease: the worker renews it every sixth of ``Configuration/lease``; a worker silent past its lease
/// loses its claims to the others, and its late completions are refused. A worker that cannot renew for half its
/// lease stops its downloads before anyone can take them over (so one URL is never fetched by two live workers at
/// once), then registers again and goes on once the database answers.
///
/// Retries live in the database: each claim runs one attempt; a transient failure puts the download back with a
/// backoff (or the server's `Retry-After`, which also holds the host back for every worker), where any worker may
/// take it; after ``SharedDownload/maxAttempts`` it fails for good, with its reason.
///
/// Cancelling the task that runs ``run()`` stops the downloads (their partial files are kept for a resume), returns
/// every unfinished claim to the queue at once, and returns.
///
/// ```swift
/// try await SharedQueue.withQueue(DatabaseURL(url)) { queue in
///     let worker = SharedQueueWorker(
///         queue: queue, transport: NIOTransport(), configuration: .init(directory: downloads))
///     let report = try await worker.run()
/// }
/// ```
public final class SharedQueueWorker: Sendable {
    /// How a worker works.
    public struct Configuration: Sendable {
        /// Where files are written (each download at its ``SharedDownload/path`` under it).
        public var directory: URL
        /// Downloads at once on this worker (connections, counting split files' extra ones).
        public var maxConcurrent: Int
        /// How long the worker's claims are its own without a heartbeat.
        public var lease: Duration
        /// The worker's name in ``QueueStatus`` (default `HOST:PID`).
        public var name: String
        /// Whether ``run()`` returns once nothing in the queue is waiting or running (on any worker).
        public var exitsWhenEmpty: Bool
        /// Backoff between the attempts of a download (its `maxRetries` is not used: ``SharedDownload/maxAttempts``
        /// counts attempts).
        public var retryPolicy: RetryPolicy
        /// How often the worker looks for work when no notification came.
        public var pollInterval: Duration
        /// How long finished downloads are gathered before they are recorded in one statement.
        public var completionDelay: Duration
        /// Downloads claimed beyond the free slots, so that a claim statement serves several downloads.
        public var claimAhead: Int
        /// Credentials sent (HTTP Basic) to the origin of every claimed download's URL, and to no other (they become
        /// each request's `DownloadRequest.credentials`); never stored in the database.
        public var credentials: Credentials?
        /// Where the worker's own metrics go (swift-metrics), `nil` for none: `haul_worker_claims_total` (downloads
        /// claimed), `haul_worker_claim_seconds` (each claim statement's latency), `haul_worker_lease_renewals_total`,
        /// `haul_worker_database_errors_total` (statements that failed or went unanswered) and `haul_retries_total`
        /// (failures sent back for another attempt).
        public var metricsFactory: (any MetricsFactory)?
        /// Where each download's end is logged, with its `download.id` in the queue, `download.url` (no credentials)
        /// and `download.path` as metadata: info for a file published, warning for a failure. Logs nothing by default.
        public var logger: Logger

        /// Creates a configuration.
        public init(
            directory: URL, maxConcurrent: Int = 4, lease: Duration = .seconds(30), name: String? = nil,
            exitsWhenEmpty: Bool = false, retryPolicy: RetryPolicy = .default,
            pollInterval: Duration = .seconds(1), completionDelay: Duration = .milliseconds(50),
            claimAhead: Int? = nil
        ) {
            self.directory = directory
            self.maxConcurrent = max(1, maxConcurrent)
            self.lease = lease
            self.name = name ?? "\(ProcessInfo.processInfo.hostName):\(ProcessInfo.processInfo.processIdentifier)"
            self.exitsWhenEmpty = exitsWhenEmpty
            self.retryPolicy = retryPolicy
            self.pollInterval = pollInterval
            self.completionDelay = completionDelay
            self.claimAhead = claimAhead ?? max(1, maxConcurrent)
            self.logger = Logger(label: "haul.worker", factory: { _ in SwiftLogNoOpLogHandler() })
        }
    }

    /// The queue worked on.
    public let queue: SharedQueue
    /// How this worker works.
    public let configuration: Configuration
    let runner: ClaimRunner
    let metrics: WorkerMetrics?
    private let eventStream: AsyncStream<WorkerEvent>
    private let eventSink: AsyncStream<WorkerEvent>.Continuation

    /// Creates a worker that fetches with `transport` and the engine's `downloaderConfiguration`, whose retry policy
    /// is replaced by the worker's (``Configuration/retryPolicy``, one rule for waits and host holds) with `maxRetries`
    /// 0: retries go through the database.
    public convenience init(
        queue: SharedQueue, transport: any HTTPTransport,
        downloaderConfiguration: Downloader.Configuration = Downloader.Configuration(), configuration: Configuration
    ) {
        var engine = downloaderConfiguration
        engine.retryPolicy = configuration.retryPolicy
        engine.retryPolicy.maxRetries = 0
        // A cancelled download (a stop, a lease lost) keeps its partial: the next worker on this directory resumes it.
        engine.keepsPartialOnCancel = true
        engine.containingDirectory = configuration.directory
        // The database records each file's SHA-256.
        engine.computesSHA256 = true
        let downloads = DownloadQueue(
            downloader: Downloader(transport: transport, configuration: engine),
            configuration: .init(maxConcurrentDownloads: configuration.maxConcurrent, recordsRequests: false))
        self.init(queue: queue, runner: .engine(downloads), configuration: configuration)
    }

    init(queue: SharedQueue, runner: ClaimRunner, configuration: Configuration) {
        self.queue = queue
        self.runner = runner
        self.configuration = configuration
        self.metrics = configuration.metricsFactory.map(WorkerMetrics.init(factory:))
        (eventStream, eventSink) = AsyncStream.makeStream(bufferingPolicy: .unbounded)
    }

    /// The download queue the worker runs its claims through (`nil` for a worker without downloads), for metrics of
    /// its own.
    package var downloads: DownloadQueue? {
        if case .engine(let downloads) = runner { downloads } else { nil }
    }

    /// A worker whose downloads do nothing and succeed at once: what is left is the queue's own cost (claims,
    /// completions, heartbeats), for benchmarks.
    package static func withoutDownloads(queue: SharedQueue, configuration: Configuration) -> SharedQueueWorker {
        SharedQueueWorker(queue: queue, runner: .noOp, configuration: configuration)
    }

    /// What the worker does, as it does it; ends when ``run()`` returns. Read it from one task.
    public var events: AsyncStream<WorkerEvent> { eventStream }

    func emit(_ event: WorkerEvent) { eventSink.yield(event) }

    /// Works until the task is cancelled (then ``WorkerReport/interrupted`` is set) or, with
    /// ``Configuration/exitsWhenEmpty``, until nothing in the queue is waiting or running.
    public func run() async -> WorkerReport {
        let report = Locked(WorkerReport())
        defer { eventSink.finish() }
        // Downloads that cannot write there fail with the reason; the directory is made as `mkdir -p` would.
        try? FileManager.default.createDirectory(at: configuration.directory, withIntermediateDirectories: true)
        var registrationFailures = 0
        while !Task.isCancelled {
            let id: Int64
            do {
                id = try await queue.registerWorker(
                    name: configuration.name, directory: configuration.directory.path, lease: configuration.lease)
                registrationFailures = 0
            } catch {
                metrics?.databaseErrors.increment()
                registrationFailures += 1
                if registrationFailures == 1 { emit(.databaseUnreachable(reason: error.message)) }
                try? await Task.sleep(for: min(configuration.pollInterval * registrationFailures, .seconds(5)))
                continue
            }
            emit(.started(workerID: id))
            let ending = await WorkerRun(worker: self, id: id, report: report).run()
            switch ending {
            case .leaseLost:
                continue
            case .empty:
                return report.withLock { $0 }
            case .interrupted:
                break
            }
        }
        return report.withLock { report in
            report.interrupted = true
            return report
        }
    }
}

/// What a worker reports as it works.
public enum WorkerEvent: Sendable, Hashable {
    /// Registered in the database with this number (again after a lost lease).
    case started(workerID: Int64)
    /// Claimed this many downloads in one statement.
    case claimed(count: Int)
    /// A file was published at `path` (or found there already: `skipped`).
    case finished(path: String, url: String, size: Int64, sha256: String?, skipped: Bool)
    /// A download failed; `willRetry` when it goes back to the queue for another attempt.
    case failed(path: String, url: String, reason: String, willRetry: Bool)
    /// Claims handed back unfinished (the worker stops, or the downloads were cancelled).
    case returned(count: Int)
    /// A completion the database refused: the worker had lost its lease, so the download is someone else's.
    case refused(path: String)
    /// The lease was lost, or could not be renewed for half its time: the worker stops its downloads and registers
    /// again.
    case leaseLost
    /// PostgreSQL did not answer; the worker keeps trying.
    case databaseUnreachable(reason: String)
    /// PostgreSQL answers again.
    case databaseReachable
}

/// What one worker did.
public struct WorkerReport: Sendable, Hashable {
    /// Files published (or found there already).
    public var done = 0
    /// Downloads that failed for good here.
    public var failed = 0
    /// Failures sent back for another attempt.
    public var retried = 0
    /// Claims handed back unfinished.
    public var returned = 0
    /// Completions refused because the lease was lost.
    public var refused = 0
    /// Whether the run was stopped by cancelling its task.
    public var interrupted = false
}

/// How claimed downloads are run.
enum ClaimRunner: Sendable {
    /// Through a download queue.
    case engine(DownloadQueue)
    /// Not at all: each succeeds at once.
    case noOp
}

/// The worker's own metrics (``SharedQueueWorker/Configuration/metricsFactory``).
struct WorkerMetrics: Sendable {
    let claims: Counter
    let claimLatency: CoreMetrics.Timer
    let leaseRenewals: Counter
    let databaseErrors: Counter
    let retries: Counter

    init(factory: any MetricsFactory) {
        claims = Counter(label: "haul_worker_claims_total", factory: factory)
        claimLatency = CoreMetrics.Timer(label: "haul_worker_claim_seconds", factory: factory)
        leaseRenewals = Counter(label: "haul_worker_lease_renewals_total", factory: factory)
        databaseErrors = Counter(label: "haul_worker_database_errors_total", factory: factory)
        retries = Counter(label: "haul_retries_total", factory: factory)
    }
}
