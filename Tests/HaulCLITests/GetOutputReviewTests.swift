import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

/// A hostile review of what `haul get` tells its user and scripts, and of the options that shape a run.
@Suite("haul get: output and option review", .timeLimit(.minutes(3)))
struct GetOutputReviewTests {
    @Test("a huge -j is refused, naming it, never a crash")
    func hugeMaxConcurrent() async throws {
        let dir = try TemporaryDirectory()
        try await TestServer.withRunning { server in
            let url = bytes(server, "j", size: 10)
            let run = try await HaulProcess.run(["get", "-d", dir.path + "/D", "-j", "9223372036854775807", url])
            #expect(run.status == 2 && run.stderr.contains("-j/--max-concurrent must be at most 10000"), "\(run)")
            #expect(!run.stderr.contains("arithmetic overflow"), "\(run.stderr.prefix(300))")
        }
    }

    @Test("a negative --retries / --per-host is reported with its value, as -j -1 is")
    func negativeNumbersNamed() async throws {
        let dir = try TemporaryDirectory()
        try await TestServer.withRunning { server in
            let url = bytes(server, "n", size: 10)
            for (option, value) in [("--retries", "-1"), ("--per-host", "-3")] {
                let run = try await HaulProcess.run(["get", "-d", dir.path + "/D", option, value, url])
                #expect(run.status == 2, "\(run)")
                // validate() has "--retries must be 0 or more, not -1" / "--per-host must be at least 1, not -3":
                // unreachable, the parser says "Missing value" instead.
                #expect(run.stderr.contains("not \(value)"), "\(option) \(value): \(run.stderr)")
                #expect(!run.stderr.contains("Missing value"), "\(option) \(value): \(run.stderr)")
            }
        }
    }

    @Test("an input file saved with a UTF-8 BOM (Windows Notepad) reads like one without")
    func inputFileWithBOM() async throws {
        let dir = try TemporaryDirectory()
        try await TestServer.withRunning { server in
            let list = dir.path + "/urls.txt"
            let text = "\u{FEFF}\(bytes(server, "bom", size: 10))\r\n"
            try Data(text.utf8).write(to: URL(fileURLWithPath: list))
            let run = try await HaulProcess.run(["get", "-d", dir.path + "/D", "-i", list])
            #expect(run.status == 0, "\(run)")
            #expect(FileManager.default.fileExists(atPath: dir.path + "/D/bom"), "\(run)")
            // And a list whose first line is a comment.
            let commented = dir.path + "/commented.txt"
            try Data("\u{FEFF}# my list\r\n\(bytes(server, "bom2", size: 10))\r\n".utf8)
                .write(to: URL(fileURLWithPath: commented))
            let second = try await HaulProcess.run(["get", "-d", dir.path + "/D", "-i", commented])
            #expect(second.status == 0, "\(second)")
        }
    }

    @Test("--json's summary exitCode is the status the process exits with (cookie jar not writable)")
    func jsonSummaryExitCodeMatchesStatus() async throws {
        let dir = try TemporaryDirectory()
        try await TestServer.withRunning { server in
            let url = bytes(server, "cj", size: 10)
            let run = try await HaulProcess.run([
                "get", "--json", "-d", dir.path + "/D", "--cookie-jar", dir.path + "/missing/jar", url,
            ])
            let last = try #require(run.stdout.split(separator: "\n").last)
            let object = try #require(
                try JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any], "\(run)")
            #expect(object["event"] as? String == "summary", "\(run)")
            let reported = (object["exitCode"] as? NSNumber)?.int32Value
            #expect(
                reported == run.status,
                "summary says exitCode \(String(describing: reported)), process exited \(run.status)")
        }
    }

    @Test("a bad --checksum is blamed on --checksum, not on the URL's argument or line")
    func badChecksumNamesTheOption() async throws {
        let dir = try TemporaryDirectory()
        try await TestServer.withRunning { server in
            let url = bytes(server, "c", size: 10)
            let run = try await HaulProcess.run(["get", "-d", dir.path + "/D", "--checksum", "md5=00", url])
            #expect(run.status == 2, "\(run)")
            #expect(run.stderr.contains("--checksum"), "\(run.stderr)")
        }
    }

    @Test("a URL left out because the list changed in place during the run is not an exit status 0")
    func leftOutEntryIsNotSuccess() async throws {
        let dir = try TemporaryDirectory()
        try await TestServer.withRunning { server in
            let list = dir.path + "/urls.txt"
            // More entries than the run reads ahead (a window of 1024 and a 64 KiB slice): the last line is read
            // again only after the first download, held at a gate, has finished.
            var lines = [bytes(server, "first", size: 1, ["hold": "g"])]
            for index in 1...3000 { lines.append(bytes(server, "f\(index)", size: 1)) }
            let last = lines[lines.count - 1]
            try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: list))
            let process = try HaulProcess(["get", "-j", "1", "-d", dir.path + "/D", "-i", list])
            // Checked and running: the first request waits at the gate.
            let deadline = ContinuousClock.now + .seconds(30)
            while server.heldCount(at: "g") == 0, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(server.heldCount(at: "g") == 1)
            // The same length, in place: the last URL's scheme is no longer http.
            let changed = "ftp" + last.dropFirst("http".count) + "x"
            let handle = try #require(FileHandle(forUpdatingAtPath: list))
            var text = try String(contentsOfFile: list, encoding: .utf8)
            text = text.replacingOccurrences(of: last, with: changed)
            try handle.seek(toOffset: 0)
            try handle.write(contentsOf: Data(text.utf8))
            try handle.close()
            server.openGate("g")
            let run = await process.finish()
            #expect(run.stderr.contains("left out"), "\(run.stderr.prefix(500))")
            #expect(!FileManager.default.fileExists(atPath: dir.path + "/D/f3000"))
            // 0 is "all succeeded": one of the 3001 URLs was not downloaded.
            #expect(run.status != 0, "exit \(run.status); \(run.stdout.split(separator: "\n").last ?? "")")
        }
    }

    @Test("an over-long last line with no URL before it in the file is reported, not silently dropped")
    func overLongLastLineReported() async throws {
        let dir = try TemporaryDirectory()
        try await TestServer.withRunning { server in
            let list = dir.path + "/urls.txt"
            let long = bytes(server, "long", size: 1) + "&x=" + String(repeating: "a", count: 2_000_000)
            try Data("# my list\n\(long)\n".utf8).write(to: URL(fileURLWithPath: list))
            let url = bytes(server, "arg", size: 1)
            let run = try await HaulProcess.run(["get", "-d", dir.path + "/D", url, "-i", list])
            // "2 usage error or invalid input — nothing is downloaded and every bad line is reported"
            #expect(run.status == 2, "exit \(run.status): \(run.stdout) \(run.stderr.prefix(300))")
            #expect(run.stderr.contains("urls.txt:2"), "\(run.stderr.prefix(300))")
            #expect(!FileManager.default.fileExists(atPath: dir.path + "/D/arg"))
        }
    }

    @Test("--on-conflict skip of a file Haul did not write is said as left as found, not 'already complete'")
    func conflictSkipIsNotAlreadyComplete() async throws {
        let dir = try TemporaryDirectory()
        try await TestServer.withRunning { server in
            let out = dir.path + "/D"
            try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
            // Someone else's 5-byte file where the 100-byte resource would go.
            try Data("junk\n".utf8).write(to: URL(fileURLWithPath: out + "/x"))
            let url = bytes(server, "x", size: 100)
            let run = try await HaulProcess.run(["get", "-d", out, "--on-conflict", "skip", url])
            #expect(run.status == 0, "\(run)")
            #expect(!run.stdout.contains("already complete"), "\(run.stdout)")
            #expect(run.stdout.contains("skip   x: exists, left as it is") && run.stdout.contains("1 left as found"))
            let json = try await HaulProcess.run(["get", "--json", "-d", out, "--on-conflict", "skip", url])
            let lines = json.stdout.split(separator: "\n")
            let summary = try #require(lines.last)
            #expect(!summary.contains("\"alreadyComplete\":1") && summary.contains("\"leftAsFound\":1"), "\(summary)")
            #expect(lines.contains { $0.contains("\"event\":\"finish\"") && $0.contains("\"keptExisting\":true") })
            #expect(server.stats.requests.isEmpty)
        }
    }
}
