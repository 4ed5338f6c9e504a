import Foundation
import PostgresNIO

/// The state of a shared queue at one moment: counts by state, per host and per worker, bytes, pace and failures.
/// Encodes to the JSON `haul status --json` prints (snake_case keys).
public struct QueueStatus: Sendable, Codable, Hashable {
    /// The queue's name.
    public var queue: String
    /// Downloads waiting for a worker (some perhaps until a retry's time).
    public var waiting = 0
    /// Downloads a worker holds.
    public var running = 0
    /// Downloads paused (``SharedQueue/pause(_:)``).
    public var paused = 0
    /// Downloads published.
    public var done = 0
    /// Downloads failed for good.
    public var failed = 0
    /// Downloads cancelled.
    public var cancelled = 0
    /// Bytes of the published files.
    public var bytesDone: Int64 = 0
    /// Bytes per second published over the last minute.
    public var bytesPerSecond: Double = 0
    /// Downloads per second published over the last minute.
    public var filesPerSecond: Double = 0
    /// Seconds until the waiting and running downloads are done at that pace (`nil` when nothing is moving).
    public var etaSeconds: Double?
    /// Per host, the busiest first.
    public var hosts: [Host] = []
    /// The workers that are running, or that hold files.
    public var workers: [Worker] = []
    /// Failed downloads (the first ones, by queue order) with their reasons.
    public var failures: [Failure] = []

    /// One host's counts.
    public struct Host: Sendable, Codable, Hashable {
        /// The origin (`https://example.org:443`).
        public var host: String
        /// Downloads waiting.
        public var waiting: Int
        /// Connections in use, all workers together.
        public var running: Int
        /// The limit on them (`nil`: none).
        public var limit: Int?
        /// Downloads published.
        public var done: Int
        /// Downloads failed for good.
        public var failed: Int
    }

    /// One worker.
    public struct Worker: Sendable, Codable, Hashable {
        /// Its number in the database.
        public var id: Int64
        /// `HOST:PID` unless named otherwise.
        public var name: String
        /// The machine it runs on (empty for a worker of a Haul before the fleet's schema).
        public var machine: String
        /// `active`, `stopped`, or `lost` (silent past its lease: its claims were taken back).
        public var state: String
        /// Seconds since its last heartbeat.
        public var secondsSinceHeartbeat: Double
        /// Downloads it holds now.
        public var running: Int
        /// Files it published (they are in its directory).
        public var done: Int
        /// Their bytes.
        public var bytesDone: Int64
        /// Bytes per second it published over the last minute.
        public var bytesPerSecond: Double
    }

    /// One failed download.
    public struct Failure: Sendable, Codable, Hashable {
        /// The URL.
        public var url: String
        /// Its path under the workers' directory.
        public var path: String
        /// Attempts made.
        public var attempts: Int
        /// Why it failed.
        public var reason: String
    }

    /// Whether nothing is waiting or running.
    public var isFinished: Bool { waiting == 0 && running == 0 }
}

extension SharedQueue {
    /// Reads the queue's status, after taking back the claims of workers silent past their lease (as a worker's
    /// rescue does): with no worker left to do it, a killed one would otherwise show active, holding its downloads.
    /// - Parameters:
    ///   - failures: How many failed downloads to list with their reasons.
    ///   - stoppedWithin: Workers that stopped or were lost this recently are listed too, whatever they hold.
    public func status(failures: Int = 20, stoppedWithin: Duration = .zero) async throws -> QueueStatus {
        // A role that may only read (a dashboard's, a monitor's) still gets the status.
        _ = try? await rescue()
        var status = QueueStatus(queue: name)
        for (state, count, bytes) in try await rows(
            """
            SELECT state, count(*)::bigint, coalesce(sum(size), 0)::bigint FROM haul_download
            WHERE queue = \(name) GROUP BY state
            """, "reading the counts", as: (String, Int64, Int64).self)
        {
            switch state {
            case "waiting": status.waiting = Int(count)
            case "running": status.running = Int(count)
            case "paused": status.paused = Int(count)
            case "done":
                status.done = Int(count)
                status.bytesDone = bytes
            case "failed": status.failed = Int(count)
            case "cancelled": status.cancelled = Int(count)
            default: break
            }
        }
        (status.filesPerSecond, status.bytesPerSecond) = try await pace()
        if status.filesPerSecond > 0 {
            status.etaSeconds = Double(status.waiting + status.running) / status.filesPerSecond
        }
        status.hosts = try await hosts()
        status.workers = try await workers(stoppedWithin: stoppedWithin)
        status.failures = try await rows(
            """
            SELECT url, path, attempt, coalesce(error, '') FROM haul_download
            WHERE queue = \(name) AND state = 'failed' ORDER BY id LIMIT \(Int32(clamping: failures))
            """, "reading the failures", as: (String, String, Int32, String).self
        ).map { QueueStatus.Failure(url: $0.0, path: $0.1, attempts: Int($0.2), reason: $0.3) }
        return status
    }

    /// Files and bytes per second published over the last minute (a run younger than that over its own length).
    public func pace() async throws -> (filesPerSecond: Double, bytesPerSecond: Double) {
        let window = 60.0
        for (files, bytes, span) in try await rows(
            """
            SELECT count(*)::bigint, coalesce(sum(size), 0)::bigint,
                coalesce(extract(epoch FROM now() - min(finished_at)), 0)::double precision
            FROM haul_download
            WHERE queue = \(name) AND finished_at > now() - interval '60 seconds' AND state = 'done'
            """, "reading the pace", as: (Int64, Int64, Double).self)
        {
            let seconds = min(window, max(span, 1))
            return (Double(files) / seconds, Double(bytes) / seconds)
        }
        return (0, 0)
    }

    private func hosts() async throws(SharedQueueError) -> [QueueStatus.Host] {
        try await rows(
            """
            SELECT h.host, h.ready, h.running, h.max_running,
                coalesce(f.done, 0)::bigint, coalesce(f.failed, 0)::bigint
            FROM haul_host h LEFT JOIN (
                SELECT host, count(*) FILTER (WHERE state = 'done') AS done,
                    count(*) FILTER (WHERE state = 'failed') AS failed
                FROM haul_download WHERE queue = \(name) GROUP BY host
            ) f ON f.host = h.host
            WHERE h.queue = \(name)
            ORDER BY h.ready + h.running DESC, h.host LIMIT 50
            """, "reading the hosts", as: (String, Int32, Int32, Int32, Int64, Int64).self
        ).map(Self.host)
    }

    private static func host(_ row: (String, Int32, Int32, Int32, Int64, Int64)) -> QueueStatus.Host {
        let (host, waiting, running, limit, done, failed) = row
        return QueueStatus.Host(
            host: host, waiting: Int(waiting), running: Int(running), limit: limit == Int32.max ? nil : Int(limit),
            done: Int(done), failed: Int(failed))
    }

    private func workers(stoppedWithin: Duration) async throws(SharedQueueError) -> [QueueStatus.Worker] {
        try await rows(
            """
            SELECT w.id, w.name, w.machine, w.state,
                extract(epoch FROM now() - w.heartbeat_at)::double precision,
                coalesce(d.running, 0)::bigint, coalesce(d.done, 0)::bigint, coalesce(d.bytes, 0)::bigint,
                coalesce(d.recent, 0)::bigint
            FROM haul_worker w LEFT JOIN (
                SELECT worker_id, count(*) FILTER (WHERE state = 'running') AS running,
                    count(*) FILTER (WHERE state = 'done') AS done,
                    sum(size) FILTER (WHERE state = 'done') AS bytes,
                    sum(size) FILTER (WHERE state = 'done' AND finished_at > now() - interval '60 seconds') AS recent
                FROM haul_download WHERE queue = \(name) AND worker_id IS NOT NULL GROUP BY worker_id
            ) d ON d.worker_id = w.id
            WHERE w.queue = \(name) AND (w.state = 'active' OR d.done > 0 OR d.running > 0
                OR w.stopped_at > now() - \(stoppedWithin.milliseconds) * interval '1 millisecond')
            ORDER BY w.id
            """, "reading the workers", as: (Int64, String, String, String, Double, Int64, Int64, Int64, Int64).self
        ).map {
            QueueStatus.Worker(
                id: $0.0, name: $0.1, machine: $0.2, state: $0.3, secondsSinceHeartbeat: $0.4, running: Int($0.5),
                done: Int($0.6), bytesDone: $0.7, bytesPerSecond: Double($0.8) / 60)
        }
    }

    /// Where each published file is: the worker that holds it, its size and SHA-256 (`nil` when not computed).
    public func files(limit: Int = 1_000, after id: Int64 = 0) async throws -> [PublishedFile] {
        try await rows(
            """
            SELECT d.id, d.url, d.path, coalesce(w.name, ''), coalesce(w.directory, ''), coalesce(d.size, -1),
                coalesce(d.sha256, '')
            FROM haul_download d LEFT JOIN haul_worker w ON w.id = d.worker_id
            WHERE d.queue = \(name) AND d.state = 'done' AND d.id > \(id) ORDER BY d.id LIMIT \(Int32(clamping: limit))
            """, "reading the published files", as: (Int64, String, String, String, String, Int64, String).self
        ).map { (id, url, path, worker, directory, size, sha256) in
            PublishedFile(
                id: id, url: url, path: path, worker: worker, directory: directory, size: size,
                sha256: sha256.isEmpty ? nil : sha256)
        }
    }
}

/// A file a worker published: where it is, and what it holds.
public struct PublishedFile: Sendable, Codable, Hashable {
    /// The download's number in the queue.
    public var id: Int64
    /// The URL fetched.
    public var url: String
    /// The path under the worker's directory.
    public var path: String
    /// The worker that published it.
    public var worker: String
    /// That worker's directory.
    public var directory: String
    /// Bytes.
    public var size: Int64
    /// SHA-256, in hex.
    public var sha256: String?
}
