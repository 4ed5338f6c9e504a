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

    /// `--json` is for scripts: what a server sent is kept exactly, a C1 control escaped (`\u009b`) rather than
    /// replaced, as `haul get --json` keeps it; a terminal showing the line still sees no control.
    @Test("worker --json and status --json keep a server's C1 controls, escaped, not replaced")
    func jsonKeepsC1Escaped() async throws {
        let reason = "Gone \u{9B}2J\u{9D}52;c;aGFjaw==\u{9C}"
        let response = Array("HTTP/1.1 404 \(reason)\r\nContent-Length: 0\r\n\r\n".utf8)
        try await PostgresServer.withRunning { postgres in
            try await RawServer.withRunning(responses: [response]) { port in
                let root = try TemporaryDirectory()
                let db = ["--db", postgres.url]
                let url = "http://127.0.0.1:\(port)/f.bin"
                #expect(try await HaulProcess.run(["enqueue"] + db + [url]).status == 0)
                let worker = try await HaulProcess.run(["worker", "-d", root.path, "--until-empty", "--json"] + db)
                let status = try await HaulProcess.run(["status", "--json"] + db)
                for (name, run) in [("worker", worker), ("status", status)] {
                    let c1 = run.stdout.unicodeScalars.filter { (0x80...0x9F).contains($0.value) }
                    #expect(c1.isEmpty, "\(name) --json carries \(c1.count) raw C1 controls: \(run)")
                    #expect(run.stdout.contains("\\u009b2J"), "\(name): \(run)")
                    #expect(!run.stdout.contains("\u{FFFD}"), "\(name) replaced what the server sent: \(run)")
                }
                let fail = try #require(
                    worker.stdout.split(separator: "\n").first { $0.contains("\"event\":\"fail\"") }, "\(worker)")
                let object = try #require(try JSONSerialization.jsonObject(with: Data(fail.utf8)) as? [String: Any])
                #expect((object["reason"] as? String)?.contains(reason) == true, "\(fail)")
            }
        }
    }
}
