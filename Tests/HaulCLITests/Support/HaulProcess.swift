import Foundation
import HaulTestSupport
import Testing

/// What a finished `haul` process left: its exit status and everything it wrote.
struct HaulOutput: CustomStringConvertible {
    var status: Int32
    var stdout: String
    var stderr: String

    var description: String { "exit \(status)\n--- stdout\n\(stdout)--- stderr\n\(stderr)" }
}

/// The built `haul` binary, run as a user would run it (standard output not a terminal, `TERM=dumb`).
final class HaulProcess: Sendable {
    private let child: ChildProcess

    /// Starts `haul ARGUMENTS` with `input` on standard input, and `environment` beside the test process's own
    /// (whose `SSL_CERT_FILE` and `SSL_CERT_DIR` are left out, so that only a test sets them); run by `wrapper` (a
    /// command such as `nohup`, found in `PATH`) when one is given.
    init(
        _ arguments: [String], input: String? = nil, environment extra: [String: String] = [:],
        under wrapper: String? = nil
    ) throws {
        var environment = ProcessInfo.processInfo.environment
        environment["SSL_CERT_FILE"] = nil
        environment["SSL_CERT_DIR"] = nil
        environment["TERM"] = "dumb"
        // A proxy or netrc file of the machine running the tests must not change what they see.
        for name in [
            "http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY", "NETRC",
        ] {
            environment[name] = nil
        }
        environment.merge(extra) { _, new in new }
        let haul = try Self.binary().path
        child = try ChildProcess(
            wrapper ?? haul, wrapper == nil ? arguments : [haul] + arguments, input: input ?? "",
            environment: environment)
    }

    /// The process's id.
    var pid: pid_t { child.pid }

    /// What the process has written to standard output so far.
    var stdoutSoFar: String { child.stdoutSoFar }

    /// What the process has written to standard error so far.
    var stderrSoFar: String { child.stderrSoFar }

    /// The port of a starting `haul daemon` (see ``ChildProcess/daemonRPCPort()``).
    func daemonRPCPort() async throws -> Int? { try await child.daemonRPCPort() }

    /// The port of a starting `haul worker --metrics-listen 127.0.0.1:0` (``ChildProcess/metricsPort()``).
    func metricsPort() async throws -> Int? { try await child.metricsPort() }

    /// The URL of a `haul serve` process's "Serving on URL" line, once it has printed it.
    var printedURL: String? {
        let line = child.stdoutSoFar.split(separator: "\n").first { $0.hasPrefix("Serving on ") }
        return line.map { String($0.dropFirst("Serving on ".count)) }
    }

    /// Sends `signal` (SIGINT by default), as Ctrl-C would.
    func send(_ signal: Int32 = SIGINT) { child.send(signal) }

    /// Whether the process has exited (it stays a zombie until ``finish()``).
    var hasExited: Bool { child.hasExited }

    /// Whether it exits within `limit`; one still running then is sent SIGKILL.
    func exits(within limit: Duration) async -> Bool { await child.exits(within: limit) }

    /// Waits for the process to exit and returns what it wrote.
    func finish() async -> HaulOutput {
        let (status, stdout, stderr) = await child.finish()
        return HaulOutput(status: status, stdout: stdout, stderr: stderr)
    }

    /// Runs `haul ARGUMENTS` to the end.
    static func run(
        _ arguments: [String], input: String? = nil, environment: [String: String] = [:]
    ) async throws -> HaulOutput {
        try await HaulProcess(arguments, input: input, environment: environment).finish()
    }

    /// The built `haul` binary.
    static func binary() throws -> URL {
        try #require(builtProduct(named: "haul"), "haul is not built; run `swift build` first")
    }
}
