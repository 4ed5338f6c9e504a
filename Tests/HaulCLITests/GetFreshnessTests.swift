import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

/// `haul get` reruns that notice change, limits servers ask for, and deadlines: `-N`, `--remote-time`, kept
/// partials, `-c`, `--limit-rate`, `--rate`, `--wait`, `--max-time`, `--speed-limit`, each checked against the test
/// server's record of requests (and their times) and the `--json` events.
@Suite("haul get: freshness, politeness and time limits", .timeLimit(.minutes(3)))
struct GetFreshnessTests {
    /// The `--json` lines of a run, decoded.
    func events(_ output: String) -> [[String: Any]] {
        output.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    func modificationSeconds(_ url: URL) -> Int? {
        let attributes = try? FileManager.default.attributesOfItem(atPath: url.path)
        return (attributes?[.modificationDate] as? Date).map { Int($0.timeIntervalSince1970) }
    }

    @Test(
        "-N: an unchanged file gets one conditional request and no body, a changed one is fetched again; both carry the server's time"
    )
    func checkRemote() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let same = server.url(path: "/bytes/same.bin", query: ["size": "100000"]).absoluteString
            let moving = server.url(path: "/bytes/moving.bin", query: ["size": "100000", "changeAfterFirst": "1"])
                .absoluteString
            // (The server's statistics are not reset: that would reset the version counter of moving.bin too.)
            let first = try await HaulProcess.run(["get", "-q", "-d", dir.path, same, moving])
            #expect(first.status == 0, "\(first)")
            #expect(modificationSeconds(dir.file("same.bin")) == 1_700_000_000)

            // Without -N the rerun trusts the files it wrote.
            let trusting = try await HaulProcess.run(["get", "-d", dir.path, same, moving])
            #expect(trusting.status == 0 && trusting.stdout.contains("2 already complete"), "\(trusting)")
            #expect(server.stats.requestCount == 2)

            let run = try await HaulProcess.run(["get", "-N", "--json", "-d", dir.path, same, moving])
            #expect(run.status == 0, "\(run)")
            let lines = events(run.stdout)
            let revalidations = lines.filter { $0["event"] as? String == "revalidate" }
            #expect(Set(revalidations.compactMap { $0["name"] as? String }) == ["same.bin", "moving.bin"])
            #expect(revalidations.first { $0["name"] as? String == "same.bin" }?["modified"] as? Bool == false)
            #expect(revalidations.first { $0["name"] as? String == "moving.bin" }?["modified"] as? Bool == true)
            let finishSame = lines.first { $0["event"] as? String == "finish" && $0["name"] as? String == "same.bin" }
            #expect(finishSame?["notModified"] as? Bool == true)
            let summary = try #require(lines.last)
            #expect(summary["unchanged"] as? Int == 1 && summary["downloaded"] as? Int == 1)

            let stats = server.stats
            #expect(stats.requestCount == 4)
            #expect(stats.bodyBytesByPath["/bytes/same.bin"] == 100_000)  // the first run's only
            #expect(stats.requests.dropFirst(2).allSatisfy { $0.value(forHeader: "if-none-match") != nil })
            let replaced =
                contentsOf(dir.file("moving.bin"))
                == TestServer.expectedBytes(
                    name: "moving.bin", size: 100_000, version: 1)
            #expect(replaced)
            #expect(modificationSeconds(dir.file("moving.bin")) == 1_700_000_000 + 3600)

            let human = try await HaulProcess.run(["get", "-N", "-d", dir.path, same])
            #expect(human.stdout.contains("unchanged on the server (304)"), "\(human)")

            let local = try TemporaryDirectory()
            let before = Int(Date().timeIntervalSince1970) - 1
            let noRemote = try await HaulProcess.run(["get", "-q", "--no-remote-time", "-d", local.path, same])
            #expect(noRemote.status == 0)
            #expect(try #require(modificationSeconds(local.file("same.bin"))) >= before)
        }
    }

    @Test("a download that fails for good keeps its partial, and the rerun resumes it; --no-keep-partial deletes it")
    func keepPartial() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 3_000_000
            let url = server.url(path: "/bytes/part.bin", query: ["size": "\(size)"]).absoluteString
            var cut = Fault()
            cut.cutAfterBytes = 1_000_000
            server.addRule(FaultRule(pathPrefix: "/bytes/part.bin", fault: cut))
            let failed = try await HaulProcess.run(["get", "-q", "--retries", "0", "-d", dir.path, url])
            #expect(failed.status == 1, "\(failed)")
            let partial = dir.file(".part.bin.haul-partial")
            let attributes = try FileManager.default.attributesOfItem(atPath: partial.path)
            #expect(attributes[.posixPermissions] as? Int == 0o600)
            #expect(attributes[.size] as? Int == 1_000_000)

            server.removeAllRules()
            server.resetStats()
            let rerun = try await HaulProcess.run(["get", "-q", "-d", dir.path, url])
            #expect(rerun.status == 0, "\(rerun)")
            let whole = contentsOf(dir.file("part.bin")) == TestServer.expectedBytes(name: "part.bin", size: size)
            #expect(whole)
            #expect(server.stats.bodyBytesSent == size - 1_000_000)
            #expect(server.stats.requests.first?.range == "bytes=1000000-")

            let other = try TemporaryDirectory()
            server.addRule(FaultRule(pathPrefix: "/bytes/part.bin", fault: cut))
            let dropped = try await HaulProcess.run([
                "get", "-q", "--retries", "0", "--no-keep-partial", "-d", other.path, url,
            ])
            #expect(dropped.status == 1)
            #expect(try FileManager.default.contentsOfDirectory(atPath: other.path) == [".haul"])
        }
    }

    @Test("-c continues a half file another tool left, with Range from its size; without -c the file is left alone")
    func continueForeign() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 400_000
            let expected = TestServer.expectedBytes(name: "half.iso", size: size)
            try Data(expected[..<150_000]).write(to: dir.file("half.iso"))
            let url = server.url(path: "/bytes/half.iso", query: ["size": "\(size)"]).absoluteString
            let refused = try await HaulProcess.run(["get", "-q", "-d", dir.path, url])
            #expect(refused.status == 1 && refused.stderr.contains("already exists"), "\(refused)")
            #expect(contentsOf(dir.file("half.iso"))?.count == 150_000)

            let run = try await HaulProcess.run(["get", "-c", "--json", "-d", dir.path, url])
            #expect(run.status == 0, "\(run)")
            let continued = contentsOf(dir.file("half.iso")) == expected
            #expect(continued)
            let request = try #require(server.stats.requests.last)
            #expect(request.range == "bytes=150000-" && request.ifRange == nil)
            #expect(server.stats.bodyBytesByPath["/bytes/half.iso"] == size - 150_000)
        }
    }

    @Test("--limit-rate and limit-rate= lines slow the transfer to the rate (the server's own body timeline)")
    func limitRate() async throws {
        let configuration = TestServer.Configuration(sendBufferSize: 64 << 10, recordsBodyTimeline: true)
        try await TestServer.withRunning(configuration) { server in
            let dir = try TemporaryDirectory()
            let list = dir.file("list.txt")
            let limited = server.url(path: "/bytes/slow.bin", query: ["size": "1048576"]).absoluteString
            let free = server.url(path: "/bytes/free.bin", query: ["size": "1048576"]).absoluteString
            try "\(limited)\n  limit-rate=512K\n\(free)\n".write(to: list, atomically: true, encoding: .utf8)
            let run = try await HaulProcess.run([
                "get", "-q", "--no-journal", "-d", dir.file("out").path, "-i", list.path,
            ])
            #expect(run.status == 0, "\(run)")
            let timeline = server.stats.bodyTimeline
            func span(_ path: String) throws -> Duration {
                let writes = timeline.filter { $0.path == path }
                return try #require(writes.last).time - #require(writes.first).time
            }
            #expect(try span("/bytes/slow.bin") >= .milliseconds(1700))
            #expect(try span("/bytes/free.bin") < .milliseconds(1000))

            server.resetStats()
            let started = ContinuousClock.now
            let whole = try await HaulProcess.run([
                "get", "-q", "--no-journal", "--limit-rate", "1M", "-d", dir.file("out2").path, limited, free,
            ])
            #expect(whole.status == 0, "\(whole)")
            #expect(ContinuousClock.now - started >= .milliseconds(1800))  // 2 MiB at 1 MiB/s, both together
        }
    }

    @Test("--rate and --wait space the requests the server sees; --json and -v show the waits")
    func requestPacing() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let urls = (0..<5).map { server.url(path: "/bytes/p\($0)", query: ["size": "100"]).absoluteString }
            let run = try await HaulProcess.run(
                ["get", "--json", "--no-journal", "--rate", "2/s", "-d", dir.path] + urls)
            #expect(run.status == 0, "\(run)")
            // Started 500 ms apart by the client; a busy machine (a debug build, tests in parallel) may delay one
            // arrival by a few hundred milliseconds more than the next.
            let times = server.stats.requests.map(\.receivedAt)
            #expect(times.count == 5)
            for index in 1..<times.count { #expect(times[index] - times[index - 1] >= .milliseconds(200)) }
            #expect(times[4] - times[0] >= .milliseconds(1700))
            let throttles = events(run.stdout).filter { $0["event"] as? String == "throttle" }
            #expect(throttles.count >= 3)
            #expect(throttles.allSatisfy { $0["reason"] as? String == "requestRate" && $0["delaySeconds"] != nil })

            server.resetStats()
            let waited = try await HaulProcess.run(
                ["get", "-v", "--no-journal", "--wait", "0.3", "--random-wait", "-d", dir.file("w").path] + urls)
            #expect(waited.status == 0, "\(waited)")
            #expect(waited.stdout.contains("wait between requests to the host"), "\(waited)")
            let spaced = server.stats.requests.map(\.receivedAt)
            for index in 1..<spaced.count { #expect(spaced[index] - spaced[index - 1] >= .milliseconds(80)) }
            #expect(spaced[4] - spaced[0] >= .milliseconds(550))  // four waits of at least 0.15 s
        }
    }

    @Test("--max-time ends a download that retries forever; --speed-limit stops a slow drip, which then resumes")
    func timeLimits() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let never = server.url(path: "/bytes/never", query: ["status": "503"]).absoluteString
            let started = ContinuousClock.now
            let run = try await HaulProcess.run([
                "get", "--json", "--retries", "1000", "--max-time", "2", "-d", dir.path, never,
            ])
            #expect(run.status == 1, "\(run)")
            #expect(ContinuousClock.now - started < .seconds(15))
            let failure = try #require(events(run.stdout).first { $0["event"] as? String == "fail" })
            #expect(failure["code"] as? String == "timedOut", "\(run)")

            let drip = server.url(
                path: "/bytes/drip.bin", query: ["size": "300000", "rate": "2000", "rateTimes": "1"]
            ).absoluteString
            let slow = try await HaulProcess.run([
                "get", "--json", "--speed-limit", "20K", "--speed-time", "1", "-d", dir.path, drip,
            ])
            #expect(slow.status == 0, "\(slow)")
            let retry = try #require(events(slow.stdout).first { $0["event"] as? String == "retry" })
            #expect(retry["code"] as? String == "tooSlow")
            let resumed = contentsOf(dir.file("drip.bin")) == TestServer.expectedBytes(name: "drip.bin", size: 300_000)
            #expect(resumed)
            let last = try #require(server.stats.requests.last)
            #expect(last.range?.hasPrefix("bytes=") == true && last.range != "bytes=0-")

            // A line's speed-time= with the run's --speed-limit: the line's time, the run's speed.
            let list = dir.file("drip.txt")
            let lineDrip = server.url(
                path: "/bytes/line-drip.bin", query: ["size": "300000", "rate": "2000", "rateTimes": "1"]
            ).absoluteString
            try "\(lineDrip)\n  speed-time=1\n".write(to: list, atomically: true, encoding: .utf8)
            let line = try await HaulProcess.run([
                "get", "--json", "--speed-limit", "20K", "-d", dir.file("lines").path, "-i", list.path,
            ])
            #expect(line.status == 0, "\(line)")
            let lineRetry = events(line.stdout).first { $0["event"] as? String == "retry" }
            #expect(lineRetry?["code"] as? String == "tooSlow", "\(line)")
        }
    }

    @Test("bad values are usage errors that name the option, or the file and line")
    func badInput() async throws {
        let dir = try TemporaryDirectory()
        for (arguments, expected) in [
            (["-N", "--no-journal"], "-N/--check-remote"),
            (["--rate", "5/week"], "--rate '5/week'"),
            (["--limit-rate", "fast"], "--limit-rate 'fast'"),
            (["--random-wait"], "--random-wait needs --wait"),
            (["--max-time", "0"], "-m/--max-time"),
        ] {
            let run = try await HaulProcess.run(["get", "-d", dir.path] + arguments + ["http://127.0.0.1:9/x"])
            #expect(run.status == 2, "\(arguments): \(run)")
            #expect(run.stderr.contains(expected), "\(arguments): \(run)")
        }
        let list = dir.file("bad.txt")
        try
            "http://127.0.0.1:9/a\n  limit-rate=abc\n  max-time=-1\nhttp://127.0.0.1:9/b\n  speed-limit=1K\n  speed-time=x\n"
            .write(to: list, atomically: true, encoding: .utf8)
        let run = try await HaulProcess.run(["get", "-d", dir.path, "-i", list.path])
        #expect(run.status == 2, "\(run)")
        for expected in ["bad.txt:1: limit-rate='abc'", "bad.txt:1: max-time='-1'", "bad.txt:4: speed-time='x'"] {
            #expect(run.stderr.contains(expected), "\(expected): \(run)")
        }
    }

    @Test("--help describes each option")
    func help() async throws {
        let run = try await HaulProcess.run(["get", "--help"])
        for option in [
            "--check-remote", "--no-remote-time", "--no-keep-partial", "--continue", "--limit-rate", "--rate",
            "--per-host-rate", "--wait", "--random-wait", "--max-time", "--speed-limit", "--speed-time",
            "limit-rate=RATE", "max-time=S",
        ] {
            #expect(run.stdout.contains(option), "\(option)")
        }
    }
}
