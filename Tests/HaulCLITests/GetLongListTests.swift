import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

/// Lists longer than any buffer `haul get` keeps: checked whole before the first request, then read again to run.
@Suite("haul get: long lists", .timeLimit(.minutes(3)))
struct GetLongListTests {
    @Test("a bad line at the end of 100,000 stops everything before the first request; an over-long line is named")
    func badLineAtTheEnd() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            var lines = (0..<100_000).map { bytes(server, "f\($0)", size: 10) }
            lines[40_000] = String(repeating: "x", count: 1_100_000)  // line 40,001: no list has such lines
            lines.append("ftp://127.0.0.1/last")  // line 100,001
            let file = dir.file("urls.txt")
            try Data(lines.joined(separator: "\n").utf8).write(to: file)
            let out = dir.file("out")
            let run = try await HaulProcess.run(["get", "-q", "-d", out.path, "-i", file.path])
            #expect(run.status == 2, "\(run.status) \(run.stderr.prefix(2000))")
            #expect(run.stderr.contains("urls.txt:40001: is longer than 1 MiB"))
            #expect(run.stderr.contains("urls.txt:100001: unsupported scheme 'ftp'"))
            #expect(run.stderr.contains("nothing was downloaded"))
            #expect(server.stats.requestCount == 0)
            #expect(!FileManager.default.fileExists(atPath: out.path), "the destination was created")
        }
    }

    @Test("destinations 90,000 lines apart that would be one file are both named, before any request")
    func farApartDuplicates() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            var lines = (0..<100_000).map { bytes(server, "d\($0)", size: 10) }
            lines[90_004] = server.url(path: "/elsewhere/d4", query: ["size": "10"]).absoluteString  // line 90,005
            lines[99_999] = bytes(server, "d50", size: 10) + "\n  out=d7"  // line 100,000 (its option on 100,001)
            let file = dir.file("urls.txt")
            try Data(lines.joined(separator: "\n").utf8).write(to: file)
            let run = try await HaulProcess.run(["get", "-q", "-d", dir.file("out").path, "-i", file.path])
            #expect(run.status == 2, "\(run.status) \(run.stderr.prefix(2000))")
            #expect(run.stderr.contains("urls.txt:90005: '"), "\(run.stderr)")
            #expect(run.stderr.contains("urls.txt:5) would both write"), "\(run.stderr)")
            #expect(run.stderr.contains("urls.txt:8) would both write"), "\(run.stderr)")
            #expect(run.stderr.components(separatedBy: "would both write").count == 3, "\(run.stderr)")
            #expect(server.stats.requestCount == 0)
        }
    }

    @Test("standard input is read twice: a bad last line stops it all; a good list is fetched whole, in order")
    func standardInput() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            var lines = (0..<3_000).map { bytes(server, "s\($0)", size: 10) }
            let refused = try await HaulProcess.run(
                ["get", "-q", "-d", dir.file("refused").path, "-i", "-"],
                input: (lines + ["not a url"]).joined(separator: "\n"))
            #expect(refused.status == 2, "\(refused)")
            #expect(refused.stderr.contains("<stdin>:3001:"), "\(refused.stderr)")
            #expect(server.stats.requestCount == 0)

            lines.append("  out=last.bin")
            let run = try await HaulProcess.run(
                ["get", "-q", "-j", "1", "-d", dir.file("in").path, "-i", "-"], input: lines.joined(separator: "\n"))
            #expect(run.status == 0, "\(run)")
            let names = try FileManager.default.contentsOfDirectory(atPath: dir.file("in").path)
            #expect(names.count == 3_001)  // and .haul
            #expect(contentsOf(dir.file("in/last.bin")) == TestServer.expectedBytes(name: "s2999", size: 10))
            // One at a time follows the list: read in slices, it is still one order.
            #expect(server.stats.requests.map(\.path) == (0..<3_000).map { "/bytes/s\($0)" })
        }
    }
}
