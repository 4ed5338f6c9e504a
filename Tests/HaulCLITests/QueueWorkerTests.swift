import Foundation
import HaulPostgres
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `haul worker` processes on one shared queue in a real PostgreSQL 15: kills, partitions, stops and a database
/// restart, checked against the files, the database and the HTTP server's own counters.
@Suite(
    "haul worker: many processes, one queue", .timeLimit(.minutes(5)), .serialized,
    .enabled(if: TestPlatform.isLinux, "runs Debian's PostgreSQL 15, which scripts/test installs"))
struct QueueWorkerTests {
    @Test("4 workers, 1,000 URLs, one SIGKILLed, one partitioned: every URL done, files identical, per-host limit held")
    func killAndPartition() async throws {
        try await PostgresServer.withRunning { postgres in
            try await TestServer.withRunning { server in
                let root = try TemporaryDirectory()
                // Two hosts (two names of the server), 500 URLs each, each response held 30 ms.
                var lines: [String] = []
                for index in 0..<1_000 {
                    let host = index.isMultiple(of: 2) ? "127.0.0.1" : "localhost"
                    let url = server.url(
                        path: "/bytes/k\(index)", query: ["size": "\(4_096 + index)", "delay": "30"], host: host)
                    lines.append(url.absoluteString)
                    lines.append("  out=k\(index).bin")
                }
                try lines.joined(separator: "\n").write(to: root.file("list.txt"), atomically: true, encoding: .utf8)
                let enqueued = try await HaulProcess.run([
                    "enqueue", "--db", postgres.url, "-i", root.file("list.txt").path, "--per-host", "3",
                ])
                #expect(enqueued.status == 0, "\(enqueued)")
                #expect(enqueued.stdout.contains("enqueued 1000 downloads"), "\(enqueued)")

                // Worker 4 reaches the database through a relay the test silences: its heartbeats and everything
                // else go unanswered, nothing is reset.
                let relay = try TCPRelay(to: postgres.port)
                defer { relay.cut() }
                let relayed = "postgres://haul@127.0.0.1:\(relay.port)/postgres?sslmode=disable"
                func worker(_ number: Int, width: Int) throws -> HaulProcess {
                    try HaulProcess([
                        "worker", "--db", number == 4 ? relayed : postgres.url, "-d", root.path + "/w\(number)",
                        "-j", "\(width)", "--lease", "3", "--until-empty", "--name", "w\(number)", "--json",
                    ])
                }
                // Workers 2 and 4 start first, one download each: claiming at most two each, they leave connections
                // free for each other, so both are at work for sure (a worker that starts when busy ones hold every
                // connection may get none before the queue is done). Workers 1 and 3 take over from them.
                let (second, fourth) = (try worker(2, width: 1), try worker(4, width: 1))
                try await SharedQueue.withQueue(try DatabaseURL(postgres.url)) { queue in
                    // Once worker 2 and worker 4 have each published a few files, kill one and partition the other.
                    try await eventually("workers 2 and 4 at work", within: .seconds(60)) {
                        second.stdoutSoFarCount("\"finish\"") >= 5 && fourth.stdoutSoFarCount("\"finish\"") >= 5
                    }
                    kill(second.pid, SIGKILL)
                    relay.silence()
                    let (first, third) = (try worker(1, width: 4), try worker(3, width: 4))
                    let outputs = [await first.finish(), await third.finish()]
                    for output in outputs { #expect(output.status == 0, "\(output)") }
                    let killed = await second.finish()
                    #expect(killed.status == 128 + SIGKILL)
                    // The partitioned worker stopped its downloads by itself; it keeps trying to reach the database.
                    try await eventually("worker 4 stops its downloads", within: .seconds(30)) {
                        fourth.stdoutSoFarCount("\"lease-lost\"") > 0
                    }
                    fourth.send(SIGKILL)
                    _ = await fourth.finish()

                    // Stopped workers listed whether or not they got any download: worker 3 may have taken all that
                    // was left before worker 1 claimed one (the status lists a stopped worker only if it did work).
                    let status = try await queue.status(stoppedWithin: .seconds(600))
                    #expect(status.done == 1_000 && status.waiting == 0 && status.running == 0 && status.failed == 0)
                    // The killed and the partitioned worker lost their leases; the others stopped when the queue was done.
                    let states = Dictionary(status.workers.map { ($0.name, $0.state) }, uniquingKeysWith: { $1 })
                    #expect(states["w1"] == "stopped" && states["w3"] == "stopped", "\(states)")
                    #expect(states["w2"] == "lost" && states["w4"] == "lost", "\(states)")
                    // Every file where the database says, byte-identical, with its SHA-256.
                    var listed = 0
                    var after: Int64 = 0
                    while true {
                        let files = try await queue.files(limit: 500, after: after)
                        guard let last = files.last else { break }
                        after = last.id
                        for file in files {
                            listed += 1
                            let index = Int(file.path.dropFirst().dropLast(4)) ?? -1
                            let expected = TestServer.expectedBytes(name: "k\(index)", size: 4_096 + index)
                            let bytes = contentsOf(URL(fileURLWithPath: file.directory + "/" + file.path))
                            #expect(bytes == expected, "\(file.path) in \(file.directory)")
                            #expect(file.sha256 == sha256Hex(expected))
                        }
                    }
                    #expect(listed == 1_000)
                    // Workers 1 and 3 hold what they published; nothing else in their directories.
                    for number in [1, 3] {
                        let names = (try? FileManager.default.contentsOfDirectory(atPath: root.path + "/w\(number)"))
                        let published = Set((names ?? []).filter { !$0.hasPrefix(".") })
                        let held = try await queue.files(limit: 2_000).filter { $0.worker == "w\(number)" }
                        #expect(published == Set(held.map(\.path)), "w\(number)")
                    }
                }
                let stats = server.stats
                for index in 0..<1_000 {
                    #expect((stats.requestsByPath["/bytes/k\(index)"] ?? 0) >= 1)
                }
                for (host, highest) in stats.maxInFlightByHost {
                    #expect(highest <= 3, "\(host): \(highest) requests at once")
                }
                #expect(stats.maxInFlightByHost.values.contains(3))
            }
        }
    }

    @Test("SIGTERM hands the worker's claims back at once and exits 130, leaving no file at any path")
    func sigtermReturnsClaims() async throws {
        try await PostgresServer.withRunning { postgres in
            try await TestServer.withRunning { server in
                let root = try TemporaryDirectory()
                let urls = (0..<6).map { bytes(server, "held\($0)", size: 100_000, ["hold": "g"]) }
                let enqueued = try await HaulProcess.run(["enqueue", "--db", postgres.url] + urls)
                #expect(enqueued.status == 0, "\(enqueued)")
                let worker = try HaulProcess(["worker", "--db", postgres.url, "-d", root.path, "-j", "4"])
                try await eventually("4 requests held", within: .seconds(30)) { server.heldCount(at: "g") == 4 }
                worker.send(SIGTERM)
                let stopped = ContinuousClock.now
                let output = await worker.finish()
                #expect(output.status == 130, "\(output)")
                #expect(ContinuousClock.now - stopped < .seconds(5))
                try await SharedQueue.withQueue(try DatabaseURL(postgres.url)) { queue in
                    let status = try await queue.status()
                    #expect(status.waiting == 6 && status.running == 0 && status.done == 0, "\(status)")
                    #expect(status.hosts.allSatisfy { $0.running == 0 })
                }
                let names = root.contents().filter { !$0.hasPrefix(".") }
                #expect(names.isEmpty, "\(names)")
                server.openGate("g")
            }
        }
    }

    @Test("the database restarted mid-run: workers reconnect and finish the queue")
    func databaseRestart() async throws {
        try await PostgresServer.withRunning { postgres in
            try await TestServer.withRunning { server in
                let root = try TemporaryDirectory()
                let urls = (0..<200).map { bytes(server, "r\($0)", size: 2_000, ["delay": "20"]) }
                #expect(try await HaulProcess.run(["enqueue", "--db", postgres.url] + urls).status == 0)
                let workers = try (1...2).map { number in
                    try HaulProcess([
                        "worker", "--db", postgres.url, "-d", root.path + "/w\(number)", "-j", "3", "--lease", "10",
                        "--until-empty", "--json",
                    ])
                }
                try await eventually("some files done", within: .seconds(30)) {
                    workers.map { $0.stdoutSoFarCount("\"finish\"") }.reduce(0, +) >= 20
                }
                await postgres.kill()
                try await Task.sleep(for: .seconds(1))
                try await postgres.start()
                for worker in workers {
                    let output = await worker.finish()
                    #expect(output.status == 0, "\(output)")
                }
                try await SharedQueue.withQueue(try DatabaseURL(postgres.url)) { queue in
                    let status = try await queue.status()
                    #expect(status.done == 200 && status.running == 0 && status.waiting == 0, "\(status)")
                }
            }
        }
    }

    @Test("bad input: every problem reported with its line, nothing enqueued; the same list twice is enqueued once")
    func enqueueInput() async throws {
        try await PostgresServer.withRunning { postgres in
            try await TestServer.withRunning { server in
                let root = try TemporaryDirectory()
                let good = bytes(server, "a", size: 10)
                let list = [
                    good, "ftp://example.org/x", bytes(server, "b", size: 10), "  split=99",
                    "http://user:secret@127.0.0.1:1/c", bytes(server, "d", size: 10), "  header=Cookie: s=1",
                    bytes(server, "e", size: 10), "  out=../e",
                ].joined(separator: "\n")
                try list.write(to: root.file("bad.txt"), atomically: true, encoding: .utf8)
                let bad = try await HaulProcess.run(["enqueue", "--db", postgres.url, "-i", root.file("bad.txt").path])
                #expect(bad.status == 2, "\(bad)")
                for line in [2, 3, 5, 6, 8] {
                    #expect(bad.stderr.contains("bad.txt:\(line):"), "line \(line): \(bad)")
                }
                #expect(!bad.stderr.contains("secret"))
                #expect(bad.stderr.contains("nothing was enqueued"))
                let status = try await HaulProcess.run(["status", "--db", postgres.url, "--json"])
                let counts = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
                #expect(counts?["waiting"] as? Int == 0, "\(status)")

                let urls = (0..<30).map { bytes(server, "same\($0)", size: 10) }.joined(separator: "\n")
                try urls.write(to: root.file("list.txt"), atomically: true, encoding: .utf8)
                let environment = ["HAUL_DATABASE_URL": postgres.url]
                let first = try await HaulProcess.run(
                    ["enqueue", "-i", root.file("list.txt").path], environment: environment)
                let second = try await HaulProcess.run(
                    ["enqueue", "-i", root.file("list.txt").path], environment: environment)
                #expect(first.stdout.contains("enqueued 30 downloads in queue 'default'"), "\(first)")
                #expect(second.stdout.contains("enqueued 0 downloads (30 queued already)"), "\(second)")
                let json = try await HaulProcess.run(["status", "--json"], environment: environment)
                let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
                for (key, value) in [("waiting", 30), ("running", 0), ("done", 0), ("failed", 0)] {
                    #expect(object?[key] as? Int == value, "\(key): \(json)")
                }
            }
        }
    }

    @Test("no database, or one that cannot be reached: a clear error without the password")
    func unreachableDatabase() async throws {
        let none = try await HaulProcess.run(["status"], environment: ["HAUL_DATABASE_URL": ""])
        #expect(none.status == 2 && none.stderr.contains("no database given"), "\(none)")
        let port = try freeLoopbackPort()
        let url = "postgres://haul:hunter2@127.0.0.1:\(port)/queue?sslmode=disable"
        let refused = try await HaulProcess.run(["enqueue", "--db", url, "http://127.0.0.1:1/x"])
        #expect(refused.status == 1, "\(refused)")
        #expect(refused.stderr.contains("127.0.0.1:\(port)"), "\(refused)")
        #expect(!refused.stderr.contains("hunter2") && !refused.stdout.contains("hunter2"))
        // In the words haul get uses for a server it cannot reach, for every command.
        for command in [["status"], ["worker", "-d", NSTemporaryDirectory(), "--until-empty"]] {
            let run = try await HaulProcess.run(command + ["--db", url])
            #expect(run.status == 1, "\(command): \(run)")
            #expect(run.stderr.contains("connection refused (127.0.0.1:\(port))"), "\(command): \(run)")
            #expect(!run.stderr.contains("SingleConnectionFailure"), "\(command): \(run)")
        }
        let bad = try await HaulProcess.run(["status", "--db", "mysql://x@y/z"])
        #expect(bad.status == 2 && bad.stderr.contains("unsupported scheme 'mysql'"), "\(bad)")
    }

    @Test("a worker frozen past its lease on a shared directory: the other finishes the download; nothing fails")
    func frozenWorker() async throws {
        try await PostgresServer.withRunning { postgres in
            try await TestServer.withRunning { server in
                let root = try TemporaryDirectory()
                let db = ["--db", postgres.url]
                let size = 3 << 20
                // Slow enough that the first worker is mid-body when it is frozen.
                let url = server.url(path: "/bytes/z", query: ["size": "\(size)", "rate": "1000000", "rateTimes": "1"])
                #expect(try await HaulProcess.run(["enqueue"] + db + [url.absoluteString]).status == 0)
                let worker = ["worker", "-d", root.path, "--lease", "3", "--until-empty", "--json"] + db
                let frozen = try HaulProcess(worker + ["--name", "frozen"])
                try await eventually("the first worker is mid-body", within: .seconds(30)) {
                    server.stats.bodyBytesSent > 500_000
                }
                frozen.send(SIGSTOP)
                // The other finds the partial still locked once it takes the claim over: it goes back to the queue.
                let other = try HaulProcess(worker + ["--name", "other"])
                try await eventually("the other worker meets the locked partial", within: .seconds(30)) {
                    other.stdoutSoFar.contains("another process is writing its partial")
                }
                frozen.send(SIGCONT)
                let finished = await other.finish()
                #expect(finished.status == 0, "\(finished)")
                let woke = await frozen.finish()
                #expect(!woke.stdout.contains("\"return\""), "the frozen worker said it returned a claim: \(woke)")
                #expect(
                    { contentsOf(root.file("z")) == TestServer.expectedBytes(name: "z", size: size) }(),
                    "the file is not the server's")
                let status = try await HaulProcess.run(["status", "--json"] + db)
                let object = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
                #expect(object?["done"] as? Int == 1 && object?["failed"] as? Int == 0, "\(status)")
            }
        }
    }

    @Test("enqueued again with a new token: a failed download is renewed and its partial resumed; a done one is left")
    func newToken() async throws {
        try await PostgresServer.withRunning { postgres in
            try await TestServer.withRunning { server in
                let root = try TemporaryDirectory()
                let db = ["--db", postgres.url]
                let size = 4 << 20
                let cut = server.url(
                    path: "/bytes/f", query: ["size": "\(size)", "token": "a", "cutAfter": "\(3 << 20)"]
                ).absoluteString
                let small = server.url(path: "/bytes/g", query: ["size": "1000", "token": "a"]).absoluteString
                #expect(try await HaulProcess.run(["enqueue", "--retries", "0"] + db + [cut, small]).status == 0)
                let first = try await HaulProcess.run(["worker", "-d", root.path, "--until-empty"] + db)
                #expect(first.status == 1, "\(first)")
                server.resetStats()

                let renewed = [
                    server.url(path: "/bytes/f", query: ["size": "\(size)", "token": "b"]).absoluteString,
                    server.url(path: "/bytes/g", query: ["size": "1000", "token": "b"]).absoluteString,
                ]
                let again = try await HaulProcess.run(["enqueue"] + db + renewed)
                #expect(again.status == 0, "\(again)")
                #expect(
                    again.stdout.contains("enqueued 0 downloads (1 renewed with a new URL, 1 queued already)"),
                    "\(again)")
                let second = try await HaulProcess.run(["worker", "-d", root.path, "--until-empty"] + db)
                #expect(second.status == 0, "\(second)")
                #expect({ contentsOf(root.file("f")) == TestServer.expectedBytes(name: "f", size: size) }())
                let sent = server.stats.requests
                #expect(sent.count == 1 && sent.first?.target.contains("token=b") == true, "\(sent)")
                #expect(sent.first?.range == "bytes=\(3 << 20)-")
                #expect(sent.first?.ifRange == TestServer.entityTag(name: "f", size: size))
                #expect(server.stats.bodyBytesSent == 1 << 20)

                let other = server.url(path: "/bytes/h", query: ["size": "1000"]).absoluteString
                let list = root.file("other.txt")
                try Data("\(other)\n  out=g\n".utf8).write(to: list)
                let refused = try await HaulProcess.run(["enqueue"] + db + ["-i", list.path])
                #expect(refused.status == 1 && refused.stderr.contains("path 'g' is queued already for"), "\(refused)")
                let status = try await HaulProcess.run(["status", "--json"] + db)
                let object = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
                #expect(object?["done"] as? Int == 2 && object?["failed"] as? Int == 0, "\(status)")
            }
        }
    }

    @Test("queue retry-failed, cancel, set and purge")
    func queueCommands() async throws {
        try await PostgresServer.withRunning { postgres in
            try await TestServer.withRunning { server in
                let root = try TemporaryDirectory()
                let db = ["--db", postgres.url]
                let failing = bytes(server, "nope", size: 10, ["status": "404"])
                let fine = (0..<3).map { bytes(server, "ok\($0)", size: 10) }
                #expect(try await HaulProcess.run(["enqueue"] + db + [failing] + fine).status == 0)
                let cancelled = try await HaulProcess.run(["queue", "cancel", "--url", fine[0]] + db)
                #expect(cancelled.stdout.contains("1 download cancelled"), "\(cancelled)")
                let run = try await HaulProcess.run(["worker", "-d", root.path, "--until-empty"] + db)
                #expect(run.status == 1, "\(run)")
                #expect(run.stderr.contains("failed nope"), "\(run)")
                let text = try await HaulProcess.run(["status"] + db)
                #expect(text.stdout.contains("2 done, 1 failed, 1 cancelled"), "\(text)")
                #expect(text.stdout.contains("404"), "\(text)")
                let retried = try await HaulProcess.run(["queue", "retry-failed"] + db)
                #expect(retried.stdout.contains("1 failed download back to waiting"), "\(retried)")
                let set = try await HaulProcess.run(
                    ["queue", "set", "--per-host", "2", "--per-host-rate", "10/s"] + db)
                #expect(set.stdout.contains("per host 2 connections, 0.1 s between starts"), "\(set)")
                let purged = try await HaulProcess.run(["queue", "purge", "--older-than", "0s"] + db)
                #expect(purged.stdout.contains("3 finished downloads purged"), "\(purged)")
                let after = try await HaulProcess.run(["status", "--json"] + db)
                let object = try JSONSerialization.jsonObject(with: Data(after.stdout.utf8)) as? [String: Any]
                #expect(object?["waiting"] as? Int == 1 && object?["done"] as? Int == 0, "\(after)")
            }
        }
    }
}

extension HaulProcess {
    /// How many times `text` occurs in what the process has written to standard output so far.
    func stdoutSoFarCount(_ text: String) -> Int {
        stdoutSoFar.components(separatedBy: text).count - 1
    }
}
