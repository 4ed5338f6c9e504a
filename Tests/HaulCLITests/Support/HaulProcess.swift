import Dispatch
import Foundation
import Testing

/// What a finished `haul` process left: its exit status and everything it wrote.
struct HaulOutput: CustomStringConvertible {
    var status: Int32
    var stdout: String
    var stderr: String

    var description: String { "exit \(status)\n--- stdout\n\(stdout)--- stderr\n\(stderr)" }
}

/// The built `haul` binary, run as a user would run it.
final class HaulProcess: @unchecked Sendable {
    // unchecked Sendable: `process` is configured before `run()` and afterwards only signalled and awaited.
    private let process = Process()
    private let stdout = Pipe()
    private let stderr = Pipe()
    private let collected = DispatchGroup()
    private let stdoutData = Box()
    private let stderrData = Box()

    private final class Box: @unchecked Sendable {
        // Written by one reader thread, read after `collected` is done.
        var data = Data()
    }

    /// Starts `haul ARGUMENTS` in `directory`, with `input` on standard input (or none).
    init(_ arguments: [String], in directory: URL? = nil, input: String? = nil) throws {
        process.executableURL = try Self.binary()
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = directory }
        var environment = ProcessInfo.processInfo.environment
        environment["TERM"] = "dumb"
        process.environment = environment
        process.standardOutput = stdout
        process.standardError = stderr
        let stdinPipe = Pipe()
        process.standardInput = stdinPipe
        try process.run()
        stdinPipe.fileHandleForWriting.write(Data((input ?? "").utf8))
        try stdinPipe.fileHandleForWriting.close()
        // Threads of their own: blocking reads on Dispatch's global queues would take the threads Swift
        // concurrency runs the tests on (the pool is as wide as the machine: 2 here), and a test polling the
        // server while haul runs would stall until haul exits.
        for (pipe, box) in [(stdout, stdoutData), (stderr, stderrData)] {
            collected.enter()
            Thread { [collected] in
                box.data = pipe.fileHandleForReading.readDataToEndOfFile()
                collected.leave()
            }.start()
        }
    }

    /// Sends `signal` (SIGINT by default), as Ctrl-C would.
    func send(_ signal: Int32 = SIGINT) {
        kill(process.processIdentifier, signal)
    }

    /// Waits for the process to exit and returns what it wrote.
    func finish() async -> HaulOutput {
        await withCheckedContinuation { continuation in
            Thread { [self] in
                process.waitUntilExit()
                collected.wait()
                continuation.resume(
                    returning: HaulOutput(
                        status: process.terminationStatus,
                        stdout: String(decoding: stdoutData.data, as: UTF8.self),
                        stderr: String(decoding: stderrData.data, as: UTF8.self)))
            }.start()
        }
    }

    /// Runs `haul ARGUMENTS` to the end.
    static func run(_ arguments: [String], in directory: URL? = nil, input: String? = nil) async throws -> HaulOutput {
        try await HaulProcess(arguments, in: directory, input: input).finish()
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
