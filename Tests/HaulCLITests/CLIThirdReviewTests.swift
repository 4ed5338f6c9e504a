import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

/// A hostile review of what `haul status` prints of a shared queue: every worker of the fleet writes its name there.
@Suite(
    "haul status: third review", .timeLimit(.minutes(3)), .serialized,
    .enabled(if: TestPlatform.isLinux, "runs Debian's PostgreSQL 15, which scripts/test installs"))
struct CLIThirdReviewTests {
    /// `haul status` strips control characters from what it prints, but keeps line feeds: a worker name (anyone's
    /// `--name` on the shared queue) with one writes lines of its own into the status, here a forged failure.
    @Test("a worker's name cannot add lines to haul status")
    func workerNameCannotForgeStatusLines() async throws {
        try await PostgresServer.withRunning { postgres in
            try await TestServer.withRunning { server in
                let root = try TemporaryDirectory()
                let db = ["--db", postgres.url]
                #expect(try await HaulProcess.run(["enqueue"] + db + [bytes(server, "one", size: 10)]).status == 0)
                let name = "w1\nfailures:\n  forged.bin (http://example.com/, 9 attempts): forged"
                let run = try await HaulProcess.run(["worker", "-d", root.path, "--until-empty", "--name", name] + db)
                #expect(run.status == 0, "\(run)")
                let status = try await HaulProcess.run(["status"] + db)
                #expect(status.stdout.contains("w1"), "\(status)")
                let forged = status.stdout.split(separator: "\n").filter {
                    $0.hasPrefix("failures:") || $0.hasPrefix("  forged")
                }
                #expect(
                    forged.isEmpty, "a worker's name wrote lines into the status: \(status.stdout.debugDescription)")
            }
        }
    }
}
