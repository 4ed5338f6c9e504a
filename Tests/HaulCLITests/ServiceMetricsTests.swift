import Foundation
import Haul
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `haul daemon` and `haul worker` run as services: their metrics as Prometheus scrapes them, their health as the
/// database goes and comes back, their JSON logs, and their stop on SIGTERM.
@Suite("haul daemon and haul worker as services", .timeLimit(.minutes(3)))
struct ServiceMetricsTests {
    /// `GET path` on `port`, naming the server by its address.
    func get(_ port: Int, _ path: String, bearer: String? = nil, host: String? = nil) async throws -> HTTPAnswer {
        var headers = [("Host", host ?? "127.0.0.1:\(port)")]
        if let bearer { headers.append(("Authorization", "Bearer \(bearer)")) }
        return try await RawHTTP.send(port: port, method: "GET", path: path, headers: headers)
    }

    /// The value of the sample `name` (labels and all) in a Prometheus text exposition.
    func sample(_ name: String, in text: String) -> Double? {
        text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Double($0.dropFirst(name.count + 1)) }
    }

    /// Each line of `text` as a JSON object; fails the test on a line that is not one.
    func jsonLines(_ text: String) throws -> [[String: String]] {
        try text.split(separator: "\n").map { line in
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            return try #require(object, "not a JSON object: \(line)").compactMapValues { $0 as? String }
        }
    }

    /// How many glibc arenas besides the main one the process `pid` has: each is an anonymous mapping of 64 MiB (its
    /// heap, then the reserve it grows into), aligned to 64 MiB.
    func mallocArenas(of pid: pid_t) throws -> Int {
        let heapSize: UInt64 = 64 << 20
        let regions = try String(contentsOfFile: "/proc/\(pid)/maps", encoding: .utf8).split(separator: "\n").map {
            line in
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            let bounds = fields[0].split(separator: "-").map { UInt64($0, radix: 16) ?? 0 }
            return (start: bounds[0], end: bounds[1], access: fields[1], anonymous: fields.count < 6)
        }
        var arenas = 0
        for (index, region) in regions.enumerated() where region.anonymous && region.start % heapSize == 0 {
            var end = region.end
            for next in regions[(index + 1)...] {
                guard next.start == end, next.anonymous, next.access == "---p" else { break }
                end = next.end
            }
            if end - region.start == heapSize { arenas += 1 }
        }
        return arenas
    }

    /// Expects the process `pid` (`what`) to have one allocator arena per core at most (ServiceMemory): glibc's own
    /// limit is eight per core, and a service that kept it had seven beside the main one before it downloaded anything.
    func expectArenasWithinCores(
        of pid: pid_t, _ what: String, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let cores = sysconf(Int32(_SC_NPROCESSORS_ONLN))
        let arenas = try mallocArenas(of: pid)
        #expect(
            arenas < cores, "\(what) has \(arenas) arenas beside the main one on \(cores) cores",
            sourceLocation: sourceLocation)
    }

    @Test("daemon: /metrics for the secret as a bearer token only, /healthz, /readyz, one JSON object per log line")
    func daemon() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let daemon = try await DaemonCommandTests.start(dir, ["--log-format", "json"])
            let secret = try #require(daemon.secret)
            let port = daemon.port
            var gids: [String: String] = [:]
            for index in 0..<4 {
                let url = bytes(server, "m\(index)", size: 3000)
                gids[url] = try await daemon.result("aria2.addUri", [[url]]) as? String
            }
            let missing = bytes(server, "missing", size: 10, ["status": "404"])
            gids[missing] = try await daemon.result("aria2.addUri", [[missing]]) as? String
            // Credentials in the URL and in the options: logged never.
            let withPassword = bytes(server, "m4", size: 3000).replacingOccurrences(
                of: "http://", with: "http://someone:pa55word@")
            let redacted = try #require(URL(string: withPassword)?.redactedString)
            gids[redacted] = try await daemon.result("aria2.addUri", [[withPassword]]) as? String
            let withOption = bytes(server, "m5", size: 3000)
            gids[withOption] =
                try await daemon.result("aria2.addUri", [[withOption], ["http-user": "u", "http-passwd": "pa55word"]])
                as? String
            try await eventuallyAsync("seven downloads ended", within: .seconds(30)) {
                let stopped = try? await daemon.result("aria2.tellStopped", [0, 10, ["gid"]]) as? [Any]
                return stopped?.count == 7
            }
            for bearer in [nil, "wrong", secret + "x"] {
                let refused = try await get(port, "/metrics", bearer: bearer)
                #expect(refused.status == 401 && !refused.text.contains("haul_"), "\(refused.text)")
            }
            let metrics = try await get(port, "/metrics", bearer: secret)
            #expect(metrics.status == 200)
            #expect(sample("haul_downloads_started_total", in: metrics.text) == 7, "\(metrics.text)")
            #expect(sample(#"haul_downloads_finished_total{outcome="completed"}"#, in: metrics.text) == 6)
            #expect(sample(#"haul_downloads_finished_total{outcome="failed"}"#, in: metrics.text) == 1)
            #expect(sample("haul_received_bytes_total", in: metrics.text) == Double(6 * 3000))
            #expect(sample(#"haul_queue_downloads{state="stopped"}"#, in: metrics.text) == 7)
            #expect(sample(#"haul_queue_downloads{state="waiting"}"#, in: metrics.text) == 0)
            #expect(sample("haul_queue_wait_seconds_count", in: metrics.text) == 7)
            #expect(try await get(port, "/healthz").status == 200)
            let ready = try await get(port, "/readyz")
            #expect(ready.status == 200 && ready.text.contains(#""ready":true"#), "\(ready.text)")
            // A page that reached the daemon through DNS rebinding names its own host.
            #expect(try await get(port, "/readyz", host: "rebind.example:\(port)").status == 403)
            try expectArenasWithinCores(of: daemon.process.pid, "the daemon")

            daemon.process.send(SIGTERM)
            let stopped = ContinuousClock.now
            let output = await daemon.process.finish()
            #expect(output.status == 0, "\(output)")
            #expect(ContinuousClock.now - stopped < .seconds(10))
            let lines = try jsonLines(output.stderr)
            #expect(lines.allSatisfy { $0["time"] != nil && $0["level"] != nil && $0["logger"] == "haul.daemon" })
            for (url, gid) in gids {
                let own = lines.filter { $0["gid"] == gid }
                #expect(own.allSatisfy { $0["download.url"] == url }, "\(own)")
                let ending = url == missing ? "error" : "complete"
                #expect(own.contains { $0["message"]?.hasPrefix(ending) == true }, "\(own)")
            }
            #expect(!output.stderr.contains(secret) && !output.stdout.contains(secret))
            #expect(!output.stderr.contains("pa55word") && !output.stdout.contains("pa55word"))
            #expect(!redacted.contains("pa55word"))
        }
    }

    @Test(
        "Prometheus scrapes a daemon and a worker during a batch; PromQL returns the batch's counts; /readyz follows the database"
    )
    func prometheus() async throws {
        try await PostgresServer.withRunning { postgres in
            try await TestServer.withRunning { server in
                let root = try TemporaryDirectory()
                let daemonDir = try TemporaryDirectory()
                let daemon = try await DaemonCommandTests.start(daemonDir, ["-j", "2"])
                let worker = try HaulProcess([
                    "worker", "--db", postgres.url, "-d", root.path, "-j", "3", "--lease", "3", "--metrics-listen",
                    "127.0.0.1:0", "--log-format", "json",
                ])
                let workerPort = try await worker.metricsPort()
                let metricsPort = try #require(workerPort, "\(worker.stderrSoFar)")
                let jobs = [
                    Prometheus.Job(
                        name: "daemon", targets: ["127.0.0.1:\(daemon.port)"],
                        bearerTokenFile: daemonDir.file(".haul/rpc-secret").path),
                    Prometheus.Job(name: "worker", targets: ["127.0.0.1:\(metricsPort)"]),
                ]
                try await Prometheus.withRunning(jobs: jobs) { prometheus in
                    try await eventuallyAsync("both targets up", within: .seconds(30)) {
                        let targets = (try? await prometheus.targets()) ?? []
                        return targets.count == 2 && targets.allSatisfy { $0.health == "up" }
                    }
                    // The batch, while Prometheus scrapes.
                    let urls = (0..<30).map { bytes(server, "w\($0)", size: 2000, ["delay": "30"]) }
                    let enqueued = try await HaulProcess.run(["enqueue", "--db", postgres.url] + urls)
                    #expect(enqueued.status == 0, "\(enqueued)")
                    for index in 0..<10 {
                        _ = try await daemon.result("aria2.addUri", [[bytes(server, "d\(index)", size: 1000)]])
                    }
                    func value(_ query: String) async -> Double? {
                        try? await prometheus.query(query).first?.value
                    }
                    try await eventuallyAsync("Prometheus has the batch's counts", within: .seconds(60)) {
                        let worker = await value(
                            #"sum(haul_downloads_finished_total{job="worker",outcome="completed"})"#)
                        let daemon = await value(
                            #"sum(haul_downloads_finished_total{job="daemon",outcome="completed"})"#)
                        return worker == 30 && daemon == 10
                    }
                    #expect(await value(#"haul_worker_claims_total{job="worker"}"#) == 30)
                    #expect(await value(#"haul_received_bytes_total{job="worker"}"#) == Double(30 * 2000))
                    #expect(await value(#"haul_received_bytes_total{job="daemon"}"#) == Double(10 * 1000))
                    #expect(await value(#"haul_worker_claim_seconds_count{job="worker"}"#) ?? 0 >= 1)
                    try await eventuallyAsync("a lease renewal is scraped", within: .seconds(10)) {
                        await value(#"haul_worker_lease_renewals_total{job="worker"}"#) ?? 0 >= 1
                    }
                    // The shared queue's depth is read at each scrape: the last completions reach the database a
                    // moment after their files.
                    try await eventuallyAsync("the queue's depth scraped", within: .seconds(10)) {
                        await value(#"haul_queue_downloads{job="worker",state="done"}"#) == 30
                    }
                    #expect(await value(#"sum(haul_downloads_finished_total{outcome="failed"})"#) == 0)
                }
                try expectArenasWithinCores(of: worker.pid, "the worker")

                // Health as the database goes away and comes back.
                #expect(try await get(metricsPort, "/healthz").status == 200)
                #expect(try await get(metricsPort, "/readyz").status == 200)
                await postgres.kill()
                try await eventuallyAsync("not ready without the database", within: .seconds(20)) {
                    (try? await get(metricsPort, "/readyz"))?.status == 503
                }
                let notReady = try await get(metricsPort, "/readyz")
                #expect(notReady.text.contains(#""ready":false"#), "\(notReady.text)")
                #expect(!notReady.text.contains(#""database":"ok""#), "\(notReady.text)")
                #expect(notReady.text.contains(#""journal":"ok""#), "\(notReady.text)")
                #expect(try await get(metricsPort, "/healthz").status == 200)
                try await postgres.start()
                try await eventuallyAsync("ready again", within: .seconds(30)) {
                    (try? await get(metricsPort, "/readyz"))?.status == 200
                }

                worker.send(SIGTERM)
                let output = await worker.finish()
                #expect(output.status == 130, "\(output)")
                let lines = try jsonLines(output.stderr)
                let done = lines.filter { $0["message"] == "done" }
                #expect(done.count == 30, "\(output.stderr)")
                #expect(Set(done.compactMap { $0["download.id"] }).count == 30)
                #expect(
                    Set(done.compactMap { $0["download.url"] })
                        == Set((0..<30).map { bytes(server, "w\($0)", size: 2000, ["delay": "30"]) }))
                daemon.process.send(SIGTERM)
                #expect(await daemon.process.finish().status == 0)
            }
        }
    }

    @Test("a limit of the allocator's arenas set in the environment is the user's, not replaced by one per core")
    func arenaLimitOfTheEnvironment() async throws {
        let dir = try TemporaryDirectory()
        let daemon = try await DaemonCommandTests.start(dir, environment: ["MALLOC_ARENA_MAX": "1"])
        _ = try await daemon.result("aria2.getGlobalStat", [])
        #expect(try mallocArenas(of: daemon.process.pid) == 0)
        daemon.process.send(SIGTERM)
        #expect(await daemon.process.finish().status == 0)
    }

    @Test("worker options: --metrics-listen off loopback needs a token file, which /metrics then asks for")
    func workerOptions() async throws {
        let refused = try await HaulProcess.run([
            "worker", "--db", "postgres://haul@127.0.0.1:1/x", "--metrics-listen", "0.0.0.0:9469",
        ])
        #expect(refused.status == 2 && refused.stderr.contains("--metrics-secret-file"), "\(refused)")
        let orphan = try await HaulProcess.run([
            "worker", "--db", "postgres://haul@127.0.0.1:1/x", "--metrics-secret-file", "/nonexistent",
        ])
        #expect(orphan.status == 2 && orphan.stderr.contains("needs --metrics-listen"), "\(orphan)")
        let format = try await HaulProcess.run(["daemon", "--log-format", "xml"])
        #expect(format.status == 2 && format.stderr.contains("xml"), "\(format)")
    }
}
