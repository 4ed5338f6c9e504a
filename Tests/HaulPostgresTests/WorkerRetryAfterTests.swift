import Foundation
import Haul
import HaulNIO
import HaulTestServer
import HaulTestSupport
import PostgresNIO
import Testing

@testable import HaulPostgres

/// A worker takes its retry and host-hold decisions from the engine's rule (`RetryPolicy`), against a real
/// PostgreSQL 15 and a server that answers `503` with `Retry-After`.
@Suite(
    "SharedQueueWorker: Retry-After as the retry policy says", .timeLimit(.minutes(2)), .serialized,
    .enabled(if: TestPlatform.isLinux, "runs Debian's PostgreSQL 15, which scripts/test installs"))
struct WorkerRetryAfterTests {
    /// Runs one download whose first answer is a 503 with `Retry-After: 30` under `policy`; returns the worker's
    /// report, how long the run took, and how long the database held the host back from when the failure was
    /// recorded (in seconds; zero or less for no hold).
    private func runFlaky(_ policy: RetryPolicy) async throws -> (WorkerReport, Duration, hold: Double) {
        var outcome: (WorkerReport, Duration, hold: Double)?
        try await withFixtures { server, database, directory in
            try await SharedQueue.withQueue(database) { queue in
                let flaky = server.url(
                    path: "/bytes/flaky", query: ["fail": "1", "failStatus": "503", "retryAfter": "30"])
                try await queue.enqueue([try SharedDownload(request: request(flaky), path: "flaky")])
                let configuration = SharedQueueWorker.Configuration(
                    directory: directory.url, maxConcurrent: 1, exitsWhenEmpty: true, retryPolicy: policy,
                    pollInterval: .milliseconds(50))
                let started = ContinuousClock.now
                let worker = Task {
                    await SharedQueueWorker(queue: queue, transport: NIOTransport(), configuration: configuration).run()
                }
                // The first attempt's end, once recorded (attempt 1, waiting or already done), and the host's hold
                // then: a claim sets `not_before` to its own time, a hold later than that. Measured from
                // `clock_timestamp()`: a statement's `now()` is when its transaction began, which on a loaded machine
                // can come before the completion whose result it reads (the hold then looked longer than it was).
                var hold: Double?
                while hold == nil {
                    let rows = try await queue.rows(
                        """
                        SELECT d.state, (extract(epoch FROM h.not_before - clock_timestamp()))::float8
                        FROM haul_download d JOIN haul_host h ON h.queue = d.queue AND h.host = d.host
                        WHERE d.queue = \(queue.name) AND d.attempt >= 1
                        """, "reading the host's hold", as: (String, Double).self)
                    if let (state, left) = rows.first, state == "waiting" || state == "done" {
                        hold = left
                    } else {
                        try await Task.sleep(for: .milliseconds(10))
                    }
                }
                let report = await worker.value
                outcome = (report, ContinuousClock.now - started, try #require(hold))
            }
        }
        return try #require(outcome)
    }

    @Test("a policy that does not honour Retry-After retries after its backoff and holds no host")
    func notHonoured() async throws {
        let (report, elapsed, hold) = try await runFlaky(
            RetryPolicy(initialDelay: .milliseconds(10), jitter: .none, honoursRetryAfter: false))
        #expect(report.done == 1 && report.retried == 1)
        #expect(hold <= 0.05, "the host was held although the policy does not honour Retry-After")
        #expect(elapsed < .seconds(1))
    }

    @Test("a policy that honours Retry-After holds the host for min(Retry-After, maxRetryAfter)")
    func honoured() async throws {
        let (report, elapsed, hold) = try await runFlaky(
            RetryPolicy(initialDelay: .milliseconds(10), jitter: .none, maxRetryAfter: .seconds(2)))
        #expect(report.done == 1 && report.retried == 1)
        #expect(hold > 1 && hold <= 2, "the host's hold was \(hold) s, not min(30 s, 2 s)")
        #expect(elapsed >= .seconds(2), "the retry came before maxRetryAfter")
        #expect(elapsed < .seconds(30), "the retry waited for the whole Retry-After, not maxRetryAfter")
    }
}
