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

    /// Starts `haul ARGUMENTS` with `input` on standard input.
    init(_ arguments: [String], input: String? = nil) throws {
        var environment = ProcessInfo.processInfo.environment
        environment["TERM"] = "dumb"
        child = try ChildProcess(
            try Self.binary().path, arguments, input: input ?? "", environment: environment)
    }

    /// Sends `signal` (SIGINT by default), as Ctrl-C would.
    func send(_ signal: Int32 = SIGINT) { child.send(signal) }

    /// Waits for the process to exit and returns what it wrote.
    func finish() async -> HaulOutput {
        let (status, stdout, stderr) = await child.finish()
        return HaulOutput(status: status, stdout: stdout, stderr: stderr)
    }

    /// Runs `haul ARGUMENTS` to the end.
    static func run(_ arguments: [String], input: String? = nil) async throws -> HaulOutput {
        try await HaulProcess(arguments, input: input).finish()
    }

    /// The `haul` binary beside the running test bundle (the same build folder), else in `.build/debug`.
    static func binary() throws -> URL {
        var candidates: [URL] = []
        if let executable = Bundle.main.executableURL {
            candidates.append(executable.deletingLastPathComponent().appendingPathComponent("haul"))
        }
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        candidates.append(packageRoot.appendingPathComponent(".build/debug/haul"))
        return try #require(
            candidates.first { FileManager.default.isExecutableFile(atPath: $0.path) },
            "haul is not built; run `swift build` first")
    }
}
