public import Foundation
import Haul
import HaulNIOSupport
import PostgresNIO

/// What went wrong with the shared queue: a code, and a message that says what happened and what to do.
public struct SharedQueueError: Error, Sendable, CustomStringConvertible, LocalizedError {
    /// What kind of failure this is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        enum Value: String {
            case invalidDatabaseURL, database, invalidDownload, conflict, schema, leaseLost
        }
        let value: Value
        init(_ value: Value) { self.value = value }

        /// The `--db` URL (or `HAUL_DATABASE_URL`) is not one Haul can use.
        public static let invalidDatabaseURL = Code(.invalidDatabaseURL)
        /// PostgreSQL could not be reached, or refused a statement.
        public static let database = Code(.database)
        /// A download cannot go into the queue as it is (a path leaving the directory, credentials).
        public static let invalidDownload = Code(.invalidDownload)
        /// A download's path is already queued for another URL.
        public static let conflict = Code(.conflict)
        /// The database's schema is newer than this Haul knows.
        public static let schema = Code(.schema)
        /// The worker's lease ran out: its claims went back to the queue.
        public static let leaseLost = Code(.leaseLost)

        /// The code's name.
        public var description: String { value.rawValue }
    }

    /// What kind of failure this is.
    public let code: Code
    /// What happened, in words.
    public let message: String
    /// The error underneath (a `PSQLError`, for ``Code/database``).
    public var underlying: (any Error)?

    /// Creates an error.
    public init(_ code: Code, _ message: String, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    /// The message.
    public var description: String { message }
    /// Same as ``description``.
    public var errorDescription: String? { message }

    /// `error` from postgres-nio in words: the server's own message where it sent one (a `PSQLError` prints only its
    /// code otherwise), the connection failure, or the error itself.
    static func database(_ error: any Error, doing what: String) -> SharedQueueError {
        if let error = error as? SharedQueueError { return error }
        if let transaction = error as? PostgresTransactionError, let inner = transaction.closureError {
            if let inner = inner as? SharedQueueError { return inner }
            // What the caller's own code threw inside the transaction (a sequence of downloads that failed) is
            // kept as it was, for the caller to find in ``underlying``.
            if !(inner is PSQLError) {
                return SharedQueueError(.database, "\(what): \(inner)", underlying: inner)
            }
        }
        return SharedQueueError(.database, "PostgreSQL: \(what): \(reason(error))", underlying: error)
    }

    /// The reason `error` gives, in words.
    static func reason(_ error: any Error) -> String {
        if let error = error as? SharedQueueError { return error.message }
        if let transaction = error as? PostgresTransactionError {
            let inner: (any Error)? =
                transaction.closureError ?? transaction.beginError ?? transaction.commitError
                ?? transaction.rollbackError
            return inner.map(reason) ?? "the transaction failed"
        }
        guard let psql = error as? PSQLError else { return "\(error)" }
        if let info = psql.serverInfo, let message = info[.message] {
            let state = info[.sqlState].map { " (SQLSTATE \($0))" } ?? ""
            return message + state
        }
        switch psql.code {
        case .sslUnsupported:
            return "the server does not offer TLS, which sslmode=require (or verify-ca, verify-full) asks for"
        case .connectionError:
            // In the words `haul get` uses for a server it cannot reach.
            let reason = psql.underlying.map { ReadableFailure.ofConnection($0)?.message ?? "\($0)" }
            return "cannot connect: \(reason ?? "connection failed")"
        default:
            if let underlying = psql.underlying { return "\(psql.code): \(underlying)" }
            return "\(psql.code)"
        }
    }

    /// The SQLSTATE of a server error, if `error` is one.
    static func sqlState(_ error: any Error) -> String? {
        if let transaction = error as? PostgresTransactionError, let inner = transaction.closureError {
            return sqlState(inner)
        }
        return (error as? PSQLError)?.serverInfo?[.sqlState]
    }
}
