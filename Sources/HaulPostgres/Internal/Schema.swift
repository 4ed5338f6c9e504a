import Logging
import PostgresNIO

/// The tables of the shared queue, created and migrated by Haul: `haul_schema` holds the version, and each migration
/// runs once, in a transaction, under an advisory lock (two workers starting at once do not both migrate).
///
/// - `haul_queue`: one row per queue name, with its per-host settings and attempts.
/// - `haul_host`: one row per queue and host (origin). `running` and `ready` live on the row the claim locks, so the
///   per-host limit holds across workers (a `count(*)` in the claim would read an old snapshot and let two claims
///   both take the last slot).
/// - `haul_worker`: one row per worker run; `heartbeat_at` is its lease.
/// - `haul_download`: one row per file, unique by queue and path. Partial indexes keep the waiting and running sets
///   small to scan however many rows are done.
///
/// Version 2 adds pausing (`paused` downloads, and `pause_requested` for a running one, which its worker stops at its
/// next heartbeat) and each worker's machine (`haul daemon`'s fleet page shows where a worker runs).
enum Schema {
    /// The newest version this Haul knows.
    static let version = 2

    private static let migrations: [[PostgresQuery]] = [
        // Version 1.
        [
            """
            CREATE TABLE haul_queue (
                name text PRIMARY KEY,
                per_host integer,
                per_host_interval_ms bigint NOT NULL DEFAULT 0,
                created_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            """
            CREATE TABLE haul_worker (
                id bigserial PRIMARY KEY,
                queue text NOT NULL,
                name text NOT NULL,
                directory text NOT NULL,
                lease_ms bigint NOT NULL,
                state text NOT NULL DEFAULT 'active',
                started_at timestamptz NOT NULL DEFAULT now(),
                heartbeat_at timestamptz NOT NULL DEFAULT now(),
                stopped_at timestamptz
            )
            """,
            "CREATE INDEX haul_worker_active ON haul_worker (heartbeat_at) WHERE state = 'active'",
            """
            CREATE TABLE haul_host (
                queue text NOT NULL,
                host text NOT NULL,
                max_running integer NOT NULL,
                min_interval_ms bigint NOT NULL DEFAULT 0,
                not_before timestamptz NOT NULL DEFAULT '-infinity',
                ready integer NOT NULL DEFAULT 0,
                running integer NOT NULL DEFAULT 0,
                PRIMARY KEY (queue, host)
            ) WITH (fillfactor = 50)
            """,
            """
            CREATE TABLE haul_download (
                id bigserial PRIMARY KEY,
                queue text NOT NULL,
                url text NOT NULL,
                path text NOT NULL,
                host text NOT NULL,
                request jsonb NOT NULL,
                priority integer NOT NULL DEFAULT 0,
                connections integer NOT NULL DEFAULT 1,
                state text NOT NULL DEFAULT 'waiting',
                attempt integer NOT NULL DEFAULT 0,
                max_attempts integer NOT NULL,
                run_after timestamptz NOT NULL DEFAULT now(),
                worker_id bigint REFERENCES haul_worker (id),
                granted integer NOT NULL DEFAULT 0,
                cancel_requested boolean NOT NULL DEFAULT false,
                enqueued_at timestamptz NOT NULL DEFAULT now(),
                started_at timestamptz,
                finished_at timestamptz,
                size bigint,
                sha256 text,
                error text,
                UNIQUE (queue, path)
            ) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0)
            """,
            """
            CREATE INDEX haul_download_waiting ON haul_download (queue, host, priority DESC, id)
                WHERE state = 'waiting'
            """,
            "CREATE INDEX haul_download_running ON haul_download (worker_id) WHERE state = 'running'",
            "CREATE INDEX haul_download_failed ON haul_download (queue, id) WHERE state = 'failed'",
            """
            CREATE INDEX haul_download_finished ON haul_download (queue, finished_at)
                WHERE finished_at IS NOT NULL
            """,
        ],
        // Version 2.
        [
            "ALTER TABLE haul_download ADD COLUMN pause_requested boolean NOT NULL DEFAULT false",
            "ALTER TABLE haul_worker ADD COLUMN machine text NOT NULL DEFAULT ''",
            "CREATE INDEX haul_download_paused ON haul_download (queue, id) WHERE state = 'paused'",
        ],
    ]

    /// Brings the database to ``version``.
    /// - Throws: ``SharedQueueError/Code/schema`` when the database is newer than this Haul.
    static func migrate(_ client: PostgresClient, logger: Logger) async throws {
        try await client.withTransaction(logger: logger) { connection in
            // Any constant will do, as long as it is Haul's: the lock is released at COMMIT.
            try await connection.query("SELECT pg_advisory_xact_lock(7240917031)", logger: logger)
            try await connection.query(
                "CREATE TABLE IF NOT EXISTS haul_schema (version integer NOT NULL)", logger: logger)
            var current = 0
            for try await (value) in try await connection.query(
                "SELECT version FROM haul_schema", logger: logger
            ).decode(Int.self) {
                current = value
            }
            if current > version {
                throw SharedQueueError(
                    .schema,
                    "the database's queue schema is version \(current), newer than this haul knows (\(version)): "
                        + "upgrade haul")
            }
            guard current < version else { return }
            for migration in migrations[current...] {
                for statement in migration { try await connection.query(statement, logger: logger) }
            }
            if current == 0 {
                try await connection.query("INSERT INTO haul_schema (version) VALUES (\(version))", logger: logger)
            } else {
                try await connection.query("UPDATE haul_schema SET version = \(version)", logger: logger)
            }
            logger.info("queue schema migrated", metadata: ["from": "\(current)", "to": "\(version)"])
        }
    }
}
