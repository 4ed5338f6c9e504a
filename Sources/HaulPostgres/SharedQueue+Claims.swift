import Foundation
import Haul
import PostgresNIO

/// A download a worker claimed: its row, and what it may use.
struct Claim: Sendable {
    let id: Int64
    /// 1 for the first attempt.
    let attempt: Int
    let path: String
    let request: DownloadRequest
    /// Attempts allowed in all.
    let maxAttempts: Int
    /// Connections the claim counted against its host (at most the request's ``DownloadRequest/maxConnections``).
    let connections: Int
}

/// How a claimed download ended, as the worker reports it.
struct Completion: Sendable {
    enum Kind: String, Sendable {
        /// Published (or skipped as already there).
        case done
        /// Failed, and another attempt may help: back to waiting after `delay`, unless attempts ran out.
        case retry
        /// Failed for good.
        case failed
        /// Not finished by this worker (it stops, or the download was cancelled here): back to waiting at once, the
        /// attempt not counted.
        case returned
        /// Handed to the worker's engine (not an end): from now the attempt counts should the worker die. A claim
        /// taken ahead and never started goes back without it (``SharedQueue/rescue(stopping:)``).
        case started
    }

    let id: Int64
    let kind: Kind
    /// The file's path, for messages (not sent).
    var path = ""
    var size: Int64 = -1
    var sha256 = ""
    var error = ""
    /// For `retry`: the wait before the next attempt.
    var delay: Duration = .zero
    /// For `retry` after a `429` or `503` with `Retry-After`: how long no worker should start a download from the
    /// host.
    var hostHold: Duration = .zero
}

/// What a heartbeat learned.
struct HeartbeatAnswer: Sendable {
    /// `false` once the worker's lease was taken (its claims went back to the queue).
    let alive: Bool
    /// Downloads of this worker that someone cancelled or paused in the database.
    let cancelled: [Int64]
    /// Every download the database says this worker holds.
    let running: [Int64]
}

extension Duration {
    /// Whole milliseconds (rounded down), as the database takes intervals; the largest (or smallest) number there is
    /// for a duration beyond it.
    var milliseconds: Int64 {
        let parts = components
        let (whole, overflow) = parts.seconds.multipliedReportingOverflow(by: 1000)
        let (total, carried) = whole.addingReportingOverflow(parts.attoseconds / 1_000_000_000_000_000)
        return overflow || carried ? (parts.seconds < 0 ? .min : .max) : total
    }
}

extension SharedQueue {
    /// Registers a worker; its lease starts now.
    func registerWorker(name workerName: String, directory: String, lease: Duration) async throws(SharedQueueError)
        -> Int64
    {
        try await ensureQueueRow()
        let rows = try await rows(
            """
            INSERT INTO haul_worker (queue, name, directory, lease_ms, machine)
            VALUES (\(name), \(workerName), \(directory), \(lease.milliseconds), \(Self.machine)) RETURNING id
            """, "registering the worker", as: (Int64).self)
        guard let id = rows.first else { throw SharedQueueError(.database, "PostgreSQL returned no worker id") }
        return id
    }

    /// This machine's name, as the fleet page shows where a worker runs.
    static let machine = ProcessInfo.processInfo.hostName

    /// Claims up to `limit` downloads for `worker` in one statement.
    ///
    /// The host rows are locked first (`SKIP LOCKED`: claims never wait for each other), so each host's `running`
    /// counter is read at its newest and raised in the same statement: the per-host limit holds across workers. A
    /// host with a minimum interval gives one download per claim and is not offered again before the interval.
    func claim(worker: Int64, limit: Int) async throws(SharedQueueError) -> [Claim] {
        let limit = Int32(clamping: limit)
        let hostLimit = Int32(clamping: Int(limit) * 2 + 16)
        let rows = try await detachedRows(
            """
            WITH claimant AS (
                -- Locked (KEY SHARE: heartbeats go on) so that a rescue cannot mark the worker lost while it claims:
                -- the rescue skips a worker being claimed for, and a claim after a rescue finds it lost.
                SELECT id FROM haul_worker WHERE id = \(worker) AND state = 'active' FOR KEY SHARE
            ), hosts AS (
                SELECT h.host, h.max_running - h.running AS free, h.min_interval_ms
                FROM haul_host h
                WHERE h.queue = \(name) AND h.ready > 0 AND h.running < h.max_running AND h.not_before <= now()
                    AND EXISTS (SELECT 1 FROM claimant)
                    -- A host whose waiting downloads all wait for a retry's time is not offered.
                    AND EXISTS (
                        SELECT 1 FROM haul_download d
                        WHERE d.queue = \(name) AND d.host = h.host AND d.state = 'waiting' AND d.run_after <= now())
                ORDER BY h.not_before, h.host
                LIMIT \(hostLimit)
                FOR UPDATE OF h SKIP LOCKED
            ), candidates AS (
                SELECT c.id, c.host, c.priority, c.conns, h.free,
                    sum(c.conns) OVER (PARTITION BY c.host ORDER BY c.priority DESC, c.id) AS used
                FROM hosts h CROSS JOIN LATERAL (
                    SELECT d.id, d.host, d.priority, least(d.connections, h.free) AS conns
                    FROM haul_download d
                    WHERE d.queue = \(name) AND d.host = h.host AND d.state = 'waiting' AND d.run_after <= now()
                    ORDER BY d.priority DESC, d.id
                    LIMIT CASE WHEN h.min_interval_ms > 0 THEN 1 ELSE least(h.free, \(limit)) END
                    FOR UPDATE OF d SKIP LOCKED
                ) c
            ), picked AS (
                SELECT id, conns FROM candidates WHERE used <= free ORDER BY priority DESC, id LIMIT \(limit)
            ), claimed AS (
                UPDATE haul_download d
                SET state = 'running', attempt = d.attempt + 1, worker_id = \(worker), granted = p.conns,
                    started_at = NULL, cancel_requested = false
                FROM picked p WHERE d.id = p.id
                RETURNING d.id, d.host, d.priority, d.attempt, d.max_attempts, d.path, d.request::text AS request,
                    d.granted
            ), counts AS (
                SELECT host, count(*)::integer AS n, sum(granted)::integer AS g FROM claimed GROUP BY host
            ), bumped AS (
                UPDATE haul_host h
                SET running = h.running + c.g, ready = h.ready - c.n,
                    -- Hosts are offered least recently served first (round robin), and not again before their
                    -- interval.
                    not_before = now() + h.min_interval_ms * interval '1 millisecond'
                FROM counts c WHERE h.queue = \(name) AND h.host = c.host
            )
            -- Handed out in this order: the priorities hold within one claim too.
            SELECT id, attempt, max_attempts, path, request, granted FROM claimed ORDER BY priority DESC, id
            """, "claiming downloads", as: (Int64, Int32, Int32, String, String, Int32).self)
        let decoder = JSONDecoder()
        var claims: [Claim] = []
        for (id, attempt, maxAttempts, path, text, granted) in rows {
            do {
                let request = try decoder.decode(DownloadRequest.self, from: Data(text.utf8))
                claims.append(
                    Claim(
                        id: id, attempt: Int(attempt), path: path, request: request, maxAttempts: Int(maxAttempts),
                        connections: Int(granted)))
            } catch {
                // A row this Haul cannot read fails for good, with the reason, rather than go round and round.
                try await complete(
                    worker: worker,
                    [Completion(id: id, kind: .failed, error: "the stored request cannot be read: \(error)")])
            }
        }
        return claims
    }

    /// Records how downloads of `worker` ended, in one statement. Only rows the worker still holds change (state
    /// `running` and its id): a worker that lost its lease has its completions refused.
    /// - Returns: The ids accepted.
    @discardableResult
    func complete(worker: Int64, _ completions: [Completion]) async throws(SharedQueueError) -> Set<Int64> {
        guard !completions.isEmpty else { return [] }
        let ids = completions.map(\.id)
        let kinds = completions.map(\.kind.rawValue)
        let sizes = completions.map(\.size)
        let hashes = completions.map(\.sha256)
        let errors = completions.map(\.error)
        let delays = completions.map(\.delay.milliseconds)
        let holds = completions.map(\.hostHold.milliseconds)
        let rows = try await detachedRows(
            """
            WITH input AS (
                SELECT * FROM unnest(\(ids)::bigint[], \(kinds)::text[], \(sizes)::bigint[], \(hashes)::text[],
                    \(errors)::text[], \(delays)::bigint[], \(holds)::bigint[])
                    AS t(id, kind, size, sha256, error, delay_ms, hold_ms)
            ), marked AS (
                -- Started: the time is kept; a download that also ends in this batch is stamped by its end instead (a
                -- row is changed once per statement).
                UPDATE haul_download d SET started_at = coalesce(d.started_at, now())
                FROM input i
                WHERE i.kind = 'started' AND d.id = i.id AND d.queue = \(name) AND d.state = 'running'
                    AND d.worker_id = \(worker)
                    AND NOT EXISTS (SELECT 1 FROM input j WHERE j.id = i.id AND j.kind <> 'started')
                RETURNING d.id
            ), held AS (
                SELECT d.id, d.host, d.granted, i.kind, i.size, i.sha256, i.error, i.delay_ms, i.hold_ms,
                    CASE
                        WHEN d.cancel_requested THEN 'cancelled'
                        WHEN i.kind = 'done' THEN 'done'
                        -- Paused while it ran: however its worker ended it, it waits for a resume, this attempt not
                        -- counted.
                        WHEN d.pause_requested THEN 'paused'
                        WHEN i.kind = 'returned' THEN 'waiting'
                        WHEN i.kind = 'retry' AND d.attempt < d.max_attempts THEN 'waiting'
                        ELSE 'failed'
                    END AS next
                FROM haul_download d JOIN input i ON i.id = d.id
                WHERE d.queue = \(name) AND d.state = 'running' AND d.worker_id = \(worker) AND i.kind <> 'started'
                ORDER BY d.id
                FOR UPDATE OF d
            ), updated AS (
                UPDATE haul_download d
                SET state = h.next,
                    attempt = CASE WHEN h.kind = 'returned' OR h.next = 'paused' THEN d.attempt - 1
                        ELSE d.attempt END,
                    worker_id = CASE WHEN h.next IN ('waiting', 'paused') THEN NULL ELSE d.worker_id END,
                    granted = 0, pause_requested = false, started_at = coalesce(d.started_at, now()),
                    run_after = CASE WHEN h.next = 'waiting'
                        THEN now() + h.delay_ms * interval '1 millisecond' ELSE d.run_after END,
                    finished_at = CASE WHEN h.next IN ('waiting', 'paused') THEN NULL ELSE now() END,
                    size = CASE WHEN h.size >= 0 THEN h.size ELSE d.size END,
                    sha256 = coalesce(nullif(h.sha256, ''), d.sha256),
                    error = CASE WHEN h.next = 'done' THEN NULL WHEN h.next = 'paused' THEN d.error
                        WHEN h.next = 'cancelled' THEN 'cancelled' ELSE coalesce(nullif(h.error, ''), d.error) END
                FROM held h WHERE d.id = h.id
                RETURNING d.id, h.host, h.granted, h.next, h.hold_ms
            ), counts AS (
                SELECT host, sum(granted)::integer AS freed,
                    count(*) FILTER (WHERE next = 'waiting')::integer AS requeued, max(hold_ms) AS hold_ms
                FROM updated GROUP BY host
            ), locked AS (
                SELECT h.host FROM haul_host h JOIN counts c ON h.queue = \(name) AND h.host = c.host
                ORDER BY h.host FOR UPDATE OF h
            ), hosts AS (
                UPDATE haul_host h
                SET running = h.running - c.freed, ready = h.ready + c.requeued,
                    not_before = greatest(h.not_before, now() + c.hold_ms * interval '1 millisecond')
                FROM counts c JOIN locked l ON l.host = c.host
                WHERE h.queue = \(name) AND h.host = c.host
            )
            SELECT id, next FROM updated UNION ALL SELECT id, 'running' FROM marked
            """, "recording finished downloads", as: (Int64, String).self)
        if rows.contains(where: { $0.1 == "waiting" }) { await notifyWorkers() }
        return Set(rows.map(\.0))
    }

    /// Renews the lease of `worker`, and tells it which of its downloads were cancelled or paused (both stop there).
    func heartbeat(worker: Int64, timeout: Duration) async throws(SharedQueueError) -> HeartbeatAnswer {
        let rows = try await rows(
            """
            WITH beat AS (
                UPDATE haul_worker SET heartbeat_at = now() WHERE id = \(worker) AND state = 'active' RETURNING id
            )
            SELECT (SELECT count(*) FROM beat)::integer,
                coalesce(array_agg(id) FILTER (WHERE cancel_requested OR pause_requested), '{}')::bigint[],
                coalesce(array_agg(id), '{}')::bigint[]
            FROM haul_download WHERE worker_id = \(worker) AND state = 'running'
            """, "renewing the lease", timeout: timeout, as: (Int32, [Int64], [Int64]).self)
        guard let (alive, cancelled, running) = rows.first else {
            return HeartbeatAnswer(alive: false, cancelled: [], running: [])
        }
        return HeartbeatAnswer(alive: alive > 0, cancelled: cancelled, running: running)
    }

    /// Takes back the claims of every worker silent past its lease (whatever queue), and of `stopping` (a worker that
    /// is stopping and has recorded every end it knows of): they go back to waiting, or fail once their attempts ran
    /// out. Rows still running for a worker that is no longer active (a claim whose answer never reached its worker)
    /// go back too. Any worker may run it; two at once take different workers.
    /// - Returns: The downloads taken back.
    @discardableResult
    func rescue(stopping: Int64 = 0) async throws(SharedQueueError) -> Int {
        let rows = try await detachedRows(
            """
            WITH dead AS (
                SELECT id, id = \(stopping) AS stopping FROM haul_worker
                WHERE state = 'active'
                    AND (id = \(stopping) OR heartbeat_at < now() - lease_ms * interval '1 millisecond')
                ORDER BY id FOR UPDATE SKIP LOCKED
            ), ended AS (
                UPDATE haul_worker w SET state = CASE WHEN dead.stopping THEN 'stopped' ELSE 'lost' END,
                    stopped_at = now()
                FROM dead WHERE w.id = dead.id
                RETURNING w.id
            ), held AS (
                SELECT d.id, d.queue, d.host, d.granted, w.name AS worker, d.started_at IS NOT NULL AS started,
                    CASE WHEN d.cancel_requested THEN 'cancelled' WHEN d.pause_requested THEN 'paused'
                        WHEN d.started_at IS NOT NULL AND d.attempt >= d.max_attempts THEN 'failed'
                        ELSE 'waiting' END AS next
                FROM haul_download d JOIN haul_worker w ON w.id = d.worker_id
                WHERE d.state = 'running'
                    AND (w.id IN (SELECT id FROM ended) OR (w.state <> 'active' AND w.id <> \(stopping)))
                ORDER BY d.id FOR UPDATE OF d SKIP LOCKED
            ), updated AS (
                UPDATE haul_download d
                SET state = h.next,
                    -- A claim its worker never started (taken ahead) does not count as an attempt.
                    attempt = CASE WHEN h.started THEN d.attempt ELSE d.attempt - 1 END,
                    worker_id = CASE WHEN h.next IN ('waiting', 'paused') THEN NULL ELSE d.worker_id END,
                    granted = 0, run_after = now(), pause_requested = false,
                    finished_at = CASE WHEN h.next IN ('waiting', 'paused') THEN NULL ELSE now() END,
                    error = CASE WHEN h.started THEN 'worker ' || h.worker || ' stopped without finishing it'
                        ELSE d.error END
                FROM held h WHERE d.id = h.id
                RETURNING h.queue, h.host, h.granted, h.next
            ), counts AS (
                SELECT queue, host, sum(granted)::integer AS freed,
                    count(*) FILTER (WHERE next = 'waiting')::integer AS requeued
                FROM updated GROUP BY queue, host
            ), locked AS (
                SELECT h.queue, h.host FROM haul_host h JOIN counts c ON h.queue = c.queue AND h.host = c.host
                ORDER BY h.queue, h.host FOR UPDATE OF h
            ), hosts AS (
                UPDATE haul_host h SET running = h.running - c.freed, ready = h.ready + c.requeued
                FROM counts c JOIN locked l ON l.queue = c.queue AND l.host = c.host
                WHERE h.queue = c.queue AND h.host = c.host
            )
            SELECT count(*)::integer FROM updated
            """, "taking back the claims of stopped and silent workers", as: (Int32).self)
        let count = Int(rows.first ?? 0)
        if count > 0 { await notifyWorkers() }
        return count
    }

    /// Marks `worker` stopped once it has recorded every end it knows of, and hands back whatever the database still
    /// has running for it.
    func stopWorker(_ worker: Int64) async throws(SharedQueueError) {
        try await rescue(stopping: worker)
    }

    /// Whether some host has a download ready and a free connection: a claim that found nothing while this holds
    /// met only hosts other claims had locked.
    func hasClaimableWork() async throws(SharedQueueError) -> Bool {
        let rows = try await rows(
            """
            SELECT EXISTS (
                SELECT 1 FROM haul_host h
                WHERE h.queue = \(name) AND h.ready > 0 AND h.running < h.max_running AND h.not_before <= now()
                    AND EXISTS (
                        SELECT 1 FROM haul_download d
                        WHERE d.queue = \(name) AND d.host = h.host AND d.state = 'waiting' AND d.run_after <= now()))
            """, "looking for claimable downloads", as: (Bool).self)
        return rows.first ?? false
    }

    /// How long until a host with work and a free connection, held back only by its minimum interval between
    /// starts (a per-host rate), may be claimed from again; `nil` when none is.
    func nextHostTurn() async throws(SharedQueueError) -> Duration? {
        let rows = try await rows(
            """
            SELECT (extract(epoch FROM min(h.not_before) - now()) * 1000)::bigint FROM haul_host h
            WHERE h.queue = \(name) AND h.ready > 0 AND h.running < h.max_running AND h.not_before > now()
            """, "looking for the next host's turn", as: (Int64?).self)
        guard let milliseconds = rows.first ?? nil else { return nil }
        return .milliseconds(max(0, milliseconds))
    }

    /// Whether anything in the queue is waiting or running (on any worker).
    func hasUnfinishedWork() async throws(SharedQueueError) -> Bool {
        let rows = try await rows(
            "SELECT coalesce(sum(ready) + sum(running), 0)::bigint FROM haul_host WHERE queue = \(name)",
            "checking for unfinished downloads", as: (Int64).self)
        return (rows.first ?? 0) > 0
    }
}
