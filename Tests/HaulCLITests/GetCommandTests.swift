import Crypto
import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `haul get`'s contract, checked by running the built binary against a loopback HaulTestServer: every option,
/// every exit status, and the files it leaves.
@Suite("haul get", .timeLimit(.minutes(2)))
struct GetCommandTests {
    /// The size of the file at `path`, 0 when there is none.
    static func size(of path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0
    }

    @Test("downloads every URL, exits 0, and prints plain lines without escape codes when not on a terminal")
    func downloadsAndExitsZero() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let run = try await HaulProcess.run([
                "get", "-d", dir.path, bytes(server, "a.bin", size: 1000), bytes(server, "b.bin", size: 300_000),
                bytes(server, "c.bin", size: 0),
            ])
            #expect(run.status == 0, "\(run)")
            #expect(dir.contents() == [".haul", "a.bin", "b.bin", "c.bin"])
            #expect(
                { contentsOf(dir.file("b.bin")) == TestServer.expectedBytes(name: "b.bin", size: 300_000) }(),
                "not the server's bytes")
            #expect(contentsOf(dir.file("c.bin")) == [])
            // The journal was finished before the process exited: its log folded into the database, none left.
            let journalFiles = try FileManager.default.contentsOfDirectory(atPath: dir.file(".haul").path)
            #expect(!journalFiles.contains { $0.contains("-log.") }, "\(journalFiles)")
            #expect(run.stdout.contains("start  a.bin"))
            #expect(run.stdout.contains("done   b.bin"))
            #expect(run.stdout.contains("Done: 3 downloaded of 3 files"))
            #expect(!run.stdout.contains("\u{1B}"), "escape codes in plain output")
            #expect(run.stderr.isEmpty)
        }
    }

    @Test("published files get 0644 less the umask, small (unnamed until linked) and large (a named partial) alike")
    func publishedModeFollowsUmask() async throws {
        try await TestServer.withRunning { server in
            for (umask, expected) in [("022", 0o644), ("077", 0o600), ("002", 0o644)] {
                let dir = try TemporaryDirectory()
                let command = [
                    "umask \(umask) && exec \"$0\" \"$@\"", try HaulProcess.binary().path, "get", "-q", "-d",
                    dir.path, bytes(server, "small.bin", size: 4096), bytes(server, "large.bin", size: 300_000),
                ]
                let run = try await ChildProcess("/bin/sh", ["-c"] + command).finish()
                #expect(run.status == 0, "\(run)")
                for name in ["small.bin", "large.bin"] {
                    let mode = try FileManager.default.attributesOfItem(atPath: dir.file(name).path)[.posixPermissions]
                    #expect(mode as? Int == expected, "\(name) with umask \(umask)")
                }
            }
        }
    }

    @Test("-o names the file of a single URL; -d is created when missing")
    func outputName() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let target = dir.url.appendingPathComponent("new/deeper")
            let run = try await HaulProcess.run([
                "get", "-d", target.path, "-o", "renamed.dat", bytes(server, "a.bin", size: 100),
            ])
            #expect(run.status == 0, "\(run)")
            #expect(
                contentsOf(target.appendingPathComponent("renamed.dat"))
                    == TestServer.expectedBytes(name: "a.bin", size: 100))
        }
    }

    /// Invalid input: exit 2, a message naming what is wrong (and the line), and nothing downloaded.
    struct BadInput: Sendable, CustomTestStringConvertible {
        var label: String
        var arguments: @Sendable (TestServer, URL) -> [String]
        var inputFile: String?
        var mustSay: [String]

        var testDescription: String { label }
    }

    static let badInputs: [BadInput] = [
        BadInput(
            label: "malformed URL", arguments: { _, _ in ["http//nowhere"] },
            mustSay: ["argument 1", "http//nowhere", "not a valid URL"]),
        BadInput(
            label: "unsupported scheme", arguments: { s, _ in ["ftp://127.0.0.1:\(s.port)/x"] },
            mustSay: ["unsupported scheme 'ftp'"]),
        BadInput(
            label: "missing input file", arguments: { _, d in ["-i", d.appendingPathComponent("nope.txt").path] },
            mustSay: ["-i/--input-file", "nope.txt", "cannot read"]),
        BadInput(
            label: "unreadable input file (a directory)", arguments: { _, d in ["-i", d.path] },
            mustSay: ["cannot read"]),
        BadInput(
            label: "-o with several URLs",
            arguments: { s, _ in ["-o", "x", "\(s.baseURL)/bytes/a?size=1", "\(s.baseURL)/bytes/b?size=1"] },
            mustSay: ["-o/--output", "2 URLs"]),
        BadInput(
            label: "-j 0", arguments: { s, _ in ["-j", "0", "\(s.baseURL)/bytes/a?size=1"] },
            mustSay: ["at least 1, not 0"]),
        BadInput(
            label: "-j negative", arguments: { s, _ in ["-j", "-3", "\(s.baseURL)/bytes/a?size=1"] }, mustSay: ["-3"]),
        BadInput(
            label: "unknown option", arguments: { _, _ in ["--frobnicate", "http://127.0.0.1/x"] },
            mustSay: ["frobnicate"]),
        BadInput(label: "no URL", arguments: { _, _ in [] }, mustSay: ["no URL given"]),
        BadInput(
            label: "duplicate destination",
            arguments: { s, _ in ["\(s.baseURL)/bytes/same.bin?size=1", "\(s.baseURL)/other/same.bin?size=2"] },
            mustSay: ["argument 2", "argument 1", "would both write", "same.bin"]),
        BadInput(
            label: "input file: every bad line, with its number", arguments: { _, _ in [] },
            inputFile: """
                # a comment, then a blank line

                http://127.0.0.1:1/good.bin
                  out=fine.bin
                  colour=blue
                gopher://127.0.0.1/x
                http//broken
                  checksum=sha-256=abc
                http://127.0.0.1:1/a http://127.0.0.1:1/b\r
                """,
            mustSay: [
                "urls.txt:5: unknown option 'colour'", "urls.txt:6: unsupported scheme 'gopher'",
                "urls.txt:7:", "not a valid URL",
                "urls.txt:9: 'http://127.0.0.1:1/a http://127.0.0.1:1/b' is not one URL",
            ]),
        BadInput(
            label: "input file: duplicate destination through out=", arguments: { _, _ in [] },
            inputFile: "http://127.0.0.1:1/a.bin\n  out=x.bin\nhttp://127.0.0.1:1/b.bin\n  out=x.bin\n",
            mustSay: ["urls.txt:3", "urls.txt:1", "would both write"]),
        BadInput(
            label: "input file: a name from the URL and an out= name in one directory (dir=sub, dir=sub/)",
            arguments: { _, _ in [] },
            inputFile: "http://127.0.0.1:1/x.bin\n  dir=sub\nhttp://127.0.0.1:1/y.bin\n  dir=sub/\n  out=x.bin\n",
            mustSay: ["urls.txt:3", "urls.txt:1", "would both write", "sub/x.bin"]),
        BadInput(
            label: "input file: one directory written two ways (dir=./sub, dir=sub)", arguments: { _, _ in [] },
            inputFile: "http://127.0.0.1:1/x.bin\n  dir=./sub\nhttp://127.0.0.1:2/x.bin\n  dir=sub\n",
            mustSay: ["urls.txt:3", "urls.txt:1", "would both write", "sub/x.bin"]),
        BadInput(
            label: "input file: option line before any URL", arguments: { _, _ in [] }, inputFile: "  out=x\n",
            mustSay: ["urls.txt:1", "must follow a URL"]),
        BadInput(
            label: "bad --checksum", arguments: { s, _ in ["--checksum", "md5=00", "\(s.baseURL)/bytes/a?size=1"] },
            mustSay: ["md5=00"]),
        BadInput(
            label: "bad --max-size", arguments: { s, _ in ["--max-size", "lots", "\(s.baseURL)/bytes/a?size=1"] },
            mustSay: ["--max-size 'lots'"]),
        BadInput(
            label: "bad --on-conflict",
            arguments: { s, _ in ["--on-conflict", "merge", "\(s.baseURL)/bytes/a?size=1"] },
            mustSay: ["merge"]),
        BadInput(
            label: "bad --header", arguments: { s, _ in ["--header", "NoColon", "\(s.baseURL)/bytes/a?size=1"] },
            mustSay: ["NoColon"]),
        BadInput(
            label: "--connect-timeout 0",
            arguments: { s, _ in ["--connect-timeout", "0", "\(s.baseURL)/bytes/a?size=1"] },
            mustSay: ["--connect-timeout"]),
    ]

    @Test("bad input exits 2, says what and where, and downloads nothing", arguments: badInputs)
    func badInput(_ bad: BadInput) async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let out = dir.url.appendingPathComponent("out")
            var arguments = ["get", "-d", out.path] + bad.arguments(server, dir.url)
            if let inputFile = bad.inputFile {
                let file = dir.url.appendingPathComponent("urls.txt")
                try Data(inputFile.utf8).write(to: file)
                arguments += ["-i", file.path]
            }
            let run = try await HaulProcess.run(arguments)
            #expect(run.status == 2, "\(run)")
            for fragment in bad.mustSay {
                #expect(run.stderr.contains(fragment), "stderr does not say '\(fragment)':\n\(run.stderr)")
            }
            #expect(server.stats.requestCount == 0)
            #expect(!FileManager.default.fileExists(atPath: out.path), "the destination was created")
        }
    }

    @Test("a long list is planned in two halves: problems and a clash across them in line order; clean, in order")
    func longListPlannedInHalves() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            var lines = (1...3_000).map { "http://127.0.0.1:1/f\($0)" }
            lines[9] = "gopher://127.0.0.1/x"  // line 10, first half
            lines[2_899] = "http//broken"  // line 2,900, second half
            lines[2_999] = "http://127.0.0.1:1/f100"  // line 3,000 would write line 100's file: found among the rest
            let file = dir.file("urls.txt")
            try Data(lines.joined(separator: "\n").utf8).write(to: file)
            let refused = try await HaulProcess.run(["get", "-d", dir.file("out").path, "-i", file.path])
            #expect(refused.status == 2, "\(refused)")
            let first = try #require(refused.stderr.range(of: "urls.txt:10:"), "\(refused.stderr)")
            let second = try #require(refused.stderr.range(of: "urls.txt:2900:"), "\(refused.stderr)")
            #expect(first.lowerBound < second.lowerBound)
            let clash = "urls.txt:3000: 'http://127.0.0.1:1/f100' and 'http://127.0.0.1:1/f100' ("
            #expect(refused.stderr.contains(clash), "\(refused.stderr)")
            #expect(refused.stderr.contains("urls.txt:100) would both write"), "\(refused.stderr)")

            // Width 1 fetches in input order, so the requests' order is the plan's.
            let urls = (0..<2_100).map { bytes(server, "n\($0).bin", size: 10) }
            try Data(urls.joined(separator: "\n").utf8).write(to: file)
            let run = try await HaulProcess.run([
                "get", "-q", "-j", "1", "-d", dir.file("in-order").path, "-i", file.path,
            ])
            #expect(run.status == 0, "\(run)")
            let paths = server.stats.requests.map(\.path)
            let expected = (0..<2_100).map { "/bytes/n\($0).bin" }
            let firstOutOfOrder = paths.indices.first { $0 >= expected.count || paths[$0] != expected[$0] }
            #expect(paths.count == expected.count, "\(paths.count) requests")
            #expect(firstOutOfOrder == nil, "request \(firstOutOfOrder ?? -1) out of input order")
        }
    }

    @Test("bad input leaves an existing directory as it was: no journal made there, an earlier one kept")
    func badInputInExistingDirectory() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            try Data("mine".utf8).write(to: dir.file("keep.txt"))
            // Found bad while planning, after the journal's open has started.
            let bad = ["get", "-d", dir.path, bytes(server, "same.bin", size: 1), "\(server.baseURL)/other/same.bin"]
            let refused = try await HaulProcess.run(bad)
            #expect(refused.status == 2, "\(refused)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["keep.txt"])

            let url = bytes(server, "a.bin", size: 1000)
            let first = try await HaulProcess.run(["get", "-d", dir.path, url])
            #expect(first.status == 0, "\(first)")
            let refusedAgain = try await HaulProcess.run(bad)
            #expect(refusedAgain.status == 2, "\(refusedAgain)")
            let requests = server.stats.requestCount
            let rerun = try await HaulProcess.run(["get", "-d", dir.path, url])
            #expect(rerun.stdout.contains("skip   a.bin: already complete"), "\(rerun)")
            #expect(server.stats.requestCount == requests)
        }
    }

    @Test("input file options out=, dir=, checksum= and header= apply to their URL; '-' reads stdin")
    func inputFileOptions() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let digest = sha256Hex(TestServer.expectedBytes(name: "c.bin", size: 5000))
            // Windows line ends, blanks around values, a blank line of spaces and comments (one indented) read as
            // the plain lines would.
            let input = [
                "# first a comment",
                "\(bytes(server, "a.bin", size: 100)) \t",
                "  out=first.dat  ",
                "   ",
                "\(bytes(server, "b.bin", size: 200))",
                "\tdir=sub/deeper",
                "  # an indented comment",
                "\(bytes(server, "c.bin", size: 5000))",
                "  checksum=sha-256=\(digest)",
                "\(bytes(server, "secret.bin", size: 50, ["requireAuth": "Bearer token"]))",
                "  header=Authorization: Bearer token\t",
            ].joined(separator: "\r\n")
            let run = try await HaulProcess.run(["get", "-d", dir.path, "-i", "-"], input: input)
            #expect(run.status == 0, "\(run)")
            #expect(dir.contents() == [".haul", "c.bin", "first.dat", "secret.bin", "sub"])
            #expect(contentsOf(dir.file("sub/deeper/b.bin")) == TestServer.expectedBytes(name: "b.bin", size: 200))
        }
    }

    @Test("a failed download exits 1 while the others still complete; the summary names the failure")
    func failureExitsOne() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let run = try await HaulProcess.run([
                "get", "-d", dir.path, bytes(server, "ok1.bin", size: 100),
                bytes(server, "gone.bin", size: 100, ["status": "404"]), bytes(server, "ok2.bin", size: 100),
            ])
            #expect(run.status == 1, "\(run)")
            #expect(dir.contents() == [".haul", "ok1.bin", "ok2.bin"])
            #expect(run.stderr.contains("fail   gone.bin: server answered 404"))
            #expect(run.stdout.contains("1 failed"))
            #expect(run.stdout.contains("failed: gone.bin: server answered 404 Not Found"))
        }
    }

    @Test("--checksum: a matching digest passes; a wrong one fails and leaves no file")
    func checksum() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let good = sha256Hex(TestServer.expectedBytes(name: "a.bin", size: 4000))
            let ok = try await HaulProcess.run([
                "get", "-d", dir.path, "--checksum", "sha-256=\(good)", bytes(server, "a.bin", size: 4000),
            ])
            #expect(ok.status == 0, "\(ok)")
            let bad = String(repeating: "0", count: 64)
            let failed = try await HaulProcess.run([
                "get", "-d", dir.path, "--checksum", "sha256=\(bad)", bytes(server, "b.bin", size: 4000),
            ])
            #expect(failed.status == 1, "\(failed)")
            #expect(failed.stderr.contains("expected \(bad)"))
            #expect(dir.contents() == [".haul", "a.bin"])
        }
    }

    @Test("--retries: transient failures are retried 3 times by default; --retries 0 fails at once")
    func retries() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let none = try await HaulProcess.run([
                "get", "-d", dir.path, "--retries", "0", bytes(server, "once.bin", size: 100, ["fail": "1"]),
            ])
            #expect(none.status == 1, "\(none)")
            #expect(none.stderr.contains("503"))
            let retried = try await HaulProcess.run([
                "get", "-d", dir.path, bytes(server, "twice.bin", size: 100, ["fail": "2"]),
            ])
            #expect(retried.status == 0, "\(retried)")
            #expect(retried.stdout.components(separatedBy: "retry  twice.bin").count - 1 == 2)
            #expect(server.stats.requests(toPath: "/bytes/twice.bin") == 3)
        }
    }

    @Test("--max-size refuses larger bodies (K, M, G suffixes)")
    func maxSize() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let refused = try await HaulProcess.run([
                "get", "-d", dir.path, "--max-size", "1K", bytes(server, "big.bin", size: 5000),
            ])
            #expect(refused.status == 1, "\(refused)")
            #expect(refused.stderr.contains("over the limit of 1024"))
            let allowed = try await HaulProcess.run([
                "get", "-d", dir.path, "--max-size", "0.01M", bytes(server, "big.bin", size: 5000),
            ])
            #expect(allowed.status == 0, "\(allowed)")
            #expect(dir.contents() == [".haul", "big.bin"])
        }
    }

    @Test("-j 1 fetches in input order; --per-host 1 holds one per host with two hosts")
    func limits() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let names = (1...6).map { "f\($0).bin" }
            let serial = try await HaulProcess.run(
                ["get", "-d", dir.path, "-j", "1"] + names.map { bytes(server, $0, size: 1000) })
            #expect(serial.status == 0, "\(serial)")
            #expect(server.stats.requests.map(\.path) == names.map { "/bytes/\($0)" })
            #expect(server.stats.maxInFlight == 1)

            server.resetStats()
            let hostDir = try TemporaryDirectory()
            var urls: [String] = []
            for index in 0..<3 {
                urls.append(server.url(path: "/bytes/ip\(index)", query: ["size": "100", "hold": "g"]).absoluteString)
                urls.append(
                    server.url(path: "/bytes/lh\(index)", query: ["size": "100", "hold": "g"], host: "localhost")
                        .absoluteString)
            }
            let process = try HaulProcess(["get", "-d", hostDir.path, "-j", "4", "--per-host", "1"] + urls)
            // Both hosts' first downloads are held at the gate: two in flight, one per host.
            try await eventually("one request per host held") { server.heldCount(at: "g") == 2 }
            server.openGate("g")
            let run = await process.finish()
            #expect(run.status == 0, "\(run)")
            #expect(server.stats.maxInFlightByHost.values.max() == 1)
            #expect(server.stats.maxInFlight == 2)
            #expect(hostDir.contents().count == 7)
        }
    }

    @Test("--stall-timeout: no byte for S seconds is a (transient) failure")
    func stallTimeout() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let run = try await HaulProcess.run([
                "get", "-d", dir.path, "--stall-timeout", "0.5", "--retries", "0", "--connect-timeout", "5",
                bytes(server, "stuck.bin", size: 10_000, ["stallAfter": "1000", "stall": "forever"]),
            ])
            #expect(run.status == 1, "\(run)")
            #expect(run.stderr.contains("stall timeout"))
            #expect(dir.contents().filter { !$0.hasPrefix(".") }.isEmpty)
        }
    }

    @Test("--header is sent, and Authorization does not follow a redirect to another origin")
    func headersAndRedirects() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let sameOrigin = try await HaulProcess.run([
                "get", "-d", dir.path, "--header", "Authorization: Bearer s3cret",
                bytes(server, "mine.bin", size: 10, ["requireAuth": "Bearer s3cret"]),
            ])
            #expect(sameOrigin.status == 0, "\(sameOrigin)")
            let elsewhere = bytes(server, "theirs.bin", size: 10, ["requireAuth": "Bearer s3cret"])
                .replacingOccurrences(of: "127.0.0.1", with: "localhost")
            let crossOrigin = try await HaulProcess.run([
                "get", "-d", dir.path, "-o", "theirs.bin", "--header", "Authorization: Bearer s3cret",
                bytes(server, "hop", size: 10, ["redirectTo": elsewhere]),
            ])
            #expect(crossOrigin.status == 1, "\(crossOrigin)")
            #expect(crossOrigin.stderr.contains("401"))
            let redirected = server.stats.requests.last
            #expect(redirected?.host?.hasPrefix("localhost") == true)
            #expect(redirected?.authorization == nil)
        }
    }

    @Test("--content-disposition names the file from the server's header, made safe")
    func contentDisposition() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let run = try await HaulProcess.run([
                "get", "-d", dir.path, "--content-disposition",
                bytes(server, "download", size: 10, ["disposition": "attachment; filename=\"../../report.pdf\""]),
            ])
            #expect(run.status == 0, "\(run)")
            #expect(dir.contents() == [".haul", "report.pdf"])
        }
    }

    @Test("--on-conflict for a file Haul did not write: fail (untouched), skip, overwrite, rename")
    func onConflict() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let url = bytes(server, "taken.bin", size: 100)
            let mine = Data("user's own file".utf8)
            try mine.write(to: dir.file("taken.bin"))

            let fail = try await HaulProcess.run(["get", "-d", dir.path, url])
            #expect(fail.status == 1, "\(fail)")
            #expect(fail.stderr.contains("already exists"))
            #expect(try Data(contentsOf: dir.file("taken.bin")) == mine)

            let skip = try await HaulProcess.run(["get", "-d", dir.path, "--on-conflict", "skip", url])
            #expect(skip.status == 0, "\(skip)")
            #expect(try Data(contentsOf: dir.file("taken.bin")) == mine)

            let rename = try await HaulProcess.run(["get", "-d", dir.path, "--on-conflict", "rename", url])
            #expect(rename.status == 0, "\(rename)")
            #expect(contentsOf(dir.file("taken (1).bin")) == TestServer.expectedBytes(name: "taken.bin", size: 100))

            let overwrite = try await HaulProcess.run(["get", "-d", dir.path, "--on-conflict", "overwrite", url])
            #expect(overwrite.status == 0, "\(overwrite)")
            #expect(contentsOf(dir.file("taken.bin")) == TestServer.expectedBytes(name: "taken.bin", size: 100))
        }
    }

    @Test("--json: every line is a JSON object; the summary matches the files on disk")
    func json() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let run = try await HaulProcess.run([
                "get", "--json", "-d", dir.path, bytes(server, "a.bin", size: 2000),
                bytes(server, "b.bin", size: 300_000, ["fail": "1"]),
                bytes(server, "nope.bin", size: 1, ["status": "404"]),
            ])
            #expect(run.status == 1, "\(run)")
            let lines = run.stdout.split(separator: "\n")
            var objects: [[String: Any]] = []
            for line in lines {
                let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                objects.append(try #require(object, "not a JSON object: \(line)"))
            }
            let kinds = Set(objects.compactMap { $0["event"] as? String })
            #expect(kinds == ["start", "progress", "retry", "finish", "fail", "summary"])
            let summary = try #require(objects.last)
            #expect(summary["event"] as? String == "summary")
            let finished = objects.filter { $0["event"] as? String == "finish" }
            let onDisk = dir.contents().filter { $0 != ".haul" }
            #expect(summary["downloaded"] as? Int == onDisk.count)
            #expect(summary["failed"] as? Int == 1)
            #expect(summary["exitCode"] as? Int == 1)
            var total = 0
            for event in finished {
                let path = try #require(event["path"] as? String)
                let size = try #require(event["size"] as? Int)
                let attributes = try FileManager.default.attributesOfItem(atPath: path)
                #expect((attributes[.size] as? NSNumber)?.intValue == size)
                total += size
            }
            #expect(summary["size"] as? Int == total)
            #expect(!run.stdout.contains("\u{1B}"))
        }
    }

    @Test("--sha256 prints each file's digest on its line and in --json; without it none is computed or printed")
    func sha256Option() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let digest = sha256Hex(TestServer.expectedBytes(name: "h.bin", size: 400_000))
            let url = bytes(server, "h.bin", size: 400_000)
            let lines = try await HaulProcess.run(["get", "--sha256", "--no-journal", "-d", dir.path, url])
            #expect(lines.status == 0 && lines.stdout.contains("h.bin") && lines.stdout.contains("sha256=\(digest)"))

            let json = try await HaulProcess.run([
                "get", "--sha256", "--json", "--no-journal", "--on-conflict", "overwrite", "-d", dir.path, url,
            ])
            let finish = try json.stdout.split(separator: "\n")
                .compactMap { try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
                .first { $0["event"] as? String == "finish" }
            #expect(finish?["sha256"] as? String == digest, "\(json)")

            let plain = try await HaulProcess.run([
                "get", "--json", "--no-journal", "--on-conflict", "overwrite", "-d", dir.path, url,
            ])
            #expect(plain.status == 0 && !plain.stdout.contains("sha256"), "\(plain)")
        }
    }

    @Test("-q prints nothing on success and only errors otherwise; -v logs requests to stderr")
    func quietAndVerbose() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let quiet = try await HaulProcess.run(["get", "-q", "-d", dir.path, bytes(server, "q.bin", size: 10)])
            #expect(quiet.status == 0)
            #expect(quiet.stdout.isEmpty && quiet.stderr.isEmpty, "\(quiet)")
            let quietFail = try await HaulProcess.run([
                "get", "-q", "-d", dir.path, bytes(server, "x.bin", size: 10, ["status": "500"]), "--retries", "0",
            ])
            #expect(quietFail.status == 1)
            #expect(quietFail.stdout.isEmpty)
            #expect(quietFail.stderr.contains("x.bin: server answered 500"))
            let verbose = try await HaulProcess.run([
                "get", "-v", "-d", dir.path, bytes(server, "v.bin", size: 10, ["redirects": "1"]),
            ])
            #expect(verbose.status == 0, "\(verbose)")
            #expect(verbose.stderr.contains("request"))
            #expect(verbose.stderr.contains("redirect"))
        }
    }

    #if canImport(Darwin)
    @Test("--transport urlsession downloads the same bytes")
    func urlSessionTransport() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let run = try await HaulProcess.run([
                "get", "--transport", "urlsession", "-d", dir.path, bytes(server, "u.bin", size: 200_000),
            ])
            #expect(run.status == 0, "\(run)")
            #expect(
                { contentsOf(dir.file("u.bin")) == TestServer.expectedBytes(name: "u.bin", size: 200_000) }(),
                "not the server's bytes")
        }
    }
    #else
    @Test("--transport urlsession is a usage error off Apple platforms, and haul does not link libcurl")
    func urlSessionTransportRefused() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let run = try await HaulProcess.run([
                "get", "--transport", "urlsession", "-d", dir.path, bytes(server, "u.bin", size: 200_000),
            ])
            #expect(run.status == 2 && run.stderr.contains("urlsession"), "\(run)")
            #expect(server.stats.requestCount == 0 && dir.contents().isEmpty)
        }
        // libcurl and the libraries it needs would be loaded at every start (bench/compare, s2w1).
        let binary = try HaulProcess.binary().path
        let (status, linked) = try await onOwnThread {
            let ldd = Process()
            ldd.executableURL = URL(fileURLWithPath: "/usr/bin/ldd")
            ldd.arguments = [binary]
            let output = Pipe()
            ldd.standardOutput = output
            try ldd.run()
            let linked = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            ldd.waitUntilExit()
            return (ldd.terminationStatus, linked)
        }
        #expect(status == 0 && linked.contains("libc.so"), "\(linked)")
        #expect(!linked.contains("libcurl"), "\(linked)")
    }
    #endif

    @Test("rerunning a finished command skips what Haul completed there, without a request")
    func rerunSkipsCompleted() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let urls = [bytes(server, "a.bin", size: 1000), bytes(server, "b.bin", size: 2000)]
            let first = try await HaulProcess.run(["get", "-d", dir.path] + urls)
            #expect(first.status == 0, "\(first)")
            let requests = server.stats.requestCount
            let second = try await HaulProcess.run(["get", "-d", dir.path] + urls)
            #expect(second.status == 0, "\(second)")
            #expect(second.stdout.contains("skip   a.bin: already complete"))
            #expect(second.stdout.contains("2 already complete"))
            #expect(server.stats.requestCount == requests)
        }
    }

    @Test(
        "SIGINT, SIGTERM or SIGHUP mid-transfer: exit 130, no file at the destination; the rerun resumes and finishes",
        arguments: [SIGINT, SIGTERM, SIGHUP])
    func interruptThenRerun(signal: Int32) async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 2_000_000
            let url = bytes(server, "slow.bin", size: size, ["rate": "1000000"])
            let process = try HaulProcess(["get", "-d", dir.path, url])
            // Watched from a thread of its own: a task polling for the bytes can be held up for seconds while other
            // tests keep the pool busy, and the transfer (2 s) was then over before the signal (seen once in CI).
            // Mid-transfer on Haul's side too: bytes in its partial file, not only sent by the server (under load the
            // server had sent 200 KB while Haul had written none, and the rerun had nothing to resume from).
            let partial = dir.file(".slow.bin.haul-partial").path
            try await onOwnThread {
                while server.stats.bodyBytesSent <= 200_000 || Self.size(of: partial) < 100_000, !process.hasExited {
                    usleep(1_000)
                }
                process.send(signal)
            }
            let run = await process.finish()
            #expect(run.status == 130, "\(run)")
            #expect(run.stdout.contains("Interrupted"))
            #expect(!FileManager.default.fileExists(atPath: dir.file("slow.bin").path))
            #expect(dir.contents() == [".haul", ".slow.bin.haul-partial"])

            let sentBefore = server.stats.bodyBytesSent
            let rerun = try await HaulProcess.run(["get", "-d", dir.path, url])
            #expect(rerun.status == 0, "\(rerun)")
            #expect(rerun.stdout.contains("resuming at"))
            #expect(
                { contentsOf(dir.file("slow.bin")) == TestServer.expectedBytes(name: "slow.bin", size: size) }(),
                "not the server's bytes")
            #expect(dir.contents() == [".haul", "slow.bin"])
            #expect(server.stats.requests.last?.range != nil)
            #expect(server.stats.bodyBytesSent - sentBefore < size)
        }
    }
}

/// `--connect-timeout`, against a listener whose accept queue is full: Linux then drops new SYNs, so a connect
/// hangs until the client gives up — the one way to make a loopback connect slow.
@Suite("haul get --connect-timeout", .timeLimit(.minutes(1)))
struct ConnectTimeoutTests {
    @Test("a connection that cannot be established fails after --connect-timeout, not the default 10 s")
    func connectTimeout() async throws {
        let listener = socket(AF_INET, streamSocket, 0)
        try #require(listener >= 0)
        defer { close(listener) }
        let (listening, port) = withLoopbackAddress { address, length in
            var length = length
            return bind(listener, address, length) == 0 && listen(listener, 0) == 0
                && getsockname(listener, address, &length) == 0
        }
        try #require(listening)
        // Fill the accept queue (never accepted), non-blocking so the extra ones just sit in SYN-SENT.
        var fillers: [Int32] = []
        defer { fillers.forEach { close($0) } }
        for _ in 0..<4 {
            let client = socket(AF_INET, streamSocket, 0)
            _ = fcntl(client, F_SETFL, O_NONBLOCK)
            _ = withLoopbackAddress(port: port) { connect(client, $0, $1) }
            fillers.append(client)
        }
        let dir = try TemporaryDirectory()
        let started = ContinuousClock.now
        let run = try await HaulProcess.run([
            "get", "-d", dir.path, "--connect-timeout", "1", "--retries", "0", "http://127.0.0.1:\(port)/x.bin",
        ])
        let elapsed = ContinuousClock.now - started
        #expect(run.status == 1, "\(run)")
        #expect(run.stderr.lowercased().contains("connect"), "\(run)")
        #expect(elapsed < .seconds(8), "gave up after \(elapsed), not after about 1 s")
        #expect(dir.contents().filter { !$0.hasPrefix(".") }.isEmpty)
    }
}
