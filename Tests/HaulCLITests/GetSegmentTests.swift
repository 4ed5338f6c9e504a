import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

/// `haul get -s N` and mirrors on input lines: a killed segmented run resumes every segment, connections stay under
/// `--per-host`, `--json` and `-v` show segments, and bad input is refused before any request.
@Suite("haul get: segments and mirrors", .timeLimit(.minutes(3)))
struct GetSegmentTests {
    func events(_ output: String) -> [[String: Any]] {
        output.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    @Test("SIGKILL during a segmented download, then a rerun: the file intact, at most 1.1x its bytes served")
    func killedSegmentedRunResumes() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 16 << 20
            let url = server.url(path: "/bytes/big.bin", query: ["size": "\(size)", "rate": "500000"]).absoluteString
            let arguments = ["get", "-q", "-s", "8", "--min-split-size", "512K", "-d", dir.path, url]
            let process = try HaulProcess(arguments)
            // Killed once well into the transfer, by what the server has sent (not the clock: a loaded machine may
            // start the process slowly).
            try await onOwnThread {
                while server.stats.bodyBytesSent < 6 << 20, !process.hasExited { usleep(1_000) }
                process.send(SIGKILL)
            }
            let killed = await process.finish()
            #expect(killed.status != 0, "finished before the kill: \(killed)")
            #expect(!FileManager.default.fileExists(atPath: dir.file("big.bin").path))
            let servedBeforeRerun = server.stats.bodyBytesSent

            let rerun = try await HaulProcess.run(arguments)
            #expect(rerun.status == 0, "\(rerun)")
            let intact = contentsOf(dir.file("big.bin")) == TestServer.expectedBytes(name: "big.bin", size: size)
            #expect(intact, "the file is not the server's")
            let served = server.stats.bodyBytesSent
            #expect(
                Double(served) <= 1.1 * Double(size),
                "served \(served) for \(size) (\(servedBeforeRerun) before the rerun): segments restarted")
            let visible = try FileManager.default.contentsOfDirectory(atPath: dir.path)
            #expect(!visible.contains { $0.hasSuffix(".haul-partial") }, "\(visible)")
        }
    }

    @Test("-s 4 with --per-host 2: never more than 2 connections at the server; --json shows each segment")
    func perHostCountsConnections() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 4 << 20
            let urls = ["a.bin", "b.bin"].map {
                server.url(path: "/bytes/\($0)", query: ["size": "\(size)", "rate": "2000000"]).absoluteString
            }
            let run = try await HaulProcess.run(
                ["get", "--json", "-s", "4", "--min-split-size", "256K", "--per-host", "2", "-d", dir.path] + urls)
            #expect(run.status == 0, "\(run)")
            #expect(server.stats.maxInFlight <= 2, "\(server.stats.maxInFlight) connections at once")
            for name in ["a.bin", "b.bin"] {
                let intact = contentsOf(dir.file(name)) == TestServer.expectedBytes(name: name, size: size)
                #expect(intact, "\(name) is not the server's")
            }

            server.resetStats()
            let single = try TemporaryDirectory()
            let one = try await HaulProcess.run(
                ["get", "--json", "-s", "4", "--min-split-size", "256K", "-d", single.path, urls[0]])
            #expect(one.status == 0, "\(one)")
            let segments = events(one.stdout).filter { $0["event"] as? String == "segment" }
            let started = segments.filter { $0["change"] as? String == "start" }
            #expect(Set(started.compactMap { $0["connection"] as? Int }) == [0, 1, 2, 3], "\(segments)")
            #expect(started.allSatisfy { $0["from"] is Int && $0["to"] is Int && $0["url"] as? String == urls[0] })
            #expect(server.stats.maxInFlight == 4)
        }
    }

    @Test("tab-separated mirrors on an input line: a 404 mirror is dropped (-v says so), the file comes whole")
    func mirrorsOnInputLines() async throws {
        try await TestServer.withRunning { primary in
            try await TestServer.withRunning { mirror in
                let dir = try TemporaryDirectory()
                let size = 4 << 20
                let query = ["size": "\(size)", "rate": "2000000"]
                let good = mirror.url(path: "/bytes/file.bin", query: query).absoluteString
                let gone = mirror.url(path: "/bytes/gone.bin", query: ["status": "404"]).absoluteString
                let line = [primary.url(path: "/bytes/file.bin", query: query).absoluteString, gone, good]
                    .joined(separator: "\t")
                let input = dir.file("urls.txt")
                try Data((line + "\n  split=6\n").utf8).write(to: input)
                // -j 6: a slot for every connection of split=6. With fewer (-j is 4 by default), which of the waiting
                // connections gets a slot first is the scheduler's choice, and the 404 mirror's may never get one
                // before the others have taken every segment: the file comes whole, but nothing asks that mirror.
                let run = try await HaulProcess.run(
                    ["get", "-v", "-j", "6", "--min-split-size", "256K", "-d", dir.path, "-i", input.path])
                #expect(run.status == 0, "\(run)")
                let intact = contentsOf(dir.file("file.bin")) == TestServer.expectedBytes(name: "file.bin", size: size)
                #expect(intact, "the file is not the server's")
                #expect(run.stdout.contains("source dropped for the rest of the file: server answered 404"), "\(run)")
                #expect(mirror.stats.bodyBytesByPath["/bytes/file.bin"] ?? 0 > 0, "the good mirror served nothing")
            }
        }
    }

    @Test("bad segment input is refused before any request, naming the option or line")
    func badInput() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let url = server.url(path: "/bytes/a.bin", query: ["size": "10"]).absoluteString
            let zero = try await HaulProcess.run(["get", "-s", "0", "-d", dir.path, url])
            #expect(zero.status == 2 && zero.stderr.contains("-s/--split must be from 1 to 64, not 0"), "\(zero)")
            let size = try await HaulProcess.run(["get", "--min-split-size", "big", "-d", dir.path, url])
            #expect(size.status == 2 && size.stderr.contains("--min-split-size 'big'"), "\(size)")

            let input = dir.file("urls.txt")
            let withUser = "http://user:secret@127.0.0.1:9/a.bin"
            try Data("\(url)\t\(withUser)\n\(url) \(url)\n\(url)\n  split=many\n".utf8).write(to: input)
            let lines = try await HaulProcess.run(["get", "-d", dir.path, "-i", input.path])
            #expect(lines.status == 2, "\(lines)")
            #expect(lines.stderr.contains("urls.txt:1: mirror 'http://user:***@127.0.0.1:9/a.bin' carries a user"))
            #expect(!lines.stderr.contains("secret"))
            #expect(lines.stderr.contains("urls.txt:2: '") && lines.stderr.contains("separated by tabs"))
            #expect(lines.stderr.contains("urls.txt:3: split='many' is not a number of connections from 1 to 64"))
            #expect(server.stats.requestCount == 0)
        }
    }
}
