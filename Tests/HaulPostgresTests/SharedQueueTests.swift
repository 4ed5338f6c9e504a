import Foundation
import Haul
import HaulNIO
import HaulTestServer
import HaulTestSupport
import PostgresNIO
import Testing

@testable import HaulPostgres

/// The shared queue against a real PostgreSQL 15 and a loopback HTTP server, workers in this process.
@Suite(
    "SharedQueue: enqueue, claim, complete", .timeLimit(.minutes(3)), .serialized,
    .enabled(if: TestPlatform.isLinux, "runs Debian's PostgreSQL 15, which scripts/test installs"))
struct SharedQueueTests {
    @Test("a list fetched by one worker: every file byte-identical, recorded with its size, SHA-256 and worker")
    func oneWorker() async throws {
        try await withFixtures { server, database, directory in
            try await SharedQueue.withQueue(database) { queue in
                let downloads = try (0..<20).map { index in
                    try SharedDownload(
                        request: request(server.url(path: "/bytes/f\(index)", query: ["size": "\(1000 + index)"])),
                        path: "sub/f\(index).bin")
                }
                let added = try await queue.enqueue(downloads)
                #expect(added == EnqueueReport(added: 20, alreadyQueued: 0))
                let worker = SharedQueueWorker(
                    queue: queue, transport: NIOTransport(),
                    configuration: .init(directory: directory.url, maxConcurrent: 4, exitsWhenEmpty: true))
                let report = await worker.run()
                #expect(report == WorkerReport(done: 20))
                for index in 0..<20 {
                    let bytes = contentsOf(directory.url.appendingPathComponent("sub/f\(index).bin"))
                    let identical = bytes == TestServer.expectedBytes(name: "f\(index)", size: 1000 + index)
                    #expect(identical, "sub/f\(index).bin")
                }
                let status = try await queue.status()
                #expect(status.done == 20 && status.waiting == 0 && status.running == 0 && status.failed == 0)
                #expect(status.bytesDone == Int64((0..<20).reduce(0) { $0 + 1000 + $1 }))
                let files = try await queue.files()
                #expect(files.count == 20)
                for file in files {
                    let index = Int(file.path.dropFirst("sub/f".count).dropLast(".bin".count)) ?? -1
                    #expect(file.sha256 == sha256Hex(TestServer.expectedBytes(name: "f\(index)", size: 1000 + index)))
                    #expect(file.directory == directory.url.path && file.size == Int64(1000 + index))
                }
                #expect(server.stats.requestCount == 20)
            }
        }
    }

    @Test("the same list enqueued twice is one download each; a path queued for another URL adds nothing")
    func duplicatesAndConflicts() async throws {
        try await withFixtures { server, database, _ in
            try await SharedQueue.withQueue(database) { queue in
                let list = try (0..<5).map { index in
                    try download("d\(index)", from: server)
                }
                #expect(try await queue.enqueue(list + [list[0]]) == EnqueueReport(added: 5, alreadyQueued: 1))
                #expect(try await queue.enqueue(list) == EnqueueReport(added: 0, alreadyQueued: 5))
                let other = try SharedDownload(request: request(server.url(path: "/bytes/other")), path: "d3")
                let fresh = try download("new", from: server)
                let error = await #expect(throws: SharedQueueError.self) {
                    try await queue.enqueue([fresh, other])
                }
                #expect(error?.code == .conflict)
                #expect(error?.message.contains("path 'd3' is queued already for") == true)
                let status = try await queue.status()
                #expect(status.waiting == 5)
            }
        }
    }

    @Test("a new token renews a waiting or cancelled download (the new URL is claimed); host counters stay right")
    func renewals() async throws {
        try await withFixtures { server, database, directory in
            try await SharedQueue.withQueue(database) { queue in
                let old = try ["a", "b"].map { try download($0, from: server, query: ["token": "old"]) }
                #expect(try await queue.enqueue(old) == EnqueueReport(added: 2, alreadyQueued: 0))
                #expect(try await queue.cancel(.url(old[1].request.url.absoluteString)) == 1)
                let fresh = try ["a", "b"].map { try download($0, from: server, query: ["token": "new"]) }
                #expect(try await queue.enqueue(fresh) == EnqueueReport(added: 0, alreadyQueued: 0, renewed: 2))
                // The same again: nothing to renew.
                #expect(try await queue.enqueue(fresh) == EnqueueReport(added: 0, alreadyQueued: 2, renewed: 0))
                let status = try await queue.status()
                #expect(status.waiting == 2 && status.cancelled == 0, "\(status)")
                let worker = SharedQueueWorker(
                    queue: queue, transport: NIOTransport(),
                    configuration: .init(directory: directory.url, maxConcurrent: 2, exitsWhenEmpty: true))
                #expect(await worker.run() == WorkerReport(done: 2))
                #expect(
                    server.stats.requests.allSatisfy { $0.target.contains("token=new") }, "\(server.stats.requests)")
                #expect(server.stats.requestCount == 2)
            }
        }
    }

    @Test("enqueues at once: lists sharing paths in opposite orders both land; a path given two URLs is refused")
    func concurrentEnqueues() async throws {
        try await withFixtures { server, database, _ in
            try await SharedQueue.withQueue(database) { queue in
                // Both transactions read their whole input, then wait for each other: their conflict checks and
                // inserts start together.
                let list = try (0..<2_000).map { index in
                    try download("o\(index)", from: server)
                }
                let together = Barrier(parties: 2)
                async let forward = queue.enqueue(HeldList(items: list, barrier: together))
                async let backward = queue.enqueue(HeldList(items: list.reversed(), barrier: together))
                let reports = try await [forward, backward]
                #expect(reports.map(\.added).reduce(0, +) == 2_000)
                #expect(reports.map(\.alreadyQueued).reduce(0, +) == 2_000)
                #expect(try await queue.status().waiting == 2_000)

                func clashing(_ name: String) throws -> [SharedDownload] {
                    try (0..<200).map { index in
                        try download("\(name)\(index)", from: server)
                    } + [SharedDownload(request: request(server.url(path: "/bytes/\(name)-clash")), path: "clash")]
                }
                let again = Barrier(parties: 2)
                func enqueueClashing(_ name: String) async -> Result<EnqueueReport, any Error> {
                    do {
                        return .success(try await queue.enqueue(HeldList(items: try clashing(name), barrier: again)))
                    } catch {
                        return .failure(error)
                    }
                }
                async let first = enqueueClashing("a")
                async let second = enqueueClashing("b")
                let results = await [first, second]
                let added = results.compactMap { try? $0.get() }
                #expect(added == [EnqueueReport(added: 201, alreadyQueued: 0)], "\(results)")
                let refusal = results.compactMap { result -> SharedQueueError? in
                    guard case .failure(let error) = result else { return nil }
                    return error as? SharedQueueError
                }
                #expect(refusal.map(\.code) == [.conflict])
                #expect(refusal.first?.message.contains("path 'clash' is queued already for") == true)
                #expect(try await queue.status().waiting == 2_201)
            }
        }
    }

    @Test("a worker silent past its lease loses its claims; its late completion is refused")
    func lostLease() async throws {
        try await withFixtures { server, database, directory in
            try await SharedQueue.withQueue(database) { queue in
                try await queue.enqueue(
                    try (0..<3).map {
                        try download("l\($0)", from: server)
                    },
                    hostSettings: HostSettings(maxConnectionsPerHost: 2))
                let silent = try await queue.registerWorker(name: "silent", directory: "/x", lease: .milliseconds(300))
                let claims = try await queue.claim(worker: silent, limit: 10)
                // Two: the host takes two connections at once, from all workers together.
                #expect(claims.count == 2)
                let other = try await queue.registerWorker(name: "other", directory: "/y", lease: .seconds(30))
                #expect(try await queue.claim(worker: other, limit: 10).isEmpty)
                try await Task.sleep(for: .milliseconds(400))
                #expect(try await queue.rescue() == 2)
                #expect(try await !queue.heartbeat(worker: silent, timeout: .seconds(5)).alive)
                #expect(try await queue.claim(worker: silent, limit: 10).isEmpty)
                let late = try await queue.complete(
                    worker: silent, claims.map { Completion(id: $0.id, kind: .done, size: 1) })
                #expect(late.isEmpty)
                let retaken = try await queue.claim(worker: other, limit: 10)
                #expect(retaken.count == 2)
                #expect(Set(retaken.map(\.id)) == Set(claims.map(\.id)) || retaken.count == 2)
                let accepted = try await queue.complete(
                    worker: other, retaken.map { Completion(id: $0.id, kind: .done, size: 1) })
                #expect(accepted == Set(retaken.map(\.id)))
                let status = try await queue.status()
                #expect(status.done == 2 && status.waiting == 1 && status.running == 0)
                #expect(status.hosts.first?.running == 0)
                _ = directory
            }
        }
    }

    @Test("a worker whose database goes silent (nothing reset, nothing answered) lets go before another takes over")
    func silentDatabase() async throws {
        try await PostgresServer.withRunning { postgres in
            try await TestServer.withRunning { server in
                let relay = try TCPRelay(to: postgres.port)
                defer { relay.cut() }
                let silentURL = try DatabaseURL("postgres://haul@127.0.0.1:\(relay.port)/postgres?sslmode=disable")
                let (silentDirectory, otherDirectory) = (try TemporaryDirectory(), try TemporaryDirectory())
                try await SharedQueue.withQueue(try DatabaseURL(postgres.url)) { queue in
                    try await queue.enqueue(
                        try (0..<2).map {
                            try download("s\($0)", from: server, query: ["size": "50000", "hold": "s"])
                        })
                    try await SharedQueue.withQueue(silentURL, statementTimeout: .seconds(1)) { silentQueue in
                        let silent = SharedQueueWorker(
                            queue: silentQueue, transport: NIOTransport(),
                            configuration: .init(directory: silentDirectory.url, maxConcurrent: 2, lease: .seconds(3)))
                        let lost = Task { await silent.events.first { $0 == .leaseLost } != nil }
                        let silentRun = Task { await silent.run() }
                        try await eventually("both requests held", within: .seconds(20)) {
                            server.heldCount(at: "s") == 2
                        }
                        relay.silence()
                        // The other worker may take the two once the silent one's lease has run out; by then the
                        // silent one must have stopped fetching them: the server never sees more than two at once.
                        let other = SharedQueueWorker(
                            queue: queue, transport: NIOTransport(),
                            configuration: .init(
                                directory: otherDirectory.url, maxConcurrent: 2, lease: .seconds(3),
                                exitsWhenEmpty: true))
                        let otherRun = Task { await other.run() }
                        try await eventually("both taken over", within: .seconds(30)) {
                            server.stats.requestCount == 4 && server.stats.inFlight == 2
                        }
                        #expect(await lost.value)
                        server.openGate("s")
                        #expect(await otherRun.value.done == 2)
                        silentRun.cancel()
                        relay.cut()
                        #expect(await silentRun.value.done == 0)
                    }
                    #expect(server.stats.maxInFlight == 2)
                    let files = try await queue.files()
                    #expect(files.map(\.directory) == [otherDirectory.url.path, otherDirectory.url.path])
                    for index in 0..<2 {
                        #expect(
                            contentsOf(otherDirectory.file("s\(index)"))
                                == TestServer.expectedBytes(name: "s\(index)", size: 50_000))
                        #expect(!FileManager.default.fileExists(atPath: silentDirectory.file("s\(index)").path))
                    }
                }
            }
        }
    }

    @Test("a per-host rate spaces the starts of one host's downloads across two workers")
    func perHostRate() async throws {
        try await withFixtures { server, database, directory in
            try await SharedQueue.withQueue(database) { queue in
                let downloads = try (0..<8).map {
                    try download("p\($0)", from: server)
                }
                try await queue.enqueue(downloads, hostSettings: HostSettings(minimumInterval: .milliseconds(150)))
                let reports = await withTaskGroup(of: WorkerReport.self) { group in
                    for number in 1...2 {
                        group.addTask {
                            await SharedQueueWorker(
                                queue: queue, transport: NIOTransport(),
                                configuration: .init(
                                    directory: directory.url.appendingPathComponent("w\(number)"), maxConcurrent: 4,
                                    exitsWhenEmpty: true, pollInterval: .milliseconds(50))
                            ).run()
                        }
                    }
                    return await group.reduce(into: [WorkerReport]()) { $0.append($1) }
                }
                #expect(reports.map(\.done).reduce(0, +) == 8)
                let starts = server.stats.requests.map(\.receivedAt).sorted()
                #expect(starts.count == 8)
                // Seven intervals of 150 ms at least between the first start and the last, whoever claimed them.
                if let first = starts.first, let last = starts.last {
                    #expect(last - first >= .milliseconds(7 * 150 - 60), "\(last - first)")
                }
            }
        }
    }

    @Test(
        "a per-host rate of 10/s reaches 10 starts a second, not one a poll, with one worker or three",
        arguments: [1, 3])
    func perHostRateIsReached(workers: Int) async throws {
        try await withFixtures { server, database, directory in
            try await SharedQueue.withQueue(database) { queue in
                let downloads = try (0..<12).map { try download("r\($0)", from: server) }
                try await queue.enqueue(downloads, hostSettings: HostSettings(minimumInterval: .milliseconds(100)))
                let reports = await withTaskGroup(of: WorkerReport.self) { group in
                    for number in 1...workers {
                        group.addTask {
                            // The default poll interval (1 s): a host's turn must not wait for it.
                            await SharedQueueWorker(
                                queue: queue, transport: NIOTransport(),
                                configuration: .init(
                                    directory: directory.url.appendingPathComponent("w\(number)"), maxConcurrent: 4,
                                    exitsWhenEmpty: true)
                            ).run()
                        }
                    }
                    return await group.reduce(into: [WorkerReport]()) { $0.append($1) }
                }
                #expect(reports.map(\.done).reduce(0, +) == 12)
                let starts = server.stats.requests.map(\.receivedAt).sorted()
                // Claims are spaced by the database; what reaches the server carries each request's own latency.
                // Never faster than the rate over the whole, and not a poll interval apart: 11 turns of 0.1 s take
                // about 1.1 s (one a poll took 11 s).
                if let first = starts.first, let last = starts.last {
                    #expect(last - first >= .milliseconds(11 * 100 - 60), "\(last - first)")
                    #expect(last - first < .seconds(4), "\(last - first)")
                }
            }
        }
    }

    @Test("cancelling running downloads in the database stops them at the worker's next heartbeat; no file is left")
    func cancelRunning() async throws {
        try await withFixtures { server, database, directory in
            try await SharedQueue.withQueue(database) { queue in
                let downloads = try (0..<3).map {
                    try download("c\($0)", from: server, query: ["size": "50000", "hold": "c"])
                }
                try await queue.enqueue(downloads)
                let worker = SharedQueueWorker(
                    queue: queue, transport: NIOTransport(),
                    configuration: .init(
                        directory: directory.url, maxConcurrent: 4, lease: .milliseconds(1_200), exitsWhenEmpty: true))
                let run = Task { await worker.run() }
                try await eventually("3 requests held", within: .seconds(20)) { server.heldCount(at: "c") == 3 }
                #expect(try await queue.cancel(.all) == 3)
                let report = await run.value
                #expect(report.done == 0 && report.returned == 3, "\(report)")
                let status = try await queue.status()
                #expect(status.cancelled == 3 && status.running == 0 && status.waiting == 0, "\(status)")
                #expect(status.hosts.allSatisfy { $0.running == 0 && $0.waiting == 0 })
                #expect(directory.contents().filter { !$0.hasPrefix(".") }.isEmpty)
                server.openGate("c")
            }
        }
    }

    @Test("a stopping worker hands back what the database still has running for it (a claim whose answer it lost)")
    func stopHandsBackStrangers() async throws {
        try await withFixtures { server, database, _ in
            try await SharedQueue.withQueue(database) { queue in
                try await queue.enqueue(
                    try (0..<4).map {
                        try download("s\($0)", from: server)
                    })
                let worker = try await queue.registerWorker(name: "w", directory: "/w", lease: .seconds(30))
                #expect(try await queue.claim(worker: worker, limit: 3).count == 3)
                try await queue.stopWorker(worker)
                let status = try await queue.status()
                #expect(status.waiting == 4 && status.running == 0, "\(status)")
                #expect(status.hosts.allSatisfy { $0.running == 0 && $0.waiting == 4 })
            }
        }
    }

    @Test("hosts whose downloads all wait for a retry's time do not hide a host that is ready")
    func backoffHostsDoNotBlock() async throws {
        try await withFixtures { server, database, _ in
            try await SharedQueue.withQueue(database) { queue in
                // 30 hosts (ports that nothing listens on: nothing is fetched) whose one download waits a retry.
                let waiting = try (0..<30).map { index in
                    try SharedDownload(
                        request: request(URL(string: "http://127.0.0.1:\(20_000 + index)/b")!), path: "b\(index)")
                }
                try await queue.enqueue(waiting)
                try await queue.execute(
                    "UPDATE haul_download SET run_after = now() + interval '1 hour'", "pushing the retries back")
                try await queue.enqueue([try download("r", from: server)])
                let worker = try await queue.registerWorker(name: "w", directory: "/w", lease: .seconds(30))
                let claims = try await queue.claim(worker: worker, limit: 1)
                #expect(claims.map(\.path) == ["r"])
            }
        }
    }

    @Test("the schema is made once and versioned; a database of a newer Haul is refused, not changed")
    func schemaVersion() async throws {
        try await withFixtures { _, database, _ in
            // Two queues opening a new database at once: one makes the tables, the other finds them.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for name in ["a", "b"] {
                    group.addTask { try await SharedQueue.withQueue(database, name: name) { _ in } }
                }
                try await group.waitForAll()
            }
            try await SharedQueue.withQueue(database) { queue in
                let versions = try await queue.rows("SELECT version FROM haul_schema", "reading", as: (Int32).self)
                #expect(versions == [Int32(Schema.version)])
                try await queue.execute("UPDATE haul_schema SET version = 99", "pretending to be newer")
            }
            let error = await #expect(throws: SharedQueueError.self) {
                try await SharedQueue.withQueue(database) { _ in }
            }
            #expect(error?.code == .schema)
            #expect(error?.message.contains("version 99") == true, "\(error?.message ?? "")")
        }
    }

    @Test("retries live in the database: a 503 with Retry-After goes back with run_after; attempts run out to failed")
    func retries() async throws {
        try await withFixtures { server, database, directory in
            try await SharedQueue.withQueue(database) { queue in
                let flaky = server.url(
                    path: "/bytes/flaky", query: ["fail": "1", "failStatus": "503", "retryAfter": "1"])
                let broken = server.url(path: "/bytes/broken", query: ["fail": "9", "failStatus": "500"])
                let gone = server.url(path: "/bytes/gone", query: ["status": "404"])
                try await queue.enqueue([
                    try SharedDownload(request: request(flaky), path: "flaky"),
                    try SharedDownload(request: request(broken), path: "broken", maxAttempts: 2),
                    try SharedDownload(request: request(gone), path: "gone"),
                ])
                var configuration = SharedQueueWorker.Configuration(
                    directory: directory.url, maxConcurrent: 2, exitsWhenEmpty: true,
                    retryPolicy: RetryPolicy(initialDelay: .milliseconds(10)), pollInterval: .milliseconds(100))
                configuration.name = "retrying"
                let started = ContinuousClock.now
                let report = await SharedQueueWorker(
                    queue: queue, transport: NIOTransport(), configuration: configuration
                ).run()
                #expect(report.done == 1 && report.failed == 2 && report.retried == 2)
                // The Retry-After second held the host for every worker.
                #expect(ContinuousClock.now - started >= .seconds(1))
                let status = try await queue.status()
                #expect(status.done == 1 && status.failed == 2)
                let reasons = Dictionary(uniqueKeysWithValues: status.failures.map { ($0.path, $0) })
                #expect(reasons["broken"]?.attempts == 2)
                #expect(reasons["broken"]?.reason.contains("500") == true)
                #expect(reasons["gone"]?.attempts == 1)
                #expect(reasons["gone"]?.reason.contains("404") == true)
            }
        }
    }
}

@Suite(
    "SharedQueue: the database over TLS", .timeLimit(.minutes(2)), .serialized,
    .enabled(if: TestPlatform.isLinux, "runs Debian's PostgreSQL 15, which scripts/test installs"))
struct SharedQueueTLSTests {
    @Test("sslmode=verify-full with the server's CA connects; another CA, or TLS from a server without it, is refused")
    func verifiedTLS() async throws {
        let issued = try TestTLS.authority.serverCertificate(.valid)
        try await PostgresServer.withRunning(tls: (issued.certificatePEM, issued.keyPEM)) { postgres in
            let base = "postgres://haul@127.0.0.1:\(postgres.port)/postgres"
            let verified = try DatabaseURL(base + "?sslmode=verify-full&sslrootcert=\(TestTLS.caFile)")
            let status = try await SharedQueue.withQueue(verified) { try await $0.status() }
            #expect(status.waiting == 0)
            let other = try TestCertificateAuthority()
            let directory = try TemporaryDirectory()
            try other.writeCertificate(to: directory.file("other.pem"))
            let wrongCA = try DatabaseURL(base + "?sslmode=verify-full&sslrootcert=\(directory.file("other.pem").path)")
            let refused = await #expect(throws: SharedQueueError.self) {
                try await SharedQueue.withQueue(wrongCA) { _ in }
            }
            #expect(refused?.code == .database)
            #expect(refused?.message.contains("certificate") == true, "\(refused?.message ?? "")")
        }
        try await PostgresServer.withRunning { postgres in
            let url = try DatabaseURL("postgres://haul@127.0.0.1:\(postgres.port)/postgres?sslmode=require")
            let refused = await #expect(throws: SharedQueueError.self) {
                try await SharedQueue.withQueue(url) { _ in }
            }
            #expect(refused?.message.contains("does not offer TLS") == true, "\(refused?.message ?? "")")
        }
    }
}

/// A list that, once read to its end, waits until every party of `barrier` has read its own: enqueues of such lists
/// reach their conflict checks and inserts together.
struct HeldList: AsyncSequence, Sendable {
    let items: [SharedDownload]
    let barrier: Barrier

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(items: items, barrier: barrier) }

    struct AsyncIterator: AsyncIteratorProtocol {
        let items: [SharedDownload]
        let barrier: Barrier
        var index = 0

        mutating func next() async -> SharedDownload? {
            defer { index += 1 }
            if index < items.count { return items[index] }
            if index == items.count { await barrier.arrive() }
            return nil
        }
    }
}

/// Holds each arriving task until `parties` have arrived.
actor Barrier {
    private let parties: Int
    private var waiting: [CheckedContinuation<Void, Never>] = []

    init(parties: Int) { self.parties = parties }

    func arrive() async {
        guard waiting.count + 1 < parties else {
            for continuation in waiting { continuation.resume() }
            waiting = []
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }
}

/// A request for `url` (its destination is each worker's).
func request(_ url: URL) -> DownloadRequest {
    DownloadRequest(url: url, destination: .directory(URL(fileURLWithPath: "/")))
}

/// A download of the server's `/bytes/NAME` (bytes generated from NAME) at the path NAME.
func download(_ name: String, from server: TestServer, query: [String: String] = [:]) throws -> SharedDownload {
    try SharedDownload(request: request(server.url(path: "/bytes/\(name)", query: query)), path: name)
}

/// A loopback server, a PostgreSQL of the test's own, and a scratch directory.
func withFixtures(
    _ body: (TestServer, DatabaseURL, TemporaryDirectory) async throws -> Void
) async throws {
    try await PostgresServer.withRunning { postgres in
        try await TestServer.withRunning { server in
            try await body(server, try DatabaseURL(postgres.url), try TemporaryDirectory())
        }
    }
}
