import Foundation
import HaulTestServer
import HaulTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Hostile clients against the built `haul serve`: one request must never take the server down, block it, or make it
/// send a header the client wrote.
@Suite(.timeLimit(.minutes(1)))
struct ServeReviewTests {
    static var binaryExists: Bool { ServeCommandTests.binaryExists }

    /// `haul serve` on a free loopback port, serving `directory` if given.
    final class Served: Sendable {
        let process: Process
        let port: Int

        init(directory: URL? = nil, options: [String] = []) async throws {
            let process = Process()
            process.executableURL = ServeCommandTests.binary
            process.arguments = ["serve"] + (directory.map { [$0.path] } ?? []) + ["--port", "0"] + options
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            let collected = Mutex("")
            output.fileHandleForReading.readabilityHandler = { handle in
                let text = String(decoding: handle.availableData, as: UTF8.self)
                collected.withLock { $0 += text }
            }
            try process.run()
            try await eventually("haul serve prints its URL") { collected.withLock { $0.contains("\n") } }
            output.fileHandleForReading.readabilityHandler = nil
            let firstLine = collected.withLock { $0 }.split(separator: "\n").first.map(String.init) ?? ""
            self.process = process
            self.port = try #require(firstLine.split(separator: ":").last.flatMap { Int($0) })
        }

        var isRunning: Bool { process.isRunning }

        /// SIGKILL: a server stuck on a blocked event loop would not get through its graceful shutdown. (Not
        /// `waitUntilExit`, which spins a run loop and can hang on a test's thread.)
        func stop() {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
    }

    /// A date header is a client's text: numbers too large for an `Int` must not trap the whole server.
    @Test(
        .enabled(if: binaryExists, "haul binary not built at .build/debug/haul; run `swift build` first"),
        arguments: [
            "Mon, 01 Jan 9223372036854775807 00:00:00 GMT",
            "Mon, 01 Jan 2024 9223372036854775807:00:00 GMT",
            "Mon, 9223372036854775807 Jan 2024 00:00:00 GMT",
        ])
    func anOverflowingIfModifiedSinceDoesNotCrashTheServer(date: String) async throws {
        let served = try await Served()
        defer { served.stop() }
        let answer = try? await RawHTTPClient.get(
            "/bytes/a?size=10", port: served.port, headers: [("If-Modified-Since", date)])
        #expect(answer?.status == 200)
        let after = try await RawHTTPClient.get("/bytes/a?size=10", port: served.port)
        #expect(after.status == 200, "haul serve died")
        #expect(served.isRunning)
    }

    /// Fault parameters come from any client that reaches the server: out-of-range numbers must not trap it.
    @Test(
        .enabled(if: binaryExists, "haul binary not built at .build/debug/haul; run `swift build` first"),
        arguments: [
            "/bytes/a?size=10&status=503&retryAfter=9223372036854775807&retryAfterDate=1",
            "/bytes/a?size=10&shortBy=-9223372036854775808",
            "/bytes/a?size=10&stallAfter=-5",
            "/bytes/a?size=10&status=-1",
            "/bytes/a?size=10&fail=1&failStatus=-1",
            "/bytes/a?size=10&redirects=1&redirectStatus=-1",
        ])
    func outOfRangeFaultParametersDoNotCrashTheServer(target: String) async throws {
        let served = try await Served()
        defer { served.stop() }
        // The head only: a stall stays a stall (the server's to keep), and what matters is the next request.
        _ = try? await RawHTTPClient.get(target, port: served.port, stopAfterBodyBytes: 0)
        let after = try await RawHTTPClient.get("/bytes/a?size=10", port: served.port)
        #expect(after.status == 200, "haul serve died")
        #expect(served.isRunning)
    }

    /// A named pipe in the served directory: opening it for reading blocks until a writer comes, which would hold
    /// an event loop (and every connection on it) for good.
    @Test(.enabled(if: binaryExists, "haul binary not built at .build/debug/haul; run `swift build` first"))
    func aNamedPipeInTheRootIsNotOpenedForReading() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-fifo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let fifo = directory.appendingPathComponent("pipe").path
        #expect(mkfifo(fifo, 0o600) == 0)
        let served = try await Served(directory: directory)
        defer {
            // Lets a blocked open(2) in the server return, whatever the outcome.
            let writer = open(fifo, O_WRONLY | O_NONBLOCK)
            if writer >= 0 { close(writer) }
            served.stop()
        }
        // Blocked opening the pipe, the server would never answer: the suite's time limit ends the test.
        let answer = try await RawHTTPClient.get("/pipe", port: served.port)
        #expect(answer.status == 404)
    }

    /// DNS rebinding: a web page whose name was made to resolve to 127.0.0.1 sends its own name as the Host; what
    /// its scripts could read then is everything served. An address or `localhost` is how a local client names it.
    @Test(.enabled(if: binaryExists, "haul binary not built at .build/debug/haul; run `swift build` first"))
    func aRebindingHostIsRefused() async throws {
        let served = try await Served()
        defer { served.stop() }
        let port = served.port
        for host in ["evil.example:\(port)", "evil.example", "127.0.0.1.evil.example:\(port)", ""] {
            let refused = try await RawHTTPClient.get("/bytes/a?size=10", port: port, host: host)
            #expect(refused.status == 403, "Host: \(host)")
            #expect(String(decoding: refused.body, as: UTF8.self).contains("must name this server by its address"))
        }
        for host in ["127.0.0.1:\(port)", "localhost:\(port)", "LOCALHOST", "[::1]:\(port)"] {
            #expect(try await RawHTTPClient.get("/bytes/a?size=10", port: port, host: host).status == 200, "\(host)")
        }
    }

    /// Fault values are percent-decoded from the query: a CR LF in one would let any web page the user opens make
    /// `haul serve` send headers and a body of its choosing (HTML, run with the origin of the served directory).
    @Test(
        .enabled(if: binaryExists, "haul binary not built at .build/debug/haul; run `swift build` first"),
        arguments: ["setCookie", "disposition", "redirectTo"])
    func aLineBreakInAFaultValueCannotAddHeaders(parameter: String) async throws {
        let served = try await Served()
        defer { served.stop() }
        let extra = parameter == "redirectTo" ? "&redirects=1" : ""
        let answer = try await RawHTTPClient.get(
            "/bytes/a?size=10&\(parameter)=x%0D%0AContent-Type:%20text/html%0D%0A%0D%0A%3Cscript%3E\(extra)",
            port: served.port)
        #expect(!answer.headers.contains { $0.name.lowercased() == "content-type" && $0.value == "text/html" })
        #expect(!String(decoding: answer.body, as: UTF8.self).contains("<script>"))
    }

    /// A client that connects and sends nothing held its connection, and a descriptor of the server's, for ever:
    /// `--idle-timeout` (60 s by default) closes it.
    @Test(.enabled(if: binaryExists, "haul binary not built at .build/debug/haul; run `swift build` first"))
    func anIdleConnectionIsClosed() async throws {
        let served = try await Served(options: ["--idle-timeout", "0.3"])
        defer { served.stop() }
        let closed = try #require(try await IdleTimeoutTests.readUntilClosed(port: served.port, sending: nil))
        #expect(closed.bytes.isEmpty)
        #expect(closed.quietBeforeClose >= .milliseconds(300) - IdleTimeoutTests.delivery)
        #expect(try await RawHTTPClient.get("/bytes/a?size=10", port: served.port).status == 200)
    }

    @Test(
        .enabled(if: binaryExists, "haul binary not built at .build/debug/haul; run `swift build` first"),
        arguments: ["-1", "nan", "100000"])
    func aBadIdleTimeoutIsRefused(value: String) async throws {
        let process = Process()
        process.executableURL = ServeCommandTests.binary
        process.arguments = ["serve", "--port", "0", "--idle-timeout", value]
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 2, "\(text)")
        #expect(text.contains("--idle-timeout"), "\(text)")
    }
}
