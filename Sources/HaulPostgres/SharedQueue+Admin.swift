import Foundation
import Haul
import PostgresNIO

/// Which downloads ``SharedQueue/cancel(_:)`` cancels.
public enum CancelSelection: Sendable, Hashable {
    /// Every download of this URL.
    case url(String)
    /// Every download from this host (a host name, or an origin such as `https://example.org:443`).
    case host(String)
    /// Every download not finished.
    case all
    /// These downloads (their ``SharedDownloadRecord/id``s).
    case ids([Int64])
}

extension SharedQueue {
    /// Puts every failed download back to waiting, its attempts counted from zero.
    /// - Returns: How many.
    @discardableResult
    public func retryFailed() async throws -> Int {
        try await retry(ids: nil)
    }

    /// Puts the downloads `ids` names back to waiting if they failed or were cancelled, their attempts counted from
    /// zero; the others are left as they are.
    /// - Returns: How many were put back.
    @discardableResult
    public func retry(_ ids: [Int64]) async throws -> Int {
        try await retry(ids: ids)
    }

    /// Every failed download when `ids` is `nil`; else the failed or cancelled ones it names.
    private func retry(ids: [Int64]?) async throws(SharedQueueError) -> Int {
        let all = ids == nil
        let chosen = ids ?? []
        let rows = try await rows(
            """
            WITH retried AS (
                UPDATE haul_download SET state = 'waiting', attempt = 0, error = NULL, finished_at = NULL,
                    worker_id = NULL, run_after = now(), cancel_requested = false, pause_requested = false
                WHERE queue = \(name)
                    AND (state = 'failed' OR (NOT \(all) AND state = 'cancelled'))
                    AND (\(all) OR id = ANY(\(chosen)::bigint[]))
                RETURNING host
            ), counts AS (
                SELECT host, count(*)::integer AS n FROM retried GROUP BY host
            ), locked AS (
                SELECT h.host FROM haul_host h JOIN counts c ON h.queue = \(name) AND h.host = c.host
                ORDER BY h.host FOR UPDATE OF h
            ), hosts AS (
                UPDATE haul_host h SET ready = h.ready + c.n
                FROM counts c JOIN locked l ON l.host = c.host WHERE h.queue = \(name) AND h.host = c.host
            )
            SELECT count(*)::integer FROM retried
            """, "putting failed downloads back", as: (Int32).self)
        let count = Int(rows.first ?? 0)
        if count > 0 { await notifyWorkers() }
        return count
    }

    /// Cancels downloads: waiting and paused ones at once; running ones are stopped by their workers at their next
    /// heartbeat (their connections count against the host until then). The claims of workers silent past their
    /// lease are taken back first (as a worker's rescue does): with no worker left, what they held is cancelled too.
    /// - Returns: How many downloads were cancelled or asked to stop.
    @discardableResult
    public func cancel(_ selection: CancelSelection) async throws -> Int {
        try await rescue()
        let (url, host, all, ids): (String, String, Bool, [Int64]) =
            switch selection {
            case .url(let url): (url, "", false, [])
            case .host(let host): ("", Self.hostKey(host), false, [])
            case .all: ("", "", true, [])
            case .ids(let ids): ("", "", false, ids)
            }
        let rows = try await rows(
            """
            WITH chosen AS (
                SELECT id, host, state FROM haul_download
                WHERE queue = \(name) AND state IN ('waiting', 'paused', 'running')
                    AND (\(all) OR url = \(url) OR host = \(host) OR id = ANY(\(ids)::bigint[])
                        OR (\(host) <> '' AND \(host) NOT LIKE '%://%'
                            AND regexp_replace(host, '^[^:]*://(.*):[0-9]+$', '\\1') = \(host)))
                ORDER BY id FOR UPDATE
            ), waiting AS (
                UPDATE haul_download d SET state = 'cancelled', finished_at = now(), error = 'cancelled'
                FROM chosen c WHERE d.id = c.id AND c.state IN ('waiting', 'paused')
                RETURNING d.host, c.state AS was
            ), running AS (
                UPDATE haul_download d SET cancel_requested = true
                FROM chosen c WHERE d.id = c.id AND c.state = 'running'
                RETURNING d.id
            ), counts AS (
                -- Paused downloads were not counted as ready.
                SELECT host, count(*)::integer AS n FROM waiting WHERE was = 'waiting' GROUP BY host
            ), locked AS (
                SELECT h.host FROM haul_host h JOIN counts c ON h.queue = \(name) AND h.host = c.host
                ORDER BY h.host FOR UPDATE OF h
            ), hosts AS (
                UPDATE haul_host h SET ready = h.ready - c.n
                FROM counts c JOIN locked l ON l.host = c.host WHERE h.queue = \(name) AND h.host = c.host
            )
            SELECT ((SELECT count(*) FROM waiting) + (SELECT count(*) FROM running))::integer
            """, "cancelling downloads", as: (Int32).self)
        return Int(rows.first ?? 0)
    }

    /// What ``CancelSelection/host(_:)`` is matched with: an origin as the queue keys its hosts (its default port
    /// filled in), or a host name as the keys hold it (lowercased; an IPv6 address without its brackets).
    static func hostKey(_ given: String) -> String {
        let text = given.trimmingCharacters(in: .whitespaces)
        if text.contains("://") {
            guard let url = URL(string: text), url.host != nil else { return text.lowercased() }
            return DownloadRequest.originKey(for: url)
        }
        let name = text.hasPrefix("[") && text.hasSuffix("]") ? String(text.dropFirst().dropLast()) : text
        return name.lowercased()
    }

    /// Deletes the rows of downloads that ended (done, failed or cancelled) more than `age` ago, and the stopped
    /// workers no row names any more.
    /// - Returns: How many downloads were deleted.
    @discardableResult
    public func purge(olderThan age: Duration) async throws -> Int {
        let milliseconds = age.milliseconds
        let rows = try await rows(
            """
            WITH purged AS (
                DELETE FROM haul_download
                WHERE queue = \(name) AND state IN ('done', 'failed', 'cancelled')
                    AND finished_at < now() - \(milliseconds) * interval '1 millisecond'
                RETURNING 1
            )
            SELECT count(*)::integer FROM purged
            """, "purging finished downloads", as: (Int32).self)
        try await execute(
            """
            DELETE FROM haul_worker w WHERE w.queue = \(name) AND w.state <> 'active'
                AND w.stopped_at < now() - \(milliseconds) * interval '1 millisecond'
                AND NOT EXISTS (SELECT 1 FROM haul_download d WHERE d.worker_id = w.id)
            """, "purging stopped workers")
        return Int(rows.first ?? 0)
    }
}
