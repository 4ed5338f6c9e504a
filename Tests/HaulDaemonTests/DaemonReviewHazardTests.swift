import Foundation
import Haul
import HaulDaemon
import HaulMetrics
import HaulNIO
import HaulTestServer
import HaulTestSupport
import NIOCore
import NIOPosix
import Prometheus
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The daemon's socket against a hostile second look: numbers as large as JSON allows (no call may bring the process
/// down), secrets on disk, connection slots and memory held by clients that never send the secret, calls multiplied
/// by nesting multicalls in a batch, and origins given in capitals.
@Suite("Daemon review hazards", .timeLimit(.minutes(3)))
struct DaemonReviewHazardTests {
    // MARK: - A `haul daemon` child process, for calls that could bring the process down

    struct Child {
        let process: ChildProcess
        let port: Int
        let secret: String

        /// Calls `method` with the secret; the answer's members, or `nil` when no answer came (connection closed).
        func call(_ method: String, _ params: [JSON]) async -> [String: JSON]? {
            let body: JSON = [
                "jsonrpc": "2.0", "id": "r", "method": .string(method),
                "params": .array([.string("token:\(secret)")] + params),
            ]
            let answer = try? await RawHTTP.send(
                port: port, headers: [("Host", "127.0.0.1:\(port)"), ("Content-Type", "application/json")],
                body: body.encoded())
            return answer.flatMap { try? JSON.parse($0.body) }?.object
        }
    }

    /// Runs `body` with a `haul daemon` on a directory of its own, killed afterwards whatever `body` does.
    static func withDaemon(_ body: (Child) async throws -> Void) async throws {
        let dir = try TemporaryDirectory()
        let child = try await startDaemon(dir)
        let outcome: Result<Void, any Error>
        do {
            try await body(child)
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        child.process.send(SIGKILL)
        _ = await child.process.finish()
        try outcome.get()
    }

    static func startDaemon(_ dir: TemporaryDirectory) async throws -> Child {
        let binary = try #require(builtProduct(named: "haul"), "the haul executable is not built")
        let process = try ChildProcess(
            binary.path, ["daemon", "-d", dir.path, "--rpc-listen", "127.0.0.1:0", "-j", "1"])
        let port = try await process.daemonRPCPort()
        guard let port, let secret = try? String(contentsOf: dir.file(".haul/rpc-secret"), encoding: .utf8) else {
            process.send(SIGKILL)
            _ = await process.finish()
            throw DaemonDidNotStart(stderr: process.stderrSoFar)
        }
        return Child(process: process, port: port, secret: secret.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    struct DaemonDidNotStart: Error, CustomStringConvertible {
        let stderr: String
        var description: String { "the daemon did not start: \(stderr)" }
    }

    /// The lines of the child's standard error that say why it stopped.
    static func crash(_ child: Child) -> String {
        child.process.stderrSoFar.split(separator: "\n").filter {
            $0.contains("Fatal error") || $0.contains("overflow") || $0.contains("Crash") || $0.contains(" at /")
        }.prefix(6).joined(separator: "\n")
    }

    /// Two paused downloads (never fetched), so that the waiting list holds two.
    static func addTwoPaused(_ child: Child) async throws -> [String] {
        var gids: [String] = []
        for name in ["a", "b"] {
            let answer = await child.call(
                "aria2.addUri", [[.string("http://127.0.0.1:9/\(name)")], ["pause": "true"]])
            gids.append(try #require(answer?["result"]?.string, "\(String(describing: answer))"))
        }
        return gids
    }

    @Test("tellWaiting(1, Int64.max) with two waiting downloads is answered; the daemon does not crash")
    func tellWaitingHugeCount() async throws {
        try await Self.withDaemon { child in
            _ = try await Self.addTwoPaused(child)
            let answer = await child.call("aria2.tellWaiting", [1, .int(Int64.max), ["gid"]])
            #expect(answer?["result"]?.array?.count == 1, "no answer: \(Self.crash(child))")
            try? await Task.sleep(for: .milliseconds(200))
            #expect(!child.process.hasExited, "the daemon died")
        }
    }

    @Test("changePosition(gid, Int64.max, POS_END) with two waiting downloads is answered; no crash")
    func changePositionHugeOffset() async throws {
        try await Self.withDaemon { child in
            let gids = try await Self.addTwoPaused(child)
            let answer = await child.call("aria2.changePosition", [.string(gids[0]), .int(Int64.max), "POS_END"])
            #expect(answer != nil, "no answer: \(Self.crash(child))")
            try? await Task.sleep(for: .milliseconds(200))
            #expect(!child.process.hasExited, "the daemon died")
        }
    }

    @Test("haul.tellHistory(1, Int64.max, {sort: oldest}) is answered, with no download at all; no crash")
    func tellHistoryHugeCount() async throws {
        try await Self.withDaemon { child in
            let answer = await child.call("haul.tellHistory", [1, .int(Int64.max), ["sort": "oldest"]])
            #expect(answer?["result"]?.object?["total"] == "0", "no answer: \(Self.crash(child))")
            try? await Task.sleep(for: .milliseconds(200))
            #expect(!child.process.hasExited, "the daemon died")
        }
    }

    // MARK: - Secrets on disk

    @Test("a URI's password is not written to the daemon's store (daemon.sqlite)")
    func uriPasswordNotStored() async throws {
        try await Self.withStoredDaemon { daemon, _ in
            let gid = try daemon.call(
                "aria2.addUri", [["http://alice:url-password-9137@127.0.0.1:9/file"], ["pause": "true"]])
            #expect(gid.string != nil)
        } afterClose: { root in
            var stored = ""
            for suffix in ["", "-wal", "-shm"] {
                if let data = FileManager.default.contents(atPath: root.file(".haul/daemon.sqlite\(suffix)").path) {
                    stored += String(decoding: data, as: UTF8.self)
                }
            }
            let leaked = stored.contains("url-password-9137")
            #expect(!leaked, "a URI's password is in the store in clear")
        }
    }

    @Test("the store's write-ahead log (daemon.sqlite-wal, -shm) is readable by its owner only, as daemon.sqlite is")
    func storeLogPermissions() async throws {
        // The umask most users have.
        try await Self.withStoredDaemon(umask: 0o022) { daemon, root in
            _ = try daemon.call("aria2.addUri", [["http://127.0.0.1:9/private-name"], ["pause": "true"]])
            for suffix in ["", "-wal", "-shm"] {
                var info = stat()
                let path = root.file(".haul/daemon.sqlite\(suffix)").path
                #expect(stat(path, &info) == 0, "\(path) missing")
                #expect(
                    info.st_mode & 0o077 == 0,
                    "daemon.sqlite\(suffix) has mode \(String(info.st_mode & 0o777, radix: 8))")
            }
        }
    }

    /// Runs `body` with a daemon on a paused queue, its store in ROOT/.haul/daemon.sqlite (made, and `body` run, under
    /// `mask` when given), then closes the daemon, empties the queue and runs `afterClose`.
    static func withStoredDaemon(
        umask mask: mode_t? = nil, _ body: (Daemon, TemporaryDirectory) throws -> Void,
        afterClose: (TemporaryDirectory) throws -> Void = { _ in }
    ) async throws {
        let root = try TemporaryDirectory()
        let queue = daemonTestQueue(width: 1)
        queue.pause()
        try FileManager.default.createDirectory(at: root.file(".haul"), withIntermediateDirectories: true)
        let previous = mask.map { umask($0) }
        defer { if let previous { umask(previous) } }
        let store = Result { try DaemonStore(path: root.file(".haul/daemon.sqlite").path) }
        let daemon = try Daemon(
            queue: queue, configuration: Daemon.Configuration(root: root.url, store: try store.get()))
        let outcome = Result { try body(daemon, root) }
        daemon.close()
        queue.cancelAll()
        await queue.waitUntilIdle()
        try outcome.get()
        try afterClose(root)
    }

    // MARK: - Connection slots

    @Test("WebSocket sessions that never send the secret do not hold every connection slot for ever")
    func idleWebSocketsLockOut() async throws {
        let harness = try await DaemonHarness(
            access: RPCAccess(
                unauthorizedDelay: .milliseconds(50), requestTimeout: .milliseconds(300), maxConnections: 2))
        defer { Task { await harness.stop() } }
        let sockets = [
            try await WebSocketClient.open(port: harness.port, headers: [("Host", harness.host)]),
            try await WebSocketClient.open(port: harness.port, headers: [("Host", harness.host)]),
        ]
        #expect(sockets.allSatisfy { $0.upgraded })
        // Far past the request timeout: an idle HTTP connection would be closed by now.
        try await Task.sleep(for: .seconds(2))
        let answered = try? await harness.call("aria2.getVersion")
        #expect(answered != nil, "a client with the right secret was locked out by unauthenticated idle WebSockets")
        withExtendedLifetime(sockets) {}
    }

    @Test("wrong secrets packed into a multicall do not hold every connection slot far past the request timeout")
    func heldGuessesLockOut() async throws {
        let harness = try await DaemonHarness(
            access: RPCAccess(
                unauthorizedDelay: .milliseconds(500), requestTimeout: .milliseconds(500), maxConnections: 2))
        defer { Task { await harness.stop() } }
        // Each request: one multicall of 20 wrong guesses, its answer held back 10 s and more.
        let inner: [JSON] = (0..<20).map { index in
            ["methodName": "aria2.getVersion", "params": [.string("token:guess-\(index)")]]
        }
        let body = (["jsonrpc": "2.0", "id": 1, "method": "system.multicall", "params": [.array(inner)]] as JSON)
            .encoded()
        var held: [Int32] = []
        for _ in 0..<2 {
            let fd = try connectedLoopbackSocket(port: harness.port)
            var head = "POST /jsonrpc HTTP/1.1\r\nHost: \(harness.host)\r\nContent-Type: application/json\r\n"
            head += "Content-Length: \(body.count)\r\n\r\n"
            writeAll(fd, Array(head.utf8) + body)
            held.append(fd)
        }
        defer { for fd in held { close(fd) } }
        // Well past the request timeout, well before the held answers go out.
        try await Task.sleep(for: .seconds(2))
        let answered = try? await harness.call("aria2.getVersion")
        #expect(answered != nil, "a client with the right secret was locked out by two requests of wrong guesses")
    }

    @Test("wrong /metrics tokens held back do not hold every connection slot: a caller with the secret gets in")
    func heldMetricsGuessesLockOut() async throws {
        let monitoring = MonitoringEndpoint(
            registry: PrometheusCollectorRegistry(), bearerToken: "metrics-token", unauthorizedDelay: .seconds(30))
        let harness = try await DaemonHarness(
            access: RPCAccess(unauthorizedDelay: .seconds(30), maxConnections: 2), monitoring: monitoring)
        defer { Task { await harness.stop() } }
        let held = try (0..<2).map { index in
            let fd = try connectedLoopbackSocket(port: harness.port)
            writeAll(
                fd,
                Array(
                    "GET /metrics HTTP/1.1\r\nHost: \(harness.host)\r\nAuthorization: Bearer guess\(index)\r\n\r\n".utf8
                ))
            return fd
        }
        defer { for fd in held { close(fd) } }
        // Until the daemon has read both guesses a new connection is refused; then one of them makes room.
        var answered = false
        try await eventuallyAsync("a call with the secret is answered", within: .seconds(10)) {
            answered = (try? await harness.call("aria2.getVersion")) != nil
            return answered
        }
        #expect(answered, "a client with the right secret was locked out by two wrong /metrics tokens")
    }

    // MARK: - Amplification without the secret

    @Test(
        "one request without the secret is not answered with tens of thousands of calls (maxCalls bypassed by nesting)")
    func nestedMulticallAmplification() async throws {
        let harness = try await DaemonHarness()
        defer { Task { await harness.stop() } }
        let inner = JSON.array(
            Array(repeating: ["methodName": "system.listMethods"] as JSON, count: RPCEndpoint.maxCalls))
        let call: JSON = ["jsonrpc": "2.0", "id": 1, "method": "system.multicall", "params": [inner]]
        let batch = JSON.array(Array(repeating: call, count: 5))
        let request = batch.encoded()
        #expect(request.count < 2 << 20)
        let answer = try await harness.post(batch)
        let answered = answer.json?.array?.compactMap { $0.object?["result"]?.array?.count }.reduce(0, +) ?? 0
        #expect(
            answered <= RPCEndpoint.maxCalls,
            "\(answered) calls answered for one request without a secret: \(request.count) bytes in, \(answer.body.count) bytes out"
        )
    }

    // MARK: - Origins

    @Test("an allowed origin given with capitals is matched as browsers send it (lowercase), as allowed hosts are")
    func allowedOriginCase() async throws {
        let harness = try await DaemonHarness(
            access: RPCAccess(
                allowedOrigins: ["http://NAS.example:8080"], allowedHosts: ["NAS.example"],
                unauthorizedDelay: .milliseconds(50)))
        defer { Task { await harness.stop() } }
        let call: JSON = [
            "jsonrpc": "2.0", "id": 1, "method": "aria2.getVersion",
            "params": [.string("token:\(DaemonHarness.secret)")],
        ]
        // The allowed host, given with capitals, is matched.
        let byHost = try await RawHTTP.send(
            port: harness.port, headers: [("Host", "nas.example:\(harness.port)")], body: call.encoded())
        #expect(byHost.status == 200)
        // A browser serializes the origin's host in lowercase.
        let fromPage = try await harness.post(call, headers: [("Origin", "http://nas.example:8080")])
        #expect(fromPage.status == 200, "\(fromPage.status) \(fromPage.text)")
    }

    // MARK: - Notifications to a client that does not read

    @Test("notifications to a WebSocket that does not read (no secret sent) are not all kept in the daemon's memory")
    func notificationsToNonReader() async throws {
        // Its own event loop: writing hundreds of thousands of notifications keeps a loop busy for seconds in a debug
        // build, and NIO's shared loops serve every other test's daemon.
        let loop = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let harness = try await DaemonHarness(group: loop)
        defer {
            Task {
                await harness.stop()
                try? await loop.shutdownGracefully()
            }
        }
        let (host, port) = (harness.host, harness.port)
        let fd = try await onOwnThread { () throws -> Int32 in
            let fd = try connectedLoopbackSocket(port: port)
            _ = sendUpgrade(on: fd, headers: [("Host", host)])
            return fd
        }
        defer { close(fd) }
        try await Task.sleep(for: .milliseconds(200))
        // A busy daemon's notifications (a batch of 100,000 small files is 300,000), while the client reads nothing.
        // Sent from a thread of their own: seconds of work on the cooperative pool would starve the other tests.
        let server = harness.server
        _ = try await onOwnThread {
            for index in 0..<300_000 {
                server.notify("aria2.onDownloadComplete", gid: String(format: "%016x", index))
            }
        }
        try await Task.sleep(for: .seconds(2))
        // Now it reads: everything the daemon kept for it comes, beyond what the sockets' buffers hold.
        let received = try await onOwnThread { () -> Int in
            var timeout = timeval(tv_sec: 2, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var total = 0
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count <= 0 { return total }
                total += count
            }
        }
        #expect(
            received < 8 << 20,
            "the daemon kept \(received >> 20) MiB of notifications in memory for a client that read nothing")
    }
}
