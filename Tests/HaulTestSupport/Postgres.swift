import Foundation
import HaulOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Debian's PostgreSQL 15 on a free loopback port, in a temporary directory of its own, started and stopped by a
/// test: `initdb` (trust authentication, user `haul`), then the server in the foreground (fsync off: the tests
/// kill and restart it, they do not pull the power; commits are still written before they are acknowledged).
///
/// PostgreSQL refuses to run as root, so under root both run as the `postgres` user (`setpriv`, which execs: the
/// process a test signals is the server itself).
package final class PostgresServer: Sendable {
    /// The port it listens on (127.0.0.1).
    package let port: Int
    private let directory: String
    private let process: Locked<ChildProcess?>

    /// `postgres://haul@127.0.0.1:PORT/postgres?sslmode=disable`.
    package var url: String { "postgres://haul@127.0.0.1:\(port)/postgres?sslmode=disable" }

    /// Makes a cluster and starts the server.
    /// - Throws: ``FixtureError`` when PostgreSQL 15 is not installed (`scripts/test` installs it) or does not start.
    /// With `tls` (a certificate and its key, PEM), the server offers TLS with them (`ssl=on`).
    package init(extraSettings: [String] = [], tls: (certificatePEM: String, keyPEM: String)? = nil) async throws {
        let bin = "/usr/lib/postgresql/15/bin"
        _ = try installedBinary("postgres", package: "postgresql-15", at: [bin + "/postgres"])
        let directory = try makeDirectory("postgres")
        self.directory = directory
        if getuid() == 0 {
            guard let user = getpwnam("postgres") else {
                throw FixtureError("there is no 'postgres' user to run PostgreSQL as (it refuses root)")
            }
            chown(directory, user.pointee.pw_uid, user.pointee.pw_gid)
        }
        let initdb = try Self.spawn(
            bin + "/initdb",
            ["-D", directory + "/data", "-A", "trust", "-U", "haul", "--no-sync", "-E", "UTF8", "--locale=C"])
        let made = await initdb.finish()
        guard made.status == 0 else { throw FixtureError("initdb failed (\(made.status)): \(made.stderr)") }
        var settings = extraSettings
        if let tls {
            let data = directory + "/data"
            try Data(tls.certificatePEM.utf8).write(to: URL(fileURLWithPath: data + "/server.crt"))
            try Data(tls.keyPEM.utf8).write(to: URL(fileURLWithPath: data + "/server.key"))
            for file in ["server.crt", "server.key"] {
                chmod(data + "/" + file, 0o600)
                if getuid() == 0, let user = getpwnam("postgres") {
                    chown(data + "/" + file, user.pointee.pw_uid, user.pointee.pw_gid)
                }
            }
            settings += ["ssl=on", "ssl_cert_file=server.crt", "ssl_key_file=server.key"]
        }
        let (port, server) = try await startOnFreePort(
            "postgres", log: { (try? String(contentsOfFile: directory + "/log", encoding: .utf8)) ?? "" },
            launch: { port in try Self.launch(bin: bin, directory: directory, port: port, settings: settings) },
            cleanUp: { try? FileManager.default.removeItem(atPath: directory) })
        self.port = port
        process = Locked(server)
        do {
            try await waitUntilReady()
        } catch {
            await stop()
            throw error
        }
    }

    /// Starts PostgreSQL (see ``init(extraSettings:)``), runs `body` with it, and stops it however `body` ends.
    package static func withRunning<Result>(
        extraSettings: [String] = [], tls: (certificatePEM: String, keyPEM: String)? = nil,
        _ body: (PostgresServer) async throws -> Result
    ) async throws -> Result {
        try await running(
            try await PostgresServer(extraSettings: extraSettings, tls: tls), stop: { await $0.stop() }, body)
    }

    /// Stops the server at once (a crash, as far as clients see: connections reset), and waits until it is gone.
    package func kill() async {
        await signalAndWait(SIGQUIT)
    }

    /// Starts the server again on the same port, with the same data.
    package func start() async throws {
        let child = try Self.launch(bin: "/usr/lib/postgresql/15/bin", directory: directory, port: port, settings: [])
        process.withLock { $0 = child }
        guard await waitUntilAccepting(port: port, process: child, within: .seconds(20)) else {
            let log = (try? String(contentsOfFile: directory + "/log", encoding: .utf8)) ?? ""
            throw FixtureError("PostgreSQL did not start again: \(log)")
        }
        try await waitUntilReady()
    }

    /// Waits until the server takes queries: it listens before that, and refuses connections while it starts up
    /// ("the database system is starting up"), longer on a busy machine.
    private func waitUntilReady(within limit: Duration = .seconds(20)) async throws {
        let deadline = ContinuousClock.now + limit
        while true {
            let probe = try ChildProcess(
                "/usr/lib/postgresql/15/bin/pg_isready",
                ["-q", "-h", "127.0.0.1", "-p", "\(port)", "-U", "haul", "-d", "postgres"])
            if await probe.finish().status == 0 { return }
            guard ContinuousClock.now < deadline else {
                let log = (try? String(contentsOfFile: directory + "/log", encoding: .utf8)) ?? ""
                throw FixtureError("PostgreSQL on port \(port) did not become ready within \(limit): \(log)")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// Stops the server and removes its directory.
    package func stop() async {
        await signalAndWait(SIGINT)
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Sends `signal` to the server (`sh`, `setpriv` and `postgres` exec each other: one process) and reaps it.
    private func signalAndWait(_ signal: Int32) async {
        guard
            let child = process.withLock({ state in
                defer { state = nil }; return state
            })
        else { return }
        child.send(signal)
        _ = await child.finish()
    }

    private static func launch(bin: String, directory: String, port: Int, settings: [String]) throws -> ChildProcess {
        var arguments = [
            "-D", directory + "/data", "-k", directory, "-p", "\(port)",
            "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
            "-c", "full_page_writes=off", "-c", "max_connections=200", "-c", "logging_collector=off",
        ]
        for setting in settings { arguments += ["-c", setting] }
        return try spawn(bin + "/postgres", arguments, log: directory + "/log")
    }

    /// Runs `binary` as the `postgres` user when this process is root.
    private static func spawn(_ binary: String, _ arguments: [String], log: String? = nil) throws -> ChildProcess {
        var command = [binary] + arguments
        if getuid() == 0 {
            command = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"] + command
        }
        if let log {
            // The server's output goes to a file the test can read after a restart.
            command = ["sh", "-c", "exec \"$0\" \"$@\" >>'\(log)' 2>&1"] + command
        }
        return try ChildProcess(command[0], Array(command.dropFirst()), signalsAtDefault: true)
    }
}
