public import Foundation
import PostgresNIO

/// Where a download of a ``SharedQueue`` is.
public enum SharedDownloadState: String, Sendable, Codable, Hashable, CaseIterable {
    /// Waiting for a worker (perhaps until a retry's time).
    case waiting
    /// Held by a worker.
    case running
    /// Held back until ``SharedQueue/resume(_:)``.
    case paused
    /// Published.
    case done
    /// Failed for good.
    case failed
    /// Cancelled.
    case cancelled
}

/// One download of a ``SharedQueue`` as its lists show it.
public struct SharedDownloadRecord: Sendable, Codable, Hashable {
    /// Its number in the queue.
    public var id: Int64
    /// The URL fetched.
    public var url: String
    /// Its file's path under each worker's directory.
    public var path: String
    /// The key its host's limit counts by (`https://example.org:443`).
    public var host: String
    /// Where it is.
    public var state: SharedDownloadState
    /// The worker that holds it (running), or published or failed it; `nil` for none.
    public var worker: String?
    /// Attempts made (the one running counted).
    public var attempt: Int
    /// Attempts allowed in all.
    public var maxAttempts: Int
    /// The file's bytes, once published.
    public var size: Int64?
    /// Why its last attempt failed.
    public var error: String?
    /// Whether a pause was asked while it runs: its worker stops it at its next heartbeat.
    public var pauseRequested: Bool
    /// When it was added.
    public var enqueuedAt: Date
    /// When its worker started its last attempt (`nil` while claimed but not started yet: a claim taken ahead).
    public var startedAt: Date?
    /// When it ended.
    public var finishedAt: Date?
}

/// Files and bytes published in one interval of ``SharedQueue/throughput(last:every:)``.
public struct ThroughputSample: Sendable, Codable, Hashable {
    /// The interval's start, in seconds since 1970.
    public var start: Int64
    /// Files published in it.
    public var files: Int
    /// Their bytes.
    public var bytes: Int64
}

extension SharedQueue {
    /// Pauses downloads: waiting ones at once; running ones are stopped by their workers at their next heartbeat
    /// (their partial files kept, the attempt not counted) and then wait paused. Others are left as they are. The
    /// claims of workers silent past their lease are taken back first (as a worker's rescue does).
    /// - Returns: How many downloads were paused or asked to pause.
    @discardableResult
    public func pause(_ ids: [Int64]) async throws -> Int {
        try await rescue()
        let rows = try await rows(
            """
            WITH chosen AS (
                SELECT id, host, state FROM haul_download
                WHERE queue = \(name) AND id = ANY(\(ids)::bigint[]) AND state IN ('waiting', 'running')
                ORDER BY id FOR UPDATE
            ), waiting AS (
                UPDATE haul_download d SET state = 'paused'
                FROM chosen c WHERE d.id = c.id AND c.state = 'waiting'
                RETURNING d.host
            ), running AS (
                UPDATE haul_download d SET pause_requested = true
                FROM chosen c WHERE d.id = c.id AND c.state = 'running' AND NOT d.cancel_requested
                RETURNING d.id
            ), counts AS (
                SELECT host, count(*)::integer AS n FROM waiting GROUP BY host
            ), locked AS (
                SELECT h.host FROM haul_host h JOIN counts c ON h.queue = \(name) AND h.host = c.host
                ORDER BY h.host FOR UPDATE OF h
            ), hosts AS (
                UPDATE haul_host h SET ready = h.ready - c.n
                FROM counts c JOIN locked l ON l.host = c.host WHERE h.queue = \(name) AND h.host = c.host
            )
            SELECT ((SELECT count(*) FROM waiting) + (SELECT count(*) FROM running))::integer
            """, "pausing downloads", as: (Int32).self)
        return Int(rows.first ?? 0)
    }

    /// Resumes paused downloads (any worker may take them; one on the directory that held the partial file goes on
    /// from it), and withdraws the pause asked of running ones their workers have not stopped yet.
    /// - Returns: How many downloads were resumed.
    @discardableResult
    public func resume(_ ids: [Int64]) async throws -> Int {
        let rows = try await rows(
            """
            WITH chosen AS (
                SELECT id, host, state FROM haul_download
                WHERE queue = \(name) AND id = ANY(\(ids)::bigint[])
                    AND (state = 'paused' OR (state = 'running' AND pause_requested))
                ORDER BY id FOR UPDATE
            ), resumed AS (
                UPDATE haul_download d SET state = 'waiting', run_after = now()
                FROM chosen c WHERE d.id = c.id AND c.state = 'paused'
                RETURNING d.host
            ), kept AS (
                UPDATE haul_download d SET pause_requested = false
                FROM chosen c WHERE d.id = c.id AND c.state = 'running'
                RETURNING d.id
            ), counts AS (
                SELECT host, count(*)::integer AS n FROM resumed GROUP BY host
            ), locked AS (
                SELECT h.host FROM haul_host h JOIN counts c ON h.queue = \(name) AND h.host = c.host
                ORDER BY h.host FOR UPDATE OF h
            ), hosts AS (
                UPDATE haul_host h SET ready = h.ready + c.n
                FROM counts c JOIN locked l ON l.host = c.host WHERE h.queue = \(name) AND h.host = c.host
            )
            SELECT ((SELECT count(*) FROM resumed) + (SELECT count(*) FROM kept))::integer
            """, "resuming downloads", as: (Int32).self)
        let count = Int(rows.first ?? 0)
        if count > 0 { await notifyWorkers() }
        return count
    }

    /// The downloads in `states`, in queue order (the newest first for ended ones), `limit` of them from `offset`.
    public func downloads(_ states: Set<SharedDownloadState>, offset: Int = 0, limit: Int = 50) async throws
        -> [SharedDownloadRecord]
    {
        try await records(id: nil, path: nil, states: states, offset: offset, limit: limit)
    }

    /// The download numbered `id`, or `nil` when the queue has none.
    public func download(_ id: Int64) async throws -> SharedDownloadRecord? {
        try await records(id: id, path: nil, states: [], offset: 0, limit: 1).first
    }

    /// The download whose file is at `path` under the workers' directories, or `nil` when the queue has none.
    public func download(atPath path: String) async throws -> SharedDownloadRecord? {
        try await records(id: nil, path: path, states: [], offset: 0, limit: 1).first
    }

    /// How many downloads are in each state (states with none left out).
    public func counts() async throws -> [SharedDownloadState: Int] {
        var counts: [SharedDownloadState: Int] = [:]
        for (state, count) in try await rows(
            "SELECT state, count(*)::bigint FROM haul_download WHERE queue = \(name) GROUP BY state",
            "counting downloads", as: (String, Int64).self)
        {
            if let state = SharedDownloadState(rawValue: state) { counts[state] = Int(count) }
        }
        return counts
    }

    /// Files and bytes published in each interval of `every` over the `last` span, oldest first; intervals with
    /// nothing published are there with zeros.
    public func throughput(last span: Duration = .seconds(600), every interval: Duration = .seconds(10)) async throws
        -> [ThroughputSample]
    {
        let step = max(1, interval.components.seconds)
        let slots = max(1, span.components.seconds / step)
        let rows = try await rows(
            """
            WITH now AS (SELECT floor(extract(epoch FROM now()))::bigint / \(step) * \(step) AS at)
            SELECT floor(extract(epoch FROM d.finished_at))::bigint / \(step) * \(step) AS slot,
                count(*)::bigint, coalesce(sum(d.size), 0)::bigint, (SELECT at FROM now)
            FROM haul_download d
            WHERE d.queue = \(name) AND d.finished_at > now() - \(slots * step) * interval '1 second'
                AND d.state = 'done'
            GROUP BY slot
            UNION ALL SELECT -1, 0, 0, (SELECT at FROM now)
            """, "reading the throughput", as: (Int64, Int64, Int64, Int64).self)
        let last = rows.first?.3 ?? 0
        var samples = (0..<slots).map { index in
            ThroughputSample(start: last - (slots - 1 - index) * step, files: 0, bytes: 0)
        }
        for (slot, files, bytes, _) in rows where slot >= 0 {
            let index = Int((slot - samples[0].start) / step)
            guard samples.indices.contains(index) else { continue }
            samples[index].files = Int(files)
            samples[index].bytes = bytes
        }
        return samples
    }

    /// The download numbered `id`, or at `path`, or (both `nil`) those in `states` as ``downloads(_:offset:limit:)``
    /// lists them.
    private func records(id: Int64?, path: String?, states: Set<SharedDownloadState>, offset: Int, limit: Int)
        async throws(SharedQueueError) -> [SharedDownloadRecord]
    {
        let names = states.map(\.rawValue).sorted()
        let ended = states.isSubset(of: [.done, .failed, .cancelled])
        return try await rows(
            """
            SELECT d.id, d.url, d.path, d.host, d.state, w.name, d.attempt, d.max_attempts, d.size, d.error,
                d.pause_requested, d.enqueued_at, d.started_at, d.finished_at
            FROM haul_download d LEFT JOIN haul_worker w ON w.id = d.worker_id
            WHERE d.queue = \(name) AND (d.id = \(id ?? -1) OR d.path = \(path ?? "")
                OR (\(id == nil && path == nil) AND d.state = ANY(\(names)::text[])))
            ORDER BY d.id \(unescaped: ended ? "DESC" : "ASC")
            OFFSET \(Int64(max(0, offset))) LIMIT \(Int64(max(0, limit)))
            """, id == nil && path == nil ? "listing downloads" : "reading a download",
            as: (
                Int64, String, String, String, String, String?, Int32, Int32, Int64?, String?, Bool, Date, Date?,
                Date?
            ).self
        ).map { row in
            SharedDownloadRecord(
                id: row.0, url: row.1, path: row.2, host: row.3, state: SharedDownloadState(rawValue: row.4) ?? .failed,
                worker: row.5, attempt: Int(row.6), maxAttempts: Int(row.7), size: row.8, error: row.9,
                pauseRequested: row.10, enqueuedAt: row.11, startedAt: row.12, finishedAt: row.13)
        }
    }
}
