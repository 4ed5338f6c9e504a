import Foundation
import Haul
import PostgresNIO

/// What the queue's hosts may take, across all workers together.
public struct HostSettings: Sendable, Hashable {
    /// Connections to one host at once, all workers together (`nil`: no limit). A download split over N connections
    /// counts N.
    public var maxConnectionsPerHost: Int?
    /// The least time between the starts of two downloads from one host, all workers together (zero: none).
    public var minimumInterval: Duration

    /// Creates settings.
    public init(maxConnectionsPerHost: Int? = nil, minimumInterval: Duration = .zero) {
        self.maxConnectionsPerHost = maxConnectionsPerHost
        self.minimumInterval = minimumInterval
    }

    /// Refuses a limit under which no download could ever be claimed.
    func check() throws(SharedQueueError) {
        if let limit = maxConnectionsPerHost, limit < 1 {
            throw SharedQueueError(
                .invalidDownload, "the per-host limit must be at least 1 connection (nil for none), not \(limit)")
        }
    }

    /// The interval in whole milliseconds, as the database keeps it.
    var intervalMilliseconds: Int64 { minimumInterval.milliseconds }
}

/// What an enqueue did.
public struct EnqueueReport: Sendable, Hashable {
    /// Downloads added to the queue.
    public var added = 0
    /// Downloads that were in the queue already (the same URL at the same path, or the same resource still running
    /// or done), left as they were.
    public var alreadyQueued = 0
    /// Downloads queued already for the same resource under another query (a signed or expiring URL's new token),
    /// waiting, failed or cancelled: they take the new URL, and the failed or cancelled ones wait again. A worker
    /// resumes what its journal has of the file, whatever URL left it.
    public var renewed = 0
}

extension SharedQueue {
    /// Rows sent to the database per statement while a list is enqueued.
    static let enqueueChunk = 5_000

    /// Adds `downloads` to the queue, all or none, in one transaction. A download whose path is queued already for
    /// the same URL is left as it is (enqueueing a list twice adds nothing the second time); for a URL that differs
    /// only in its query (a new token) it is renewed (``EnqueueReport/renewed``) unless it is running or done; for
    /// another URL, nothing is added and the error names both, also when another enqueue running at the same time
    /// gave that URL. Wakes the workers once.
    /// - Parameters:
    ///   - downloads: The downloads, read once, as the transaction goes (a list of any length).
    ///   - hostSettings: Settings for the queue's hosts from now on (those of ``setHostSettings(_:)``).
    ///   - paused: Whether the downloads added are paused from the start (``resume(_:)`` lets them run): no worker
    ///     can claim one first. Downloads queued already keep their state.
    /// - Throws: ``SharedQueueError`` (``SharedQueueError/Code/conflict`` for a path queued for another URL;
    ///   ``SharedQueueError/Code/invalidDownload`` for a per-host limit below 1).
    @discardableResult
    public func enqueue<Downloads: AsyncSequence & Sendable>(
        _ downloads: Downloads, hostSettings: HostSettings? = nil, paused: Bool = false
    ) async throws -> EnqueueReport where Downloads.Element == SharedDownload {
        try hostSettings?.check()
        try await ensureQueueRow()
        let queueName = name
        let logger = logger
        let report = try await perform("enqueueing", timeout: .seconds(86_400)) {
            try await self.client.withTransaction(logger: logger) { connection in
                // The input is read inside the transaction, at whatever pace it comes.
                try await connection.query("SET LOCAL statement_timeout = 0", logger: logger)
                try await connection.query(
                    """
                    CREATE TEMPORARY TABLE haul_incoming (
                        ordinal bigint, url text, path text, host text, request text, priority integer,
                        connections integer, max_attempts integer
                    ) ON COMMIT DROP
                    """, logger: logger)
                var chunk = Chunk()
                var ordinal: Int64 = 0
                for try await download in downloads {
                    chunk.append(download, ordinal: ordinal)
                    ordinal += 1
                    if chunk.count == Self.enqueueChunk {
                        try await chunk.stage(on: connection, logger: logger)
                        chunk = Chunk()
                    }
                }
                try await chunk.stage(on: connection, logger: logger)
                // Enqueues into one queue take turns from here to their commit (claims never take this lock): two
                // lists sharing a path would each pass the conflict check unseen by the other, and insert shared paths
                // in opposite orders into the unique index (a deadlock). The input was read before, without it.
                try await connection.query(
                    "SELECT 1 FROM haul_queue WHERE name = \(queueName) FOR NO KEY UPDATE", logger: logger)
                try await Self.checkConflicts(queueName, on: connection, logger: logger)
                let renewed = try await Self.renew(queueName, on: connection, logger: logger)
                // Last: the host rows stay locked until the commit, which follows at once (claims skip them meanwhile).
                if let hostSettings {
                    try await Self.apply(hostSettings, to: queueName, on: connection, logger: logger)
                }
                var report = EnqueueReport(renewed: renewed)
                let rows = try await connection.query(
                    """
                    WITH settings AS (
                        SELECT coalesce(per_host, 2147483647) AS max_running, per_host_interval_ms
                        FROM haul_queue WHERE name = \(queueName)
                    ), added AS (
                        INSERT INTO haul_download (
                            queue, url, path, host, request, priority, connections, max_attempts, state)
                        SELECT \(queueName), url, path, host, request::jsonb, priority, connections, max_attempts,
                            \(paused ? "paused" : "waiting")
                        FROM (SELECT DISTINCT ON (path) * FROM haul_incoming ORDER BY path, ordinal) first
                        ORDER BY ordinal
                        ON CONFLICT (queue, path) DO NOTHING
                        RETURNING host
                    ), counts AS (
                        -- Paused downloads are not ready: their host row is made, counting none.
                        SELECT host, CASE WHEN \(paused) THEN 0 ELSE count(*)::integer END AS n FROM added GROUP BY host
                    ), hosts AS (
                        INSERT INTO haul_host (queue, host, max_running, min_interval_ms, ready)
                        SELECT \(queueName), c.host, s.max_running, s.per_host_interval_ms, c.n
                        FROM counts c CROSS JOIN settings s ORDER BY c.host
                        ON CONFLICT (queue, host) DO UPDATE SET ready = haul_host.ready + excluded.ready
                    )
                    SELECT (SELECT count(*) FROM added)::bigint, (SELECT count(*) FROM haul_incoming)::bigint
                    """, logger: logger)
                for try await (added, total) in rows.decode((Int64, Int64).self) {
                    report.added = Int(added)
                    report.alreadyQueued = Int(total - added) - renewed
                }
                return report
            }
        }
        if (report.added > 0 && !paused) || report.renewed > 0 { await notifyWorkers() }
        logger.info(
            "enqueued",
            metadata: [
                "added": "\(report.added)", "renewed": "\(report.renewed)", "queued before": "\(report.alreadyQueued)",
            ])
        return report
    }

    /// Adds `downloads` to the queue, all or none, as the sequence form does.
    @discardableResult
    public func enqueue(
        _ downloads: [SharedDownload], hostSettings: HostSettings? = nil, paused: Bool = false
    ) async throws -> EnqueueReport {
        try await enqueue(Downloads(items: downloads), hostSettings: hostSettings, paused: paused)
    }

    /// Changes the queue's per-host settings, for the hosts it has and those it gets later.
    /// - Throws: ``SharedQueueError`` (``SharedQueueError/Code/invalidDownload`` for a per-host limit below 1).
    public func setHostSettings(_ settings: HostSettings) async throws {
        try settings.check()
        try await ensureQueueRow()
        let queueName = name
        let logger = logger
        try await perform("changing the per-host settings") {
            try await self.client.withTransaction(logger: logger) { connection in
                try await Self.apply(settings, to: queueName, on: connection, logger: logger)
            }
        }
        await notifyWorkers()
    }

    /// The queue's per-host settings (those of a new queue: no limit, no interval).
    public func hostSettings() async throws -> HostSettings {
        let rows = try await rows(
            "SELECT per_host, per_host_interval_ms FROM haul_queue WHERE name = \(name)",
            "reading the per-host settings",
            as: (Int32?, Int64).self)
        guard let (perHost, interval) = rows.first else { return HostSettings() }
        return HostSettings(maxConnectionsPerHost: perHost.map(Int.init), minimumInterval: .milliseconds(interval))
    }

    private static func apply(
        _ settings: HostSettings, to queue: String, on connection: PostgresConnection, logger: Logger
    ) async throws {
        let perHost = settings.maxConnectionsPerHost.map(Int32.init(clamping:))
        let interval = settings.intervalMilliseconds
        try await connection.query(
            "UPDATE haul_queue SET per_host = \(perHost), per_host_interval_ms = \(interval) WHERE name = \(queue)",
            logger: logger)
        try await connection.query(
            """
            WITH locked AS (SELECT host FROM haul_host WHERE queue = \(queue) ORDER BY host FOR UPDATE)
            UPDATE haul_host h SET max_running = coalesce(\(perHost), 2147483647), min_interval_ms = \(interval)
            FROM locked l WHERE h.queue = \(queue) AND h.host = l.host
            """, logger: logger)
    }

    /// Gives the downloads queued for the same resource under another query (the URL up to its `?` is the same) the
    /// new URL: a waiting or paused one keeps its state, place and attempts, a failed or cancelled one waits again
    /// from its first attempt (its host counts it as ready again). A running or done one is left as it is. Returns
    /// how many.
    private static func renew(_ queue: String, on connection: PostgresConnection, logger: Logger) async throws -> Int {
        let rows = try await connection.query(
            """
            WITH incoming AS (
                SELECT DISTINCT ON (path) path, url, request FROM haul_incoming ORDER BY path, ordinal
            ), chosen AS (
                SELECT d.id, d.state AS was, i.url, i.request FROM haul_download d
                JOIN incoming i ON d.queue = \(queue) AND d.path = i.path
                WHERE d.url <> i.url AND split_part(d.url, '?', 1) = split_part(i.url, '?', 1)
                    AND d.state IN ('waiting', 'paused', 'failed', 'cancelled')
                ORDER BY d.id FOR UPDATE OF d
            ), renewed AS (
                UPDATE haul_download d SET url = c.url, request = c.request::jsonb,
                    state = CASE WHEN c.was = 'paused' THEN 'paused' ELSE 'waiting' END,
                    attempt = CASE WHEN c.was IN ('waiting', 'paused') THEN d.attempt ELSE 0 END,
                    run_after = CASE WHEN c.was IN ('waiting', 'paused') THEN d.run_after ELSE now() END,
                    error = NULL, finished_at = NULL, worker_id = NULL
                FROM chosen c WHERE d.id = c.id
                RETURNING d.host, c.was
            ), counts AS (
                SELECT host, count(*)::integer AS n FROM renewed WHERE was NOT IN ('waiting', 'paused') GROUP BY host
            ), locked AS (
                SELECT h.host FROM haul_host h JOIN counts c ON h.queue = \(queue) AND h.host = c.host
                ORDER BY h.host FOR UPDATE OF h
            ), hosts AS (
                UPDATE haul_host h SET ready = h.ready + c.n
                FROM counts c JOIN locked l ON l.host = c.host WHERE h.queue = \(queue) AND h.host = c.host
            )
            SELECT count(*)::integer FROM renewed
            """, logger: logger)
        var count = 0
        for try await renewed in rows.decode(Int32.self) { count = Int(renewed) }
        return count
    }

    /// Refuses a list in which one path would be written from two URLs, or which gives a queued path the URL of
    /// another resource (a URL that differs only in its query is the same resource: ``renew(_:on:logger:)``).
    private static func checkConflicts(_ queue: String, on connection: PostgresConnection, logger: Logger) async throws
    {
        var problems: [String] = []
        let inList = try await connection.query(
            """
            SELECT path, min(url), max(url) FROM haul_incoming GROUP BY path HAVING count(DISTINCT url) > 1
            ORDER BY min(ordinal) LIMIT 20
            """, logger: logger)
        for try await (path, first, second) in inList.decode((String, String, String).self) {
            problems.append("path '\(path)' is given for two URLs: '\(first)' and '\(second)'")
        }
        let inQueue = try await connection.query(
            """
            SELECT i.path, i.url, d.url FROM haul_incoming i
            JOIN haul_download d ON d.queue = \(queue) AND d.path = i.path
            WHERE split_part(d.url, '?', 1) <> split_part(i.url, '?', 1) ORDER BY i.ordinal LIMIT 20
            """, logger: logger)
        for try await (path, url, queued) in inQueue.decode((String, String, String).self) {
            problems.append("path '\(path)' is queued already for '\(queued)', not '\(url)'")
        }
        guard problems.isEmpty else {
            throw SharedQueueError(
                .conflict, "nothing was enqueued: " + problems.joined(separator: "; "))
        }
    }

    /// Rows gathered for one statement.
    private struct Chunk {
        var ordinals: [Int64] = []
        var urls: [String] = []
        var paths: [String] = []
        var hosts: [String] = []
        var requests: [String] = []
        var priorities: [Int32] = []
        var connections: [Int32] = []
        var attempts: [Int32] = []
        var count: Int { ordinals.count }
        private let encoder = JSONEncoder()

        mutating func append(_ download: SharedDownload, ordinal: Int64) {
            var request = download.request
            // Each worker gives it its own place: what is stored must not name a directory of the producer's.
            request.destination = .file(URL(fileURLWithPath: "/"))
            ordinals.append(ordinal)
            urls.append(download.request.url.absoluteString)
            paths.append(download.path)
            hosts.append(download.hostKey)
            // DownloadRequest encodes to JSON without failing: it holds strings, numbers and URLs only.
            requests.append((try? encoder.encode(request)).map { String(decoding: $0, as: UTF8.self) } ?? "{}")
            priorities.append(Int32(clamping: download.request.priority))
            connections.append(Int32(clamping: max(1, download.request.maxConnections)))
            attempts.append(Int32(clamping: download.maxAttempts))
        }

        func stage(on connection: PostgresConnection, logger: Logger) async throws {
            guard count > 0 else { return }
            try await connection.query(
                """
                INSERT INTO haul_incoming
                SELECT * FROM unnest(\(ordinals)::bigint[], \(urls)::text[], \(paths)::text[], \(hosts)::text[],
                    \(requests)::text[], \(priorities)::integer[], \(connections)::integer[], \(attempts)::integer[])
                """, logger: logger)
        }
    }

    /// An array as an `AsyncSequence`.
    private struct Downloads: AsyncSequence, Sendable {
        let items: [SharedDownload]
        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(items: items) }

        struct AsyncIterator: AsyncIteratorProtocol {
            let items: [SharedDownload]
            var index = 0
            mutating func next() async -> SharedDownload? {
                guard index < items.count else { return nil }
                defer { index += 1 }
                return items[index]
            }
        }
    }
}
