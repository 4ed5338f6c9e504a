import ArgumentParser
import Foundation
import HaulPostgres
import Logging

/// `--db` and `--queue`, shared by `haul enqueue`, `worker`, `status` and `queue`.
struct DatabaseOptions: ParsableArguments {
    @Option(
        name: .customLong("db"),
        help: ArgumentHelp(
            "The PostgreSQL database of the shared queue: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
                + "[?sslmode=disable|prefer|require|verify-ca|verify-full&sslrootcert=FILE] (default: "
                + "$HAUL_DATABASE_URL, which keeps a password out of `ps`; or give it in $PGPASSWORD). Haul creates "
                + "and migrates its tables.",
            valueName: "URL"))
    var database: String?

    @Option(
        name: .customLong("queue"),
        help: ArgumentHelp("The queue's name: one database holds many (default: default).", valueName: "NAME"))
    var queue = "default"

    /// The database URL of `--db` or `HAUL_DATABASE_URL`, parsed.
    func databaseURL(environment: [String: String] = ProcessInfo.processInfo.environment) throws(UsageFailure)
        -> DatabaseURL
    {
        guard let text = database ?? environment["HAUL_DATABASE_URL"], !text.isEmpty else {
            throw UsageFailure(
                [InputProblem(origin: "--db", message: "no database given: pass --db URL or set HAUL_DATABASE_URL")],
                summary: "nothing was done")
        }
        do {
            var url = try DatabaseURL(text)
            if url.password == nil, let password = environment["PGPASSWORD"], !password.isEmpty {
                url.password = password
            }
            return url
        } catch {
            throw UsageFailure(
                [InputProblem(origin: database == nil ? "HAUL_DATABASE_URL" : "--db", message: error.message)],
                summary: "nothing was done")
        }
    }

    /// Reports a missing or bad database URL (exit 2) before the command reads its input or opens anything.
    func checkURL() throws(UsageFailure) {
        _ = try databaseURL()
    }

    /// Connects to the queue, runs `body` with it, and disconnects. A database that cannot be reached or refuses a
    /// statement ends the command with its message and exit status 1.
    func withQueue<Result: Sendable>(
        maximumConnections: Int = 4, _ body: (SharedQueue) async throws -> Result
    ) async throws -> Result {
        let url = try databaseURL()
        do {
            return try await SharedQueue.withQueue(
                url, name: queue, logger: Logger(label: "haul.postgres", factory: { _ in SwiftLogNoOpLogHandler() }),
                maximumConnections: maximumConnections, body)
        } catch let error as SharedQueueError {
            Console.err("haul: \(error.message)\n")
            throw ExitCode(1)
        }
    }
}
