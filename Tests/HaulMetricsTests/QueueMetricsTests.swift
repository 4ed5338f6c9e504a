import CoreMetrics
import Foundation
import Haul
import HaulMetrics
import HaulNIO
import HaulTestServer
import HaulTestSupport
import Prometheus
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The value of the sample `name` (with its labels, as `haul_x{a="b"}`) in a Prometheus text exposition.
func sample(_ name: String, in text: String) -> Double? {
    for line in text.split(separator: "\n") where line.hasPrefix(name + " ") {
        return Double(line.dropFirst(name.count + 1))
    }
    return nil
}

@Suite("QueueMetrics and MonitoringEndpoint", .timeLimit(.minutes(2)))
struct QueueMetricsTests {
    func makeQueue(_ configuration: DownloadQueue.Configuration = .init()) -> DownloadQueue {
        // Backoff waits are recorded, not slept.
        let engine = testConfiguration(retries: 1)
        return DownloadQueue(
            downloader: Downloader(transport: NIOTransport(), configuration: engine), configuration: configuration)
    }

    @Test("downloads started, finished by outcome, bytes, retries and waits are counted from the queue's events")
    func counts() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let registry = PrometheusCollectorRegistry()
            let queue = makeQueue(.init(maxConcurrentDownloads: 2))
            let metrics = QueueMetrics(queue: queue, factory: PrometheusMetricsFactory(registry: registry))
            metrics.start()
            var requests = (0..<4).map {
                DownloadRequest(
                    url: server.url(path: "/bytes/f\($0)", query: ["size": "5000"]), destination: .directory(dir.url))
            }
            // Fails for good (404), and once first with a 503 that is retried.
            requests.append(
                DownloadRequest(
                    url: server.url(path: "/bytes/missing", query: ["status": "404", "size": "10"]),
                    destination: .file(dir.file("missing"))))
            requests.append(
                DownloadRequest(
                    url: server.url(path: "/bytes/flaky", query: ["fail": "1", "size": "300"]),
                    destination: .file(dir.file("flaky"))))
            let handles = queue.add(requests)
            for handle in handles { _ = try? await handle.result }
            let endpoint = MonitoringEndpoint(registry: registry, refresh: { await metrics.refresh() })
            try await eventuallyAsync("every end counted") {
                let text =
                    await endpoint.respond(method: "GET", path: "/metrics", authorization: nil)
                    .map { String(decoding: $0.body, as: UTF8.self) } ?? ""
                return sample(#"haul_downloads_finished_total{outcome="completed"}"#, in: text) == 5
                    && sample(#"haul_downloads_finished_total{outcome="failed"}"#, in: text) == 1
            }
            let answer = try #require(await endpoint.respond(method: "GET", path: "/metrics", authorization: nil))
            let text = String(decoding: answer.body, as: UTF8.self)
            #expect(answer.status == 200)
            #expect(answer.headers.contains { $0.0 == "Content-Type" && $0.1.hasPrefix("text/plain; version=0.0.4") })
            #expect(sample("haul_downloads_started_total", in: text) == 6)
            #expect(sample(#"haul_downloads_finished_total{outcome="cancelled"}"#, in: text) == 0)
            #expect(sample("haul_received_bytes_total", in: text) == Double(4 * 5000 + 300))
            #expect(sample("haul_retries_total", in: text) == 1)
            #expect(sample("haul_queue_wait_seconds_count", in: text) == 6)
            #expect(sample(#"haul_queue_downloads{state="running"}"#, in: text) == 0)
            #expect(sample(#"haul_queue_downloads{state="waiting"}"#, in: text) == 0)
            metrics.stop()
        }
    }

    @Test("running downloads per host: the busiest hosts by name, the rest as other, and none once they end")
    func runningPerHost() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let registry = PrometheusCollectorRegistry()
            let queue = makeQueue(.init(maxConcurrentDownloads: 5))
            let metrics = QueueMetrics(
                queue: queue, factory: PrometheusMetricsFactory(registry: registry), hostLabels: 1)
            metrics.start()
            let hosts = ["127.0.0.1", "127.0.0.1", "127.0.0.1", "localhost", "localhost"]
            let handles = queue.add(
                hosts.enumerated().map { index, host in
                    DownloadRequest(
                        url: server.url(path: "/bytes/h\(index)", query: ["size": "100", "hold": "g"], host: host),
                        destination: .directory(dir.url))
                })
            try await eventually("five held") { server.heldCount(at: "g") == 5 }
            await metrics.refresh()
            let text = registry.emitToString()
            // A host is the queue's: scheme, name and port.
            #expect(sample(#"haul_downloads_running{host="http://127.0.0.1:\#(server.port)"}"#, in: text) == 3)
            #expect(sample(#"haul_downloads_running{host="other"}"#, in: text) == 2)
            #expect(!text.contains("localhost"))
            #expect(sample(#"haul_queue_downloads{state="running"}"#, in: text) == 5)
            server.openGate("g")
            for handle in handles { _ = try await handle.result }
            await metrics.refresh()
            #expect(!registry.emitToString().contains("haul_downloads_running{"))
            metrics.stop()
        }
    }

    @Test("/metrics needs the bearer token when one is set; /healthz does not; /readyz names the failing check")
    func endpoint() async throws {
        let registry = PrometheusCollectorRegistry()
        Counter(label: "haul_test_total", factory: PrometheusMetricsFactory(registry: registry)).increment()
        let database = Locked<String?>("connection refused")
        let endpoint = MonitoringEndpoint(
            registry: registry, bearerToken: "s3cret",
            readiness: [
                .init("database") { database.withLock { $0 } }, .init("journal") { nil },
                .init("stuck") {
                    try? await Task.sleep(for: .seconds(60))
                    return nil
                },
            ], checkTimeout: .milliseconds(200), unauthorizedDelay: .milliseconds(10))
        for authorization in [nil, "Bearer wrong", "Basic czNjcmV0", "Bearer s3cre", "bearer"] {
            let answer = try #require(
                await endpoint.respond(method: "GET", path: "/metrics", authorization: authorization))
            #expect(answer.status == 401)
            #expect(!String(decoding: answer.body, as: UTF8.self).contains("haul_test_total"))
        }
        let scraped = try #require(
            await endpoint.respond(method: "GET", path: "/metrics?x=1", authorization: "Bearer s3cret"))
        #expect(
            scraped.status == 200 && sample("haul_test_total", in: String(decoding: scraped.body, as: UTF8.self)) == 1)
        #expect(await endpoint.respond(method: "GET", path: "/healthz", authorization: nil)?.status == 200)
        #expect(await endpoint.respond(method: "POST", path: "/healthz", authorization: nil)?.status == 405)
        #expect(await endpoint.respond(method: "GET", path: "/jsonrpc", authorization: nil) == nil)
        let notReady = try #require(await endpoint.respond(method: "GET", path: "/readyz", authorization: nil))
        let body = String(decoding: notReady.body, as: UTF8.self)
        #expect(notReady.status == 503)
        #expect(body.contains(#""database":"connection refused""#) && body.contains(#""journal":"ok""#))
        #expect(body.contains(#""stuck":"no answer within"#))
    }

    @Test("wrong tokens are answered one after another, each held back, however many come at once; a right one not")
    func wrongTokensHeldBack() async throws {
        let delay = Duration.milliseconds(150)
        let endpoint = MonitoringEndpoint(
            registry: PrometheusCollectorRegistry(), bearerToken: "s3cret", unauthorizedDelay: delay)
        let started = ContinuousClock.now
        let statuses = await withTaskGroup(of: Int.self) { group in
            for index in 0..<8 {
                group.addTask {
                    await endpoint.respond(method: "GET", path: "/metrics", authorization: "Bearer guess\(index)")?
                        .status ?? 0
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(statuses == Array(repeating: 401, count: 8))
        #expect(ContinuousClock.now - started >= delay * 8)
        let right = ContinuousClock.now
        #expect(await endpoint.respond(method: "GET", path: "/metrics", authorization: "Bearer s3cret")?.status == 200)
        #expect(ContinuousClock.now - right < delay)
    }

    @Test("MonitoringServer closes a request that stalls, and connections over its limit as soon as they are accepted")
    func serverAgainstStalls() async throws {
        let server = try await MonitoringServer.start(
            endpoint: MonitoringEndpoint(registry: PrometheusCollectorRegistry()), host: "127.0.0.1", port: 0,
            requiresAddressHost: true, requestTimeout: .milliseconds(300), maxConnections: 2)
        let port = server.port
        // A head that never ends, then a connection idle after its answer: each closed after the timeout.
        let stalled = try await sendUntilClosed(
            port: port, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ", waiting: 20)
        #expect(stalled == [])
        let idle = try await sendUntilClosed(
            port: port, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", waiting: 20
        ).map { String(decoding: $0, as: UTF8.self) }
        #expect(idle?.hasPrefix("HTTP/1.1 200") == true)
        await server.stop()
        // On a server of its own (the closed connections above counted off whenever their close is done): two held
        // open, each answered once so that the server has them, and the third closed unanswered.
        let limited = try await MonitoringServer.start(
            endpoint: MonitoringEndpoint(registry: PrometheusCollectorRegistry()), host: "127.0.0.1", port: 0,
            requiresAddressHost: true, maxConnections: 2)
        let limitedPort = limited.port
        let held = try await onOwnThread { () -> [Int32] in
            try (0..<2).map { _ in
                let fd = try connectedLoopbackSocket(port: limitedPort)
                writeAll(fd, Array("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
                var buffer = [UInt8](repeating: 0, count: 4096)
                _ = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                return fd
            }
        }
        let refused = try await sendUntilClosed(
            port: limitedPort, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", waiting: 0.2)
        #expect(refused == [])
        for fd in held { close(fd) }
        await limited.stop()
    }

    @Test("connections waiting for wrong tokens' held-back 401s give their place to a scraper with the right token")
    func heldGuessesGiveWay() async throws {
        let endpoint = MonitoringEndpoint(
            registry: PrometheusCollectorRegistry(), bearerToken: "s3cret", unauthorizedDelay: .seconds(30))
        let server = try await MonitoringServer.start(
            endpoint: endpoint, host: "127.0.0.1", port: 0, requiresAddressHost: true, maxConnections: 2)
        defer { Task { await server.stop() } }
        let port = server.port
        // Every slot taken by a guess whose answer is held back 30 s and more.
        let guesses = try (0..<2).map { index in
            let fd = try connectedLoopbackSocket(port: port)
            writeAll(
                fd,
                Array("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer guess\(index)\r\n\r\n".utf8))
            return fd
        }
        defer { for fd in guesses { close(fd) } }
        // Until the server has read both guesses a new connection is refused; then one of them makes room.
        var status = 0
        try await eventuallyAsync("the right token is answered", within: .seconds(10)) {
            status =
                (try? await RawHTTP.send(
                    port: port, method: "GET", path: "/metrics",
                    headers: [("Host", "127.0.0.1"), ("Authorization", "Bearer s3cret")]))?.status ?? 0
            return status == 200
        }
        #expect(status == 200)
    }

    @Test("MonitoringServer answers on its own port, and refuses a Host that is a name unless a token is asked")
    func server() async throws {
        let registry = PrometheusCollectorRegistry()
        Counter(label: "haul_test_total", factory: PrometheusMetricsFactory(registry: registry)).increment()
        let ready = Locked(false)
        let endpoint = MonitoringEndpoint(
            registry: registry, readiness: [.init("database") { ready.withLock { $0 } ? nil : "down" }])
        let server = try await MonitoringServer.start(
            endpoint: endpoint, host: "127.0.0.1", port: 0, requiresAddressHost: true)
        let port = server.port
        func get(_ path: String, host: String) async throws -> HTTPAnswer {
            try await RawHTTP.send(port: port, method: "GET", path: path, headers: [("Host", host)])
        }
        let metrics = try await get("/metrics", host: "127.0.0.1:\(port)")
        #expect(metrics.status == 200 && sample("haul_test_total", in: metrics.text) == 1)
        #expect(try await get("/metrics", host: "localhost:\(port)").status == 200)
        #expect(try await get("/metrics", host: "[::1]:\(port)").status == 200)
        #expect(try await get("/metrics", host: "evil.example:\(port)").status == 403)
        #expect(try await get("/metrics", host: "127.0.0.1.evil.example:\(port)").status == 403)
        #expect(try await get("/readyz", host: "127.0.0.1:\(port)").status == 503)
        ready.withLock { $0 = true }
        #expect(try await get("/readyz", host: "127.0.0.1:\(port)").status == 200)
        #expect(try await get("/jsonrpc", host: "127.0.0.1:\(port)").status == 404)
        // HEAD: the length of what GET would send, and no body.
        let headAnswer = try await RawHTTP.send(
            port: port, method: "HEAD", path: "/healthz", headers: [("Host", "127.0.0.1")])
        let getAnswer = try await get("/healthz", host: "127.0.0.1")
        #expect(headAnswer.status == 200 && headAnswer.body.isEmpty)
        #expect(headAnswer.header("Content-Length") == String(getAnswer.body.count) && !getAnswer.body.isEmpty)
        let big = try await RawHTTP.send(
            port: port, method: "POST", path: "/healthz", headers: [("Host", "127.0.0.1")],
            body: [UInt8](repeating: 65, count: 100_000))
        #expect(big.status == 413)
        await server.stop()
    }
}
