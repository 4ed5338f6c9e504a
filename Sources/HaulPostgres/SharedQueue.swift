import Foundation
public import Logging
import HaulOperations
import PostgresNIO

/// A download queue in PostgreSQL that many workers share, on one machine or many: producers enqueue
/// downloads, ``SharedQueueWorker``s claim and run them with the whole engine, and anyone reads ``status(failures:stoppedWithin:)``.
///
/// Several named queues may live in one database (``name``); each has its own per-host settings
/// (``HostSettings``), counted across all its workers.
///
/// ```swift
/// try await SharedQueue.withQueue(DatabaseURL("postgres://haul@db.example/haul"), name: "crawl") { queue in
///     let report = try await queue.enqueue(downloads)
///     print(report.added, "added")
/// }
/// ```
public final class SharedQueue: Sendable {
    /// The queue's name (`default` unless given).
    public let name: String
    /// Where the database is (without its password in `description`).
    public let databaseURL: DatabaseURL
    let client: PostgresClient
    let logger: Logger
    /// The longest one statement may take before it is given up (a database that stopped answering).
    let statementTimeout: Duration

    private init(
        name: String, databaseURL: DatabaseURL, client: PostgresClient, logger: Logger, statementTimeout: Duration
    ) {
        self.name = name
        self.databaseURL = databaseURL
        self.client = client
        self.logger = logger
        self.statementTimeout = statementTimeout
    }

    /// Connects to the database at `url`, creates or migrates the queue's tables, runs `body` with the queue named
    /// `name`, and disconnects.
    /// - Parameters:
    ///   - url: Where the database is.
    ///   - name: The queue's name: one database holds many.
    ///   - logger: Where postgres-nio and the queue log (silent unless its handler prints).
    ///   - maximumConnections: Connections to PostgreSQL at most (a worker uses three or four).
    ///   - statementTimeout: How long one statement may take before it is given up (the database is then taken as
    ///     unreachable).
    ///   - body: What to do with the queue.
    /// - Throws: ``SharedQueueError`` (``SharedQueueError/Code/database`` when PostgreSQL cannot be reached), or what
    ///   `body` throws.
    public static func withQueue<Result: Sendable>(
        _ url: DatabaseURL, name: String = "default", logger: Logger = Logger(label: "haul.postgres"),
        maximumConnections: Int = 8, statementTimeout: Duration = .seconds(15),
        _ body: (SharedQueue) async throws -> Result
    ) async throws -> Result {
        guard !name.isEmpty, name.utf8.count <= 200, !name.utf8.contains(0) else {
            throw SharedQueueError(.invalidDownload, "queue name '\(name)' must be 1 to 200 bytes, without NUL")
        }
        // One connection first: the pool would retry an unreachable database in the background until the statement
        // timeout, where a user wants its reason at once.
        let first = try url.connectionConfiguration()
        do {
            try await Deadline.run(within: .seconds(10)) {
                let connection = try await PostgresConnection.connect(
                    on: PostgresClient.defaultEventLoopGroup.next(), configuration: first, id: 0, logger: logger
                ).get()
                try await connection.close()
            }
        } catch is Deadline.Expired {
            throw SharedQueueError(.database, "PostgreSQL: connecting to \(url): no answer within 10 seconds")
        } catch {
            throw SharedQueueError.database(error, doing: "connecting to \(url)")
        }
        var configuration = try url.clientConfiguration()
        configuration.options.maximumConnections = maximumConnections
        // A statement given up by ``Deadline`` is stopped by the server too, instead of holding its connection and
        // its locks.
        configuration.options.additionalStartupParameters = [
            ("statement_timeout", "\(statementTimeout.milliseconds)")
        ]
        configuration.options.connectTimeout = .seconds(5)
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        let queue = SharedQueue(
            name: name, databaseURL: url, client: client, logger: logger, statementTimeout: statementTimeout)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            try await queue.perform("connecting to \(url) and checking the queue's tables") {
                try await Schema.migrate(client, logger: logger)
            }
            return try await body(queue)
        }
    }

    /// Runs `operation` against the database, given up after ``statementTimeout``; any failure becomes a
    /// ``SharedQueueError`` saying what was being done.
    @discardableResult
    func perform<Value: Sendable>(
        _ what: String, timeout: Duration? = nil, _ operation: @escaping @Sendable () async throws -> Value
    ) async throws(SharedQueueError) -> Value {
        do {
            return try await Deadline.run(within: timeout ?? statementTimeout, operation)
        } catch let error as Deadline.Expired {
            throw SharedQueueError(
                .database, "PostgreSQL: \(what): no answer within \(error.duration) (\(databaseURL))")
        } catch {
            throw SharedQueueError.database(error, doing: what)
        }
    }

    /// Runs one statement and returns its rows as `Row` values, all read.
    func rows<each Column: PostgresDecodable & Sendable>(
        _ query: PostgresQuery, _ what: String, timeout: Duration? = nil, as type: (repeat each Column).Type
    ) async throws(SharedQueueError) -> [(repeat each Column)] {
        let client = client
        let logger = logger
        return try await perform(what, timeout: timeout) {
            var rows: [(repeat each Column)] = []
            for try await row in try await client.query(query, logger: logger).decode((repeat each Column).self) {
                rows.append(row)
            }
            return rows
        }
    }

    /// ``rows(_:_:timeout:as:)`` in a task of its own, which the caller's cancellation does not reach: for statements
    /// that change rows (a claim, a completion, a rescue). A cancelled query would still commit on the server while
    /// its answer was thrown away, and claimed rows would be held by a worker that never saw them.
    func detachedRows<each Column: PostgresDecodable & Sendable>(
        _ query: PostgresQuery, _ what: String, timeout: Duration? = nil, as type: (repeat each Column).Type
    ) async throws(SharedQueueError) -> [(repeat each Column)] {
        let task = Task.detached { try await self.rows(query, what, timeout: timeout, as: type) }
        do {
            return try await task.value
        } catch {
            throw SharedQueueError.database(error, doing: what)
        }
    }

    /// Runs one statement whose rows, if any, do not matter.
    func execute(_ query: PostgresQuery, _ what: String) async throws(SharedQueueError) {
        let client = client
        let logger = logger
        try await perform(what) { try await client.query(query, logger: logger) }
    }

    /// Makes sure the queue has its row (so that its settings apply to hosts added later).
    /// Throws unless the database answers a query within `timeout` (a readiness check: `/readyz`).
    public func checkReachable(within timeout: Duration = .seconds(3)) async throws(SharedQueueError) {
        let client = client
        let logger = logger
        try await perform("checking that the database answers", timeout: timeout) {
            try await client.query("SELECT 1", logger: logger)
        }
    }

    func ensureQueueRow() async throws(SharedQueueError) {
        try await execute(
            "INSERT INTO haul_queue (name) VALUES (\(name)) ON CONFLICT (name) DO NOTHING", "registering the queue")
    }

    /// Wakes workers waiting for downloads (one notification per change, never one per row).
    func notifyWorkers() async {
        try? await execute("SELECT pg_notify(\(Self.wakeChannel), \(name))", "waking the workers")
    }

    /// The channel workers LISTEN on; the payload is the queue's name.
    static let wakeChannel = "haul_ready"
}
