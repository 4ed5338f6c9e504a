import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

/// `haul get` and a download's file: mirrors on an input line take over when a source fails, split or not, and a
/// rerun with fresh tokens in its URLs resumes the partials and skips the files the last run left.
@Suite("haul get: sources and tokens", .timeLimit(.minutes(3)))
struct GetSourcesTests {
    func events(_ output: String) -> [[String: Any]] {
        output.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    /// An input line: the URLs separated by tabs, the file's name under it.
    func input(_ dir: TemporaryDirectory, _ urls: [String], out: String) throws -> String {
        let file = dir.file("list.txt")
        try Data((urls.joined(separator: "\t") + "\n  out=\(out)\n").utf8).write(to: file)
        return file.path
    }

    @Test(
        "the first URL of a line answers 404: the next serves the file, split or not, small or large; --json says so",
        arguments: ["1", "4"], [30_000, 12_000_000])
    func firstSource404(split: String, size: Int) async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let gone = bytes(server, "m", size: size, ["status": "404"])
            let good = server.url(path: "/bytes/m", query: ["size": "\(size)"], host: "localhost").absoluteString
            let list = try input(dir, [gone, good], out: "m")
            let run = try await HaulProcess.run(["get", "--json", "-s", split, "-d", dir.path, "-i", list])
            #expect(run.status == 0, "\(run)")
            #expect(
                { contentsOf(dir.file("m")) == TestServer.expectedBytes(name: "m", size: size) }(),
                "not the server's bytes")
            let lines = events(run.stdout)
            let drop = try #require(lines.first { $0["event"] as? String == "drop" }, "\(run.stdout)")
            #expect(drop["url"] as? String == gone && drop["next"] as? String == good)
            #expect((drop["reason"] as? String)?.contains("404") == true)
            let finish = try #require(lines.first { $0["event"] as? String == "finish" })
            #expect(finish["source"] as? String == good)
        }
    }

    @Test("a line whose first URL cuts every time and whose second answers 404: the third serves it; the text says so")
    func cutThen404() async throws {
        try await TestServer.withRunning { server in
            let size = 2_000_000
            let dir = try TemporaryDirectory()
            let cutting = bytes(server, "c", size: size, ["cutAfter": "700000"])
            let gone = server.url(path: "/bytes/c", query: ["status": "404"], host: "localhost").absoluteString
            // Another URL of the same server: a source of its own (IPv6 may be off where CI runs).
            let good = server.url(path: "/bytes/c", query: ["size": "\(size)", "mirror": "3"]).absoluteString
            let list = try input(dir, [cutting, gone, good], out: "c")
            let run = try await HaulProcess.run(["get", "--retries", "1", "-d", dir.path, "-i", list])
            #expect(run.status == 0, "\(run)")
            #expect({ contentsOf(dir.file("c")) == TestServer.expectedBytes(name: "c", size: size) }())
            #expect(run.stdout.contains("drop   c: source \(cutting) dropped: connection lost"), "\(run.stdout)")
            #expect(run.stdout.contains("drop   c: source \(gone) dropped: server answered 404"), "\(run.stdout)")
            #expect(run.stdout.contains("from \(good)"), "\(run.stdout)")
            // The file's bytes once each, and the 404's short text.
            #expect(server.stats.bodyBytesSent == size + "404 Not Found\n".utf8.count, "a byte was sent twice")
        }
    }

    @Test("every URL of a line fails: exit 1, the message names each and its reason, nothing is left")
    func everySourceFails() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let gone = bytes(server, "x", size: 10, ["status": "404"])
            let refused = "http://127.0.0.1:1/x"
            let list = try input(dir, [gone, refused], out: "x")
            let run = try await HaulProcess.run(["get", "--retries", "0", "-d", dir.path, "-i", list])
            #expect(run.status == 1, "\(run)")
            #expect(
                run.stderr.contains(
                    "fail   x: every source failed: \(gone): server answered 404 Not Found; \(refused): "))
            #expect(dir.contents().filter { !$0.hasPrefix(".") } == ["list.txt"])
        }
    }

    @Test("a rerun with new tokens: the partial is resumed (Range, If-Range, only the rest), the finished file skipped")
    func newTokens() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 4 << 20
            let out = dir.path + "/out"
            let cut = try await HaulProcess.run(
                [
                    "get", "--retries", "0", "-d", out,
                    bytes(server, "f", size: size, ["token": "a", "cutAfter": "\(3 << 20)"]),
                ])
            #expect(cut.status == 1, "\(cut)")
            server.resetStats()
            let resumed = try await HaulProcess.run(["get", "-d", out, bytes(server, "f", size: size, ["token": "b"])])
            #expect(resumed.status == 0, "\(resumed)")
            #expect(
                { contentsOf(URL(fileURLWithPath: out + "/f")) == TestServer.expectedBytes(name: "f", size: size) }())
            #expect(server.stats.requests.map(\.range) == ["bytes=\(3 << 20)-"])
            #expect(server.stats.requests.first?.ifRange == TestServer.entityTag(name: "f", size: size))
            #expect(server.stats.bodyBytesSent == 1 << 20)

            let first = try await HaulProcess.run(["get", "-d", out, bytes(server, "g", size: 1000, ["token": "a"])])
            #expect(first.status == 0, "\(first)")
            server.resetStats()
            let again = try await HaulProcess.run(["get", "-d", out, bytes(server, "g", size: 1000, ["token": "b"])])
            #expect(again.status == 0 && again.stdout.contains("skip   g: already complete"), "\(again)")
            #expect(server.stats.requestCount == 0)
            // -N asks with the new URL.
            let checked = try await HaulProcess.run([
                "get", "-N", "-d", out, bytes(server, "g", size: 1000, ["token": "c"]),
            ])
            #expect(checked.status == 0 && checked.stdout.contains("unchanged on the server (304)"), "\(checked)")
            #expect(server.stats.requests.first?.target.contains("token=c") == true)

            // Another path wants the name: the conflict policy decides (fail by default).
            let list = try input(dir, [bytes(server, "h", size: 1000, ["token": "a"])], out: "g")
            let other = try await HaulProcess.run(["get", "-d", out, "-i", list])
            #expect(other.status == 1 && other.stderr.contains("already exists"), "\(other)")
            #expect(
                { contentsOf(URL(fileURLWithPath: out + "/g")) == TestServer.expectedBytes(name: "g", size: 1000) }())
        }
    }
}
