import Foundation
import Haul
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Hostile review of the services' lifecycle and metrics: each test states a promise and fails while it is broken.
@Suite("lifecycle review hazards", .timeLimit(.minutes(3)))
struct LifecycleReviewHazardTests {
    func get(_ port: Int, _ path: String, bearer: String? = nil) async throws -> HTTPAnswer {
        var headers = [("Host", "127.0.0.1:\(port)")]
        if let bearer { headers.append(("Authorization", "Bearer \(bearer)")) }
        return try await RawHTTP.send(port: port, method: "GET", path: path, headers: headers)
    }

    func sample(_ name: String, in text: String) -> Double? {
        text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Double($0.dropFirst(name.count + 1)) }
    }

    /// A second `haul daemon` on a directory another one serves must be refused: both would load the same store,
    /// run the same waiting downloads into the same files and overwrite each other's rows.
    @Test("a second daemon on the same DIR is refused with a clear error")
    func secondDaemonOnSameDirectory() async throws {
        let dir = try TemporaryDirectory()
        let first = try await DaemonCommandTests.start(dir)
        defer { first.process.send(SIGKILL) }
        // A download of the first daemon's, paused: the second one, on the same store, takes it as its own too.
        let gid = try #require(
            try await first.result("aria2.addUri", [["http://127.0.0.1:9/x"], ["pause": "true"]]) as? String)
        let second = try HaulProcess(["daemon", "-d", dir.path, "--rpc-listen", "127.0.0.1:0", "-j", "1"])
        // Either it exits (refused) or it starts serving (the bug).
        let port = try? await second.daemonRPCPort()
        var shared = "-"
        if let port {
            let running = DaemonCommandTests.Running(process: second, port: port, secret: first.secret)
            let status = try? await running.result("aria2.tellStatus", [gid, ["gid", "status"]])
            shared = "\(status ?? "none")"
            second.send(SIGTERM)
        }
        let output = await second.finish()
        #expect(
            port == nil && output.status != 0,
            "a second daemon started on the DIR the first one serves (port \(port.map(String.init) ?? "-")), and drives the first one's download \(gid) too: \(shared)\n\(output)"
        )
        #expect(
            output.stderr.contains("another haul daemon is serving") && output.stderr.contains("daemon.lock"),
            "\(output)")
        first.process.send(SIGTERM)
        #expect(await first.process.finish().status == 0)
        // Once the first has stopped, the directory is free again.
        let third = try await DaemonCommandTests.start(dir)
        third.process.send(SIGTERM)
        #expect(await third.process.finish().status == 0)
    }

    /// `haul_received_bytes_total` counts the bytes received: a download whose body was cut and that resumed with
    /// `Range` received every byte of the file once, and must be counted so, not less.
    @Test("daemon: bytes received before a retry are counted (haul_received_bytes_total)")
    func bytesBeforeRetryCounted() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let daemon = try await DaemonCommandTests.start(dir)
            let secret = try #require(daemon.secret)
            let size = 200_000
            let url = bytes(server, "cut", size: size, ["cutAfter": "100000", "cutTimes": "1"])
            let gid = try await daemon.result("aria2.addUri", [[url]]) as? String
            try await eventuallyAsync("the download completed", within: .seconds(30)) {
                let status = try? await daemon.result("aria2.tellStatus", [gid ?? "", ["status"]]) as? [String: Any]
                return status?["status"] as? String == "complete"
            }
            // The server sent 100,000 bytes, cut, then the remaining 100,000 bytes on a Range request.
            #expect(server.stats.requestCount >= 2)
            let metrics = try await get(daemon.port, "/metrics", bearer: secret)
            #expect(sample(#"haul_downloads_finished_total{outcome="completed"}"#, in: metrics.text) == 1)
            #expect(sample("haul_retries_total", in: metrics.text) == 1, "\(metrics.text)")
            let received = sample("haul_received_bytes_total", in: metrics.text)
            #expect(
                received == Double(size),
                "haul_received_bytes_total is \(received.map { String($0) } ?? "absent") for a \(size)-byte file received once"
            )
            daemon.process.send(SIGTERM)
            #expect(await daemon.process.finish().status == 0)
        }
    }

    /// `haul_queue_downloads{state}` is the shared queue's downloads by state: once nothing runs, the `running` series
    /// must say 0 (or be gone), not the count of the last scrape that saw one.
    @Test("worker: haul_queue_downloads{state=running} returns to 0 once the queue's downloads are done")
    func workerDepthGaugeReturnsToZero() async throws {
        try await PostgresServer.withRunning { postgres in
            try await TestServer.withRunning { server in
                let root = try TemporaryDirectory()
                let url = bytes(server, "held", size: 1000, ["hold": "depth"])
                let enqueued = try await HaulProcess.run(["enqueue", "--db", postgres.url, url])
                try #require(enqueued.status == 0, "\(enqueued)")
                let worker = try HaulProcess([
                    "worker", "--db", postgres.url, "-d", root.path, "-j", "1", "--metrics-listen", "127.0.0.1:0",
                ])
                defer { worker.send(SIGKILL) }
                let workerPort = try await worker.metricsPort()
                let port = try #require(workerPort, "\(worker.stderrSoFar)")
                try await eventually("the download is held at the server", within: .seconds(30)) {
                    server.heldCount(at: "depth") == 1
                }
                try await eventuallyAsync("a scrape sees it running", within: .seconds(10)) {
                    let text = (try? await get(port, "/metrics"))?.text ?? ""
                    return sample(#"haul_queue_downloads{state="running"}"#, in: text) == 1
                }
                server.openGate("depth")
                try await eventuallyAsync("a scrape sees it done", within: .seconds(30)) {
                    let text = (try? await get(port, "/metrics"))?.text ?? ""
                    return sample(#"haul_queue_downloads{state="done"}"#, in: text) == 1
                }
                let text = try await get(port, "/metrics").text
                let running = sample(#"haul_queue_downloads{state="running"}"#, in: text)
                #expect(
                    running == nil || running == 0,
                    "nothing runs in the queue, yet haul_queue_downloads{state=\"running\"} is \(running ?? -1):\n\(text)"
                )
                worker.send(SIGTERM)
                #expect(await worker.finish().status == 130)
            }
        }
    }
    /// A download the daemon brings back after a restart and then runs to its end is one download started and one
    /// finished in this process's metrics: `haul_downloads_started_total` must not stay below the finished ones.
    @Test("daemon: a download restored at start is counted in haul_downloads_started_total when it runs")
    func restoredDownloadCountedAsStarted() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let first = try await DaemonCommandTests.start(dir)
            let url = bytes(server, "restored", size: 5000)
            let gid = try #require(try await first.result("aria2.addUri", [[url], ["pause": "true"]]) as? String)
            first.process.send(SIGTERM)
            #expect(await first.process.finish().status == 0)

            let daemon = try await DaemonCommandTests.start(dir)
            let secret = try #require(daemon.secret)
            _ = try await daemon.result("aria2.unpause", [gid])
            try await eventuallyAsync("the restored download completed", within: .seconds(30)) {
                let status = try? await daemon.result("aria2.tellStatus", [gid, ["status"]]) as? [String: Any]
                return status?["status"] as? String == "complete"
            }
            let metrics = try await get(daemon.port, "/metrics", bearer: secret)
            let finished = sample(#"haul_downloads_finished_total{outcome="completed"}"#, in: metrics.text)
            let started = sample("haul_downloads_started_total", in: metrics.text)
            #expect(finished == 1, "\(metrics.text)")
            #expect(
                started == 1,
                "1 download finished in this process but haul_downloads_started_total is \(started ?? -1); haul_queue_wait_seconds_count is \(sample("haul_queue_wait_seconds_count", in: metrics.text) ?? -1)"
            )
            daemon.process.send(SIGTERM)
            #expect(await daemon.process.finish().status == 0)
        }
    }
    /// `haul daemon --db` "returns only by exiting: 0 once stopped by a signal" (DaemonCommand.runFleet), as the
    /// daemon does once it serves: a SIGTERM while it is still starting (its database slow to answer) is the same
    /// clean stop, not a failure exit that systemd's unit (no SuccessExitStatus) records as the service failing.
    @Test("daemon --db: SIGTERM while the database has not answered yet exits as a stop by a signal (0)")
    func sigtermWhileStartingExitsZero() async throws {
        // A listener that accepts and never answers: PostgreSQL slow to answer the daemon's first connection.
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(listener >= 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        try #require(bound == 0 && listen(listener, 8) == 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        let port = Int(UInt16(bigEndian: address.sin_port))
        _ = fcntl(listener, F_SETFL, fcntl(listener, F_GETFL) | O_NONBLOCK)
        let dir = try TemporaryDirectory()
        let daemon = try HaulProcess([
            "daemon", "-d", dir.path, "--rpc-listen", "127.0.0.1:0", "-j", "0", "--db",
            "postgres://haul@127.0.0.1:\(port)/postgres?sslmode=disable",
        ])
        defer { daemon.send(SIGKILL) }
        // Signalled while it starts: once it has said something (its new secret, made before the database is asked),
        // within the 5 s it gives the database, which never answers.
        try await eventually("the daemon is starting", within: .seconds(30)) {
            daemon.stderrSoFar.contains("RPC secret") || daemon.hasExited
        }
        try #require(!daemon.hasExited, "\(daemon.stderrSoFar)")
        daemon.send(SIGTERM)
        let output = await daemon.finish()
        #expect(output.status == 0, "a SIGTERM while starting: \(output)")
    }
}
