import Foundation
import HaulTestServer

import HaulOperations
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `haul get` in a real pseudo-terminal (tmux, with `script` recording the raw bytes): bars render, stay within
/// the width, redraw at most about 10 times a second, and are cleared at the end and on Ctrl-C.
@Suite(
    "Terminal display", .timeLimit(.minutes(2)),
    .enabled(if: TestPlatform.isLinux, "drives haul in a terminal with util-linux's script -c and tmux"))
struct TerminalDisplayTests {
    static let columns = 60

    /// A tmux session on a socket of its own, running one shell command in a `columns` x 15 window.
    final class Session: Sendable {
        let socket = "haul-test-\(UUID().uuidString.prefix(8))"
        let raw: URL
        private let serverPID = Locked<pid_t>(0)

        /// Starts the session; call ``kill()`` when done (the pane stays, with remain-on-exit, until then).
        init(command: String, raw: URL) async throws {
            self.raw = raw
            // `script` gives haul a terminal of the pane's size and records every byte it writes.
            let recorded = "script -qefc \(Self.quote(command)) \(Self.quote(raw.path))"
            try await Self.tmux(
                socket,
                [
                    "new-session", "-d", "-x", "\(TerminalDisplayTests.columns)", "-y", "15",
                    "\(recorded); echo HAUL-EXIT=$?",
                    ";", "set-option", "remain-on-exit", "on",
                ])
            let pid = try await Self.tmux(socket, ["display-message", "-p", "#{pid}"])
            serverPID.withLock { $0 = pid_t(pid.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0 }
        }

        /// Ends the session and its server. (`kill-server` alone left servers running here, even past SIGTERM, so
        /// the server is also sent SIGKILL.)
        func kill() async {
            _ = try? await Self.tmux(socket, ["kill-server"])
            let pid = serverPID.withLock { $0 }
            guard pid > 0 else { return }
            #if canImport(Glibc)
            Glibc.kill(pid, SIGKILL)
            #else
            Darwin.kill(pid, SIGKILL)
            #endif
        }

        /// The screen as shown now (wrapped lines joined).
        func screen() async -> [String] {
            ((try? await Self.tmux(socket, ["capture-pane", "-p", "-J"])) ?? "").components(separatedBy: "\n")
        }

        func press(_ key: String) async throws { try await Self.tmux(socket, ["send-keys", key]) }

        /// Polls the screen (bounded) until `condition` holds; returns the screen that satisfied it.
        func waitForScreen(
            _ what: String, within limit: Duration, _ condition: ([String]) -> Bool,
            sourceLocation: SourceLocation = #_sourceLocation
        ) async throws -> [String] {
            let deadline = ContinuousClock.now + limit
            while true {
                let lines = await screen()
                if condition(lines) { return lines }
                if ContinuousClock.now > deadline {
                    Issue.record("never happened: \(what)", sourceLocation: sourceLocation)
                    return lines
                }
                try await Task.sleep(for: .milliseconds(20))
            }
        }

        /// Runs tmux to the end (a ChildProcess: nothing of the test process leaks into the tmux server, which
        /// outlives the call and would otherwise keep other tests' sockets and pipes open).
        @discardableResult
        static func tmux(_ socket: String, _ arguments: [String]) async throws -> String {
            var environment = ProcessInfo.processInfo.environment
            environment["TERM"] = "xterm-256color"
            environment.removeValue(forKey: "TMUX")
            let (status, stdout, stderr) = try await ChildProcess(
                "tmux", ["-L", socket] + arguments, environment: environment
            ).finish()
            guard status == 0 else {
                throw TmuxError(message: "tmux \(arguments.joined(separator: " ")): \(stdout)\(stderr)")
            }
            return stdout
        }

        static func quote(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }
    }

    struct TmuxError: Error, CustomStringConvertible {
        var message: String
        var description: String { message }
    }

    static func isBar(_ line: String) -> Bool {
        line.contains("[#") || line.contains("[-") || line.contains("[·") || line.hasPrefix("All ")
    }

    /// The raw output cut into the pieces a terminal draws between line starts, escape sequences removed.
    static func drawnPieces(_ raw: String) -> [String] {
        var text = ""
        var scalars = raw.unicodeScalars.makeIterator()
        while let scalar = scalars.next() {
            guard scalar == "\u{1B}" else {
                text.unicodeScalars.append(scalar)
                continue
            }
            // CSI: ESC [ parameters… final byte in @…~
            guard scalars.next() == "[" else { continue }
            while let next = scalars.next(), !(0x40...0x7E).contains(next.value) {}
        }
        return text.split(whereSeparator: { $0 == "\n" || $0 == "\r" || $0 == "\r\n" }).map(String.init)
    }

    /// `haul get` of four 600 KB files at `rate` bytes/s; with `holdingLast`, the last one is held at gate "g"
    /// until the test opens it, so the run cannot end before the test has seen what it waits for.
    func haulCommand(
        _ server: TestServer, dir: TemporaryDirectory, rate: Int, holdingLast: Bool = false, stalling: Bool = false
    ) throws -> String {
        let binary = try HaulProcess.binary().path
        let names = ["first-file.iso", "a-much-longer-file-name-that-will-not-fit.tar.gz", "small.txt", "last.bin"]
        let urls = names.map { name in
            var query = ["size": "600000", "rate": "\(rate)"]
            if holdingLast && name == names.last { query["hold"] = "g" }
            // Some bytes, then none: the bars stay however slowly the machine gets to them.
            if stalling { query.merge(["stallAfter": "400000", "stall": "forever"]) { $1 } }
            return server.url(path: "/bytes/\(name)", query: query).absoluteString
        }
        return ([binary, "get", "-j", "2", "-d", dir.path] + urls).map(Session.quote).joined(separator: " ")
    }

    /// `haul get -j 2` on a list of `count` tiny files, the first held at gate `g`.
    func longListCommand(_ server: TestServer, dir: TemporaryDirectory, count: Int) throws -> String {
        let urls = (0..<count).map { index in
            let query = index == 0 ? ["size": "10", "hold": "g"] : ["size": "10"]
            return server.url(path: "/bytes/l\(index)", query: query).absoluteString
        }
        let list = dir.url.appendingPathComponent("list.txt")
        try Data(urls.joined(separator: "\n").utf8).write(to: list)
        let binary = try HaulProcess.binary().path
        return [binary, "get", "-j", "2", "-d", dir.path, "-i", list.path].map(Session.quote).joined(separator: " ")
    }

    /// The totals drawn in `raw`'s frames (`1499/1500`).
    static func totals(in raw: URL) throws -> [Substring] {
        let output = try String(contentsOf: raw, encoding: .utf8)
        return drawnPieces(output).filter { $0.hasPrefix("All ") }.map { $0.split(separator: " ")[1] }
    }

    @Test("a list longer than the queue's window: the total line counts the whole list from the start")
    func totalOfALongList() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let raw = dir.url.appendingPathComponent("raw.txt")
            // The first file is held, so the first frames come while most of the list is not in the queue yet.
            let session = try await Session(command: longListCommand(server, dir: dir, count: 1_500), raw: raw)
            _ = try await session.waitForScreen("the total on the screen", within: .seconds(20)) { screen in
                screen.contains { $0.hasPrefix("All ") }
            }
            try await eventually("every request made") { server.stats.requestCount == 1_500 }
            server.openGate("g")
            let after = try await session.waitForScreen("haul exits", within: .seconds(30)) { screen in
                screen.contains { $0.hasPrefix("HAUL-EXIT=") }
            }
            await session.kill()
            #expect(after.contains("HAUL-EXIT=0"))
            let totals = try Self.totals(in: raw)
            #expect(!totals.isEmpty)
            #expect(totals.allSatisfy { $0.hasSuffix("/1500") }, "\(Set(totals).sorted().prefix(10))")
        }
    }

    @Test("bars render within the width, at most ~10 frames a second, and are cleared at the end")
    func barsRenderAndClear() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let raw = dir.url.appendingPathComponent("raw.txt")
            let session = try await Session(
                command: haulCommand(server, dir: dir, rate: 500_000, holdingLast: true), raw: raw)
            // The held last file keeps the run (and its bars) going until they have been seen, however slowly
            // this test gets to look.
            let during = try await session.waitForScreen("bars on the screen", within: .seconds(20)) { screen in
                screen.contains { Self.isBar($0) && !$0.hasPrefix("All ") } && screen.contains { $0.hasPrefix("All ") }
            }
            server.openGate("g")
            let after = try await session.waitForScreen("haul exits", within: .seconds(30)) { screen in
                screen.contains { $0.hasPrefix("HAUL-EXIT=") }
            }
            await session.kill()
            print("--- while running (\(Self.columns) columns):\n" + during.joined(separator: "\n"))
            print("--- at the end:\n" + after.joined(separator: "\n"))

            #expect(after.contains("HAUL-EXIT=0"))
            #expect(after.contains { $0.hasPrefix("Done: 4 downloaded of 4 files") })
            #expect(!after.contains(where: Self.isBar), "bars left on the screen")

            let output = try String(contentsOf: raw, encoding: .utf8)
            for piece in Self.drawnPieces(output) where piece.hasPrefix("All ") || piece.contains("[#") {
                #expect(Format.width(piece) < Self.columns, "wider than the terminal: '\(piece)'")
            }
            // Each frame starts by clearing to the end of the screen; about 1.2 s of transfer at 10 frames/s.
            let frames = output.components(separatedBy: "\u{1B}[J").count - 1
            let seconds = try #require(Self.elapsedSeconds(in: after.joined(separator: "\n")))
            #expect(frames >= 3, "no frames drawn")
            #expect(Double(frames) <= seconds * 10 + 6, "\(frames) frames in \(seconds) s")
            let hidden = try #require(output.range(of: "\u{1B}[?25l", options: .backwards))
            #expect(output[hidden.upperBound...].contains("\u{1B}[?25h"), "cursor left hidden")
            #expect(dir.contents().filter { !$0.hasPrefix(".") && $0 != "raw.txt" }.count == 4)
        }
    }

    @Test("Ctrl-C clears the bars, shows the cursor and exits 130")
    func controlCCleansUp() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let raw = dir.url.appendingPathComponent("raw.txt")
            let session = try await Session(
                command: haulCommand(server, dir: dir, rate: 100_000, stalling: true), raw: raw)
            _ = try await session.waitForScreen("bars on the screen", within: .seconds(20)) { screen in
                screen.contains { $0.contains("[#") }
            }
            try await session.press("C-c")
            let after = try await session.waitForScreen("haul exits", within: .seconds(30)) { screen in
                screen.contains { $0.hasPrefix("HAUL-EXIT=") }
            }
            await session.kill()
            print("--- after Ctrl-C:\n" + after.joined(separator: "\n"))
            #expect(after.contains("HAUL-EXIT=130"))
            #expect(!after.contains(where: Self.isBar), "bars left on the screen")
            #expect(after.contains { $0.hasPrefix("Interrupted:") })
            let output = try String(contentsOf: raw, encoding: .utf8)
            let hidden = try #require(output.range(of: "\u{1B}[?25l", options: .backwards))
            #expect(output[hidden.upperBound...].contains("\u{1B}[?25h"), "cursor left hidden")
            #expect(dir.contents().filter { !$0.hasPrefix(".") && $0 != "raw.txt" }.isEmpty)
        }
    }

    /// The `in 1.23 s` of the summary line.
    static func elapsedSeconds(in text: String) -> Double? {
        guard let range = text.range(of: #"in [0-9.]+ s"#, options: .regularExpression) else { return nil }
        return Double(text[range].dropFirst(3).dropLast(2))
    }
}

/// Terminal columns of `text` (the test's own copy of the display's rule: wide East Asian characters count 2).
enum Format {
    static func width(_ text: String) -> Int {
        text.unicodeScalars.reduce(0) { total, scalar in
            let wide =
                (0x1100...0x115F).contains(scalar.value) || (0x2E80...0xA4CF).contains(scalar.value)
                || (0xAC00...0xD7A3).contains(scalar.value) || (0xF900...0xFAFF).contains(scalar.value)
                || (0xFF00...0xFF60).contains(scalar.value) || (0x1F300...0x1FAFF).contains(scalar.value)
            return total + (wide ? 2 : 1)
        }
    }
}
