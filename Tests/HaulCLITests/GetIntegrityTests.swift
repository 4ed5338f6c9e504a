import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `haul get` as a careless script, a user with two terminals and a hostile server would use it: never a wrong file
/// at a destination, and every odd input gets a clear answer.
@Suite("haul get integrity", .serialized, .timeLimit(.minutes(3)))
struct GetIntegrityTests {
    /// Blocks (on a thread of its own) until `path` holds at least `count` bytes, or `process` has exited.
    static func waitForBytes(_ count: Int, at path: String, while process: HaulProcess) async throws {
        try await onOwnThread {
            while GetCommandTests.size(of: path) < count, !process.hasExited { usleep(1_000) }
        }
    }

    @Test(
        "two haul processes on one destination: one writes it whole, the other leaves it alone and says so",
        arguments: [false, true])
    func twoProcessesOneDestination(journal: Bool) async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 600_000
            // The body stops after 100,000 bytes until the second run has ended, so the two always meet.
            let url = bytes(server, "shared.bin", size: size, ["stallAfter": "100000", "stall": "gate:second-ended"])
            let options = journal ? ["get", "-d", dir.path] : ["get", "--no-journal", "-d", dir.path]
            let first = try HaulProcess(options + [url])
            try await Self.waitForBytes(100_000, at: dir.file(".shared.bin.haul-partial").path, while: first)
            let second = try await HaulProcess.run(options + [url])
            server.openGate("second-ended")
            let firstRun = await first.finish()
            #expect(firstRun.status == 0, "\(firstRun)")
            #expect(second.status == 1, "\(second)")
            #expect(second.stderr.contains("another download"), "\(second)")
            #expect(
                { contentsOf(dir.file("shared.bin")) == TestServer.expectedBytes(name: "shared.bin", size: size) }(),
                "not the server's bytes")
            #expect(!dir.contents().contains { $0.hasSuffix(".haul-partial") }, "\(dir.contents())")
            // Nothing writes it after the runs said done.
            #expect(GetCommandTests.size(of: dir.file("shared.bin").path) == size)
        }
    }

    @Test("eight runs starting at once on a new directory all open its journal: none is told it is locked")
    func concurrentFirstRuns() async throws {
        try await TestServer.withRunning { server in
            for round in 0..<3 {
                let dir = try TemporaryDirectory()
                let runs = try (0..<8).map { index in
                    try HaulProcess(["get", "-q", "-d", dir.path, bytes(server, "r\(round)-\(index)", size: 10)])
                }
                for run in runs {
                    let output = await run.finish()
                    #expect(output.status == 0, "\(output)")
                    #expect(!output.stderr.contains("locked"), "\(output)")
                }
            }
        }
    }

    @Test("--on-conflict rename: a rerun recognises the renamed file as done and downloads nothing")
    func renameRerun() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            try Data("mine".utf8).write(to: dir.file("q1"))
            let url = bytes(server, "q1", size: 100_000)
            let first = try await HaulProcess.run(["get", "-d", dir.path, "--on-conflict", "rename", url])
            #expect(first.status == 0, "\(first)")
            let requests = server.stats.requestCount
            for _ in 0..<2 {
                let rerun = try await HaulProcess.run(["get", "-d", dir.path, "--on-conflict", "rename", url])
                #expect(rerun.status == 0, "\(rerun)")
                #expect(rerun.stdout.contains("1 already complete"), "\(rerun)")
            }
            #expect(server.stats.requestCount == requests)
            #expect(dir.contents() == [".haul", "q1", "q1 (1)"])
        }
    }

    @Test("a name of 242-255 bytes with a body over 64 KiB is published, and an interrupted one resumes")
    func longNames() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let names = [242, 250, 255].map { String(repeating: "n", count: $0 - 4) + ".bin" }
            let list = names.map { "\(bytes(server, "long", size: 200_000))\n  out=\($0)\n" }.joined()
            let run = try await HaulProcess.run(["get", "-d", dir.path, "-i", "-"], input: list)
            #expect(run.status == 0, "\(run)")
            for name in names {
                #expect(
                    { contentsOf(dir.file(name)) == TestServer.expectedBytes(name: "long", size: 200_000) }(),
                    "not the server's bytes")
            }

            let slow = bytes(server, "slowlong", size: 2_000_000, ["rate": "1000000"])
            let name = String(repeating: "s", count: 251) + ".bin"
            let process = try HaulProcess(["get", "-d", dir.path, "-o", name, slow])
            // Its partial's name is cut to fit, so it is found by its suffix.
            let partialSize: @Sendable () -> Int = {
                dir.contents().filter { $0.hasSuffix(".haul-partial") }.map {
                    GetCommandTests.size(of: dir.file($0).path)
                }
                .max() ?? 0
            }
            try await onOwnThread {
                while partialSize() < 300_000, !process.hasExited { usleep(1_000) }
            }
            process.send(SIGINT)
            #expect(await process.finish().status == 130)
            let rerun = try await HaulProcess.run(["get", "-d", dir.path, "-o", name, slow])
            #expect(rerun.status == 0, "\(rerun)")
            #expect(rerun.stdout.contains("resuming at"), "\(rerun)")
            #expect(
                { contentsOf(dir.file(name)) == TestServer.expectedBytes(name: "slowlong", size: 2_000_000) }(),
                "not the server's bytes")
        }
    }

    @Test("dir= through a symbolic link out of the destination is refused before anything is downloaded")
    func symlinkedSubdirectory() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let outside = try TemporaryDirectory()
            try FileManager.default.createSymbolicLink(atPath: dir.file("sub").path, withDestinationPath: outside.path)
            let list = "\(bytes(server, "a.bin", size: 1000))\n  dir=sub\n"
            let run = try await HaulProcess.run(["get", "-d", dir.path, "-i", "-"], input: list)
            #expect(run.status == 2, "\(run)")
            #expect(run.stderr.contains("symbolic link"), "\(run)")
            #expect(outside.contents().isEmpty)
            #expect(server.stats.requestCount == 0)

            let nested = "\(bytes(server, "b.bin", size: 1000))\n  dir=sub/deeper\n"
            let deeper = try await HaulProcess.run(["get", "-d", dir.path, "-i", "-"], input: nested)
            #expect(deeper.status == 2, "\(deeper)")
            #expect(outside.contents().isEmpty)
        }
    }

    @Test("bidi controls never reach a file name or the terminal")
    func bidiControls() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let url = server.url(path: "/bytes/x", query: ["size": "100"]).absoluteString
                .replacingOccurrences(of: "/bytes/x", with: "/bytes/%E2%80%AEtxt.exe")
            let run = try await HaulProcess.run(["get", "-d", dir.path, url])
            #expect(run.status == 0, "\(run)")
            #expect(dir.contents() == [".haul", "txt.exe"])
            #expect(!run.stdout.unicodeScalars.contains("\u{202E}"))

            let bad = try await HaulProcess.run(["get", "-d", dir.path, "ftp://h/\u{202E}gpj.exe\u{1B}[2J"])
            #expect(bad.status == 2, "\(bad)")
            #expect(!bad.stderr.unicodeScalars.contains { $0 == "\u{202E}" || $0 == "\u{1B}" }, "\(bad)")
            #expect(bad.stderr.contains("\u{FFFD}gpj.exe"), "\(bad)")
        }
    }

    @Test("-i reads pipes, /dev/stdin and process substitution; a directory is named as one")
    func inputFromPipes() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let url = bytes(server, "piped.bin", size: 100)
            let haul = try HaulProcess.binary().path
            let substitution = try await ChildProcess(
                "/bin/bash", ["-c", "exec \"$0\" get -q -d \"$1\" -i <(echo \"$2\")", haul, dir.path, url]
            ).finish()
            #expect(substitution.status == 0, "\(substitution)")
            #expect(contentsOf(dir.file("piped.bin")) == TestServer.expectedBytes(name: "piped.bin", size: 100))

            let other = bytes(server, "stdin.bin", size: 100)
            let pipe = try await ChildProcess(
                "/bin/bash", ["-c", "echo \"$2\" | \"$0\" get -q -d \"$1\" -i /dev/stdin", haul, dir.path, other]
            ).finish()
            #expect(pipe.status == 0, "\(pipe)")
            #expect(contentsOf(dir.file("stdin.bin")) == TestServer.expectedBytes(name: "stdin.bin", size: 100))

            let directory = try await HaulProcess.run(["get", "-d", dir.path, "-i", dir.path])
            #expect(directory.status == 2, "\(directory)")
            #expect(directory.stderr.contains("Is a directory"), "\(directory)")
            #expect(!directory.stderr.contains("NSCocoaErrorDomain"), "\(directory)")
        }
    }

    @Test("a --header value with CR or LF is refused (exit 2), as a lone LF is")
    func headerLineBreaks() async throws {
        for header in ["X-A: a\r\nX-B: b", "X-A: a\rb", "X-A: a\nb"] {
            let run = try await HaulProcess.run(["get", "--header", header, "http://127.0.0.1:9/x"])
            #expect(run.status == 2, "\(run)")
            #expect(run.stderr.contains("line break"), "\(run)")
        }
    }

    @Test("café in NFC and in NFD are two files on Linux, not a collision")
    func normalisationForms() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let nfc = "caf\u{E9}"
            let nfd = "cafe\u{301}"
            let list =
                "\(bytes(server, "one", size: 10))\n  out=\(nfc)\n\(bytes(server, "two", size: 20))\n  out=\(nfd)\n"
            let run = try await HaulProcess.run(["get", "-d", dir.path, "-i", "-"], input: list)
            #expect(run.status == 0, "\(run)")
            let names = try FileManager.default.contentsOfDirectory(atPath: dir.path).map { Array($0.utf8) }
            #expect(names.contains(Array(nfc.utf8)) && names.contains(Array(nfd.utf8)), "\(names)")
        }
    }

    @Test("a control character in Content-Disposition is ignored without --content-disposition, cleaned with it")
    func controlCharacterInDisposition() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let query = ["disposition": "attachment; filename=\"ev\u{1}il.bin\""]
            let plain = try await HaulProcess.run(["get", "-d", dir.path, bytes(server, "plain.bin", size: 100, query)])
            #expect(plain.status == 0, "\(plain)")
            #expect(server.stats.requests(toPath: "/bytes/plain.bin") == 1)
            let named = try await HaulProcess.run([
                "get", "-d", dir.path, "--content-disposition", bytes(server, "named", size: 100, query),
            ])
            #expect(named.status == 0, "\(named)")
            #expect(dir.contents() == [".haul", "ev il.bin", "plain.bin"])
        }
    }

    @Test(
        "a journal that cannot be created (read-only destination) is named with the system's reason, not a raw error",
        .enabled(if: getuid() == 0, "needs root to run haul as another user (root may write anywhere)"))
    func unwritableJournal() async throws {
        let dir = try TemporaryDirectory()
        try FileManager.default.setAttributes([.posixPermissions: 0o555], ofItemAtPath: dir.path)
        let command = [
            "--reuid=65534", "--regid=65534", "--clear-groups", try HaulProcess.binary().path,
            "get", "-d", dir.path, "http://127.0.0.1:9/a.bin",
        ]
        let run = try await ChildProcess("/usr/bin/setpriv", command, environment: ["TERM": "dumb"]).finish()
        #expect(run.status == 2, "\(run)")
        #expect(run.stderr.contains("Permission denied") && run.stderr.contains("--no-journal"), "\(run)")
        #expect(!run.stderr.contains("Domain") && !run.stderr.contains("delete it"), "\(run)")
    }

    @Test(
        "SIGTERM while the input is still being read exits 130 at once, not 143",
        .enabled(if: TestPlatform.isLinux, "reads the signal handlers from /proc/PID/status"))
    func signalDuringStartUp() async throws {
        let dir = try TemporaryDirectory()
        let fifo = dir.file("list").path
        #expect(mkfifo(fifo, 0o600) == 0)
        let process = try HaulProcess(["get", "-d", dir.path, "-i", fifo])
        // The handler is in place when /proc says SIGTERM is caught; haul is then blocked reading the FIFO.
        try await onOwnThread {
            let deadline = Date().addingTimeInterval(10)
            while !Self.catches(SIGTERM, pid: process.pid), !process.hasExited, Date() < deadline { usleep(1_000) }
        }
        process.send(SIGTERM)
        let run = await process.finish()
        #expect(run.status == 130, "\(run)")
    }

    /// Whether process `pid` has a handler for `signal` (`SigCgt` in /proc).
    static func catches(_ signal: Int32, pid: pid_t) -> Bool {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigCgt:") }),
            let mask = UInt64(line.dropFirst("SigCgt:".count).trimmingCharacters(in: .whitespaces), radix: 16)
        else { return false }
        return mask & (1 << UInt64(signal - 1)) != 0
    }

    @Test("standard output closed under --json (| head -1): the run stops, exits 141, and keeps its partial")
    func closedOutput() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let haul = try HaulProcess.binary().path
            let slow = bytes(server, "slow.bin", size: 3_000_000, ["rate": "100000"])
            let quick = bytes(server, "quick.bin", size: 100)
            let script =
                "\"$0\" get --json -j 1 -d \"$1\" \"$2\" \"$3\" | head -1; echo \"status ${PIPESTATUS[0]}\" >&2"
            let run = try await ChildProcess("/bin/bash", ["-c", script, haul, dir.path, quick, slow]).finish()
            #expect(run.stderr.contains("status 141"), "\(run)")
            #expect(run.stdout.split(separator: "\n").count == 1, "\(run)")
            #expect(!FileManager.default.fileExists(atPath: dir.file("slow.bin").path))
            #expect(server.stats.bodyBytesSent < 3_000_000)
        }
    }
}
