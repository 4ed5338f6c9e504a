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

        init(directory: URL? = nil) async throws {
            let process = Process()
            process.executableURL = ServeCommandTests.binary
            process.arguments = ["serve"] + (directory.map { [$0.path] } ?? []) + ["--port", "0"]
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

    /// Sends `request` as raw bytes and reads until the server closes or `timeout` passes; `nil` when nothing came.
    static func exchange(_ request: String, port: Int, timeout: Int = 3) -> String? {
        let descriptor = socket(AF_INET, streamSocket, 0)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var wait = timeval(tv_sec: timeout, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { return nil }
        let bytes = Array(request.utf8)
        _ = bytes.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count <= 0 { break }
            received += buffer[..<count]
        }
        return received.isEmpty ? nil : String(decoding: received, as: UTF8.self)
    }

    static func get(_ target: String, port: Int, headers: String = "", timeout: Int = 3) -> String? {
        exchange(
            "GET \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\(headers)Connection: close\r\n\r\n", port: port,
            timeout: timeout)
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
        let answer = Self.get("/bytes/a?size=10", port: served.port, headers: "If-Modified-Since: \(date)\r\n")
        #expect(answer?.hasPrefix("HTTP/1.1 200") == true)
        let after = Self.get("/bytes/a?size=10", port: served.port)
        #expect(after?.hasPrefix("HTTP/1.1 200") == true, "haul serve died")
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
        _ = Self.get(target, port: served.port)
        let after = Self.get("/bytes/a?size=10", port: served.port)
        #expect(after?.hasPrefix("HTTP/1.1 200") == true, "haul serve died")
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
        let answer = Self.get("/pipe", port: served.port)
        #expect(answer?.hasPrefix("HTTP/1.1 404") == true, "no answer: the server blocked opening the pipe")
    }

    /// DNS rebinding: a web page whose name was made to resolve to 127.0.0.1 sends its own name as the Host; what
    /// its scripts could read then is everything served. An address or `localhost` is how a local client names it.
    @Test(.enabled(if: binaryExists, "haul binary not built at .build/debug/haul; run `swift build` first"))
    func aRebindingHostIsRefused() async throws {
        let served = try await Served()
        defer { served.stop() }
        let port = served.port
        func answer(host: String) -> String? {
            Self.exchange(
                "GET /bytes/a?size=10 HTTP/1.1\r\nHost: \(host)\r\nConnection: close\r\n\r\n", port: port)
        }
        for host in ["evil.example:\(port)", "evil.example", "127.0.0.1.evil.example:\(port)", ""] {
            let refused = answer(host: host)
            #expect(refused?.hasPrefix("HTTP/1.1 403") == true, "Host: \(host): \(refused ?? "no answer")")
            #expect(refused?.contains("the Host header must name this server by its address") == true)
        }
        for host in ["127.0.0.1:\(port)", "localhost:\(port)", "LOCALHOST", "[::1]:\(port)"] {
            #expect(answer(host: host)?.hasPrefix("HTTP/1.1 200") == true, "Host: \(host)")
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
        let answer = Self.get(
            "/bytes/a?size=10&\(parameter)=x%0D%0AContent-Type:%20text/html%0D%0A%0D%0A%3Cscript%3E\(extra)",
            port: served.port)
        #expect(answer != nil)
        #expect(answer?.contains("\r\nContent-Type: text/html\r\n") == false)
        #expect(answer?.contains("<script>") == false)
    }
}
