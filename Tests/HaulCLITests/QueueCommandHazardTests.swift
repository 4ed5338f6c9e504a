import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `haul enqueue` and `haul queue` given numbers out of range: refused with exit 2, never a crash.
@Suite(
    "haul enqueue and queue against huge numbers", .timeLimit(.minutes(2)), .serialized,
    .enabled(if: TestPlatform.isLinux, "runs Debian's PostgreSQL 15, which scripts/test installs"))
struct QueueCommandHazardTests {
    @Test("a huge number is a usage error (exit 2), not a trap (SIGILL, exit 132)")
    func hugeNumbers() async throws {
        try await PostgresServer.withRunning { postgres in
            for arguments in [
                ["enqueue", "--retries", "9223372036854775807", "http://127.0.0.1:1/x"],
                ["queue", "purge", "--older-than", "99999999999999999d"],
                ["queue", "purge", "--older-than", "9223372036854775807s"],
            ] {
                let run = try await HaulProcess.run(arguments + ["--db", postgres.url])
                #expect(run.status == 2, "\(arguments): exit \(run.status)")
                #expect(!run.stderr.contains("Fatal error") && !run.stderr.contains("Crash"), "\(arguments)")
            }
        }
    }
}

/// `haul worker` killed: the claims it took ahead and never started are not lost.
@Suite(
    "haul worker killed with claims taken ahead", .timeLimit(.minutes(3)), .serialized,
    .enabled(if: TestPlatform.isLinux, "runs Debian's PostgreSQL 15, which scripts/test installs"))
struct WorkerKilledTests {
    @Test("SIGKILL: a download the worker had claimed ahead and never requested does not fail for good")
    func killedWorkerClaimedAhead() async throws {
        try await PostgresServer.withRunning { postgres in
            try await TestServer.withRunning { server in
                let root = try TemporaryDirectory()
                let urls = (0..<2).map {
                    server.url(path: "/bytes/a\($0)", query: ["size": "3000", "hold": "g"]).absoluteString
                }
                let enqueued = try await HaulProcess.run(["enqueue", "--db", postgres.url, "--retries", "0"] + urls)
                #expect(enqueued.status == 0, "\(enqueued)")
                let first = try HaulProcess([
                    "worker", "--db", postgres.url, "-d", root.path + "/w1", "-j", "1", "--lease", "2", "--name", "w1",
                ])
                try await eventually("one request held", within: .seconds(30)) { server.heldCount(at: "g") == 1 }
                // Both claimed: the one held, and the other taken ahead.
                try await eventuallyAsync("both claimed", within: .seconds(30)) {
                    let status = try? await HaulProcess.run(["status", "--db", postgres.url])
                    return status?.stdout.contains("2 running") == true
                }
                kill(first.pid, SIGKILL)
                _ = await first.finish()
                server.openGate("g")
                let second = try await HaulProcess.run([
                    "worker", "--db", postgres.url, "-d", root.path + "/w2", "-j", "1", "--lease", "2", "--name", "w2",
                    "--until-empty",
                ])
                let requested = server.stats.requests.map(\.path)
                let status = try await HaulProcess.run(["status", "--db", postgres.url])
                #expect(second.status == 0, "\(second)\n\(status.stdout)\nrequested: \(requested)")
                // a0 was being fetched when the worker was killed: with --retries 0 it may fail. a1 was never asked
                // for: it must not.
                #expect(!status.stdout.contains("  a1 ("), "\(status.stdout)\nrequested: \(requested)")
            }
        }
    }
}
