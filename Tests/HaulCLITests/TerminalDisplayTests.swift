import Foundation
import HaulTestServer

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import HaulTestSupport
import Testing

/// `haul get` in a real pseudo-terminal (tmux, with `script` recording the raw bytes): bars render, stay within
/// the width, redraw at most about 10 times a second, and are cleared at the end and on Ctrl-C.
@Suite("Terminal display", .timeLimit(.minutes(2)))
struct TerminalDisplayTests {
    static let columns = 60

    /// A tmux session on a socket of its own, running one shell command in a `columns` x 15 window.
    final class Session: Sendable {
        let socket = "haul-test-\(UUID().uuidString.prefix(8))"
        let raw: URL

        init(command: String, raw: URL) throws {
            self.raw = raw
            // `script` gives haul a terminal of the pane's size and records every byte it writes.
            let recorded = "script -qefc \(Self.quote(command)) \(Self.quote(raw.path))"
            try Self.tmux(
                socket,
                [
                    "new-session", "-d", "-x", "\(TerminalDisplayTests.columns)", "-y", "15",
                    "\(recorded); echo HAUL-EXIT=$?",
                    ";", "set-option", "remain-on-exit", "on",
                ])
        }

        /// The pane stays (remain-on-exit) until the session is killed here.
        deinit { _ = try? Self.tmux(socket, ["kill-server"]) }

        /// The screen as shown now (wrapped lines joined).
        func screen() throws -> [String] {
            try Self.tmux(socket, ["capture-pane", "-p", "-J"]).components(separatedBy: "\n")
        }

        func press(_ key: String) throws { try Self.tmux(socket, ["send-keys", key]) }

        /// Runs tmux with posix_spawn and waitpid, output through a file: Foundation's `Process` did not notice
        /// `tmux new-session` exiting (its client stayed a zombie) and hung the test.
        @discardableResult
        static func tmux(_ socket: String, _ arguments: [String]) throws -> String {
            let outputPath = FileManager.default.temporaryDirectory
                .appendingPathComponent("haul-tmux-\(UUID().uuidString)").path
            defer { unlink(outputPath) }
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            // Only these three may reach the tmux server, which outlives the call: an inherited copy of another
            // test's socket kept it open, so that test's client never saw the server close it (and hung).
            // (glibc here has no posix_spawn_file_actions_addclosefrom_np; a descriptor closed meanwhile is fine,
            // glibc ignores EBADF from a close action.)
            let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
            for descriptor in open.compactMap({ Int32($0) }) where descriptor > 2 {
                posix_spawn_file_actions_addclose(&actions, descriptor)
            }
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            posix_spawn_file_actions_adddup2(&actions, 1, 2)
            let argv = ["tmux", "-L", socket] + arguments
            var environment = ProcessInfo.processInfo.environment
            environment["TERM"] = "xterm-256color"
            environment.removeValue(forKey: "TMUX")
            let envp = environment.map { "\($0.key)=\($0.value)" }
            var pid: pid_t = 0
            let spawned = withCStrings(argv) { argvPointers in
                withCStrings(envp) { envPointers in
                    posix_spawnp(&pid, "tmux", &actions, nil, argvPointers, envPointers)
                }
            }
            guard spawned == 0 else {
                throw TmuxError(message: "cannot start tmux: \(String(cString: strerror(spawned)))")
            }
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0, errno == EINTR {}
            let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
            // WIFEXITED && WEXITSTATUS == 0
            guard status & 0x7f == 0, (status >> 8) & 0xff == 0 else {
                throw TmuxError(message: "tmux \(arguments.joined(separator: " ")): \(text)")
            }
            return text
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

    func haulCommand(_ server: TestServer, dir: TemporaryDirectory, rate: Int) throws -> String {
        let binary = try HaulProcess.binary().path
        let urls = ["first-file.iso", "a-much-longer-file-name-that-will-not-fit.tar.gz", "small.txt", "last.bin"]
            .map { server.url(path: "/bytes/\($0)", query: ["size": "600000", "rate": "\(rate)"]).absoluteString }
        return ([binary, "get", "-j", "2", "-d", dir.path] + urls).map(Session.quote).joined(separator: " ")
    }

    @Test("bars render within the width, at most ~10 frames a second, and are cleared at the end")
    func barsRenderAndClear() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let raw = dir.url.appendingPathComponent("raw.txt")
            let session = try Session(command: haulCommand(server, dir: dir, rate: 500_000), raw: raw)
            var during: [String] = []
            try await eventually("bars on the screen", within: .seconds(20)) {
                during = (try? session.screen()) ?? []
                return during.contains { $0.contains("[#") } && during.contains { $0.hasPrefix("All ") }
            }
            var after: [String] = []
            try await eventually("haul exits", within: .seconds(30)) {
                after = (try? session.screen()) ?? []
                return after.contains { $0.hasPrefix("HAUL-EXIT=") }
            }
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
            let session = try Session(command: haulCommand(server, dir: dir, rate: 100_000), raw: raw)
            try await eventually("bars on the screen", within: .seconds(20)) {
                ((try? session.screen()) ?? []).contains { $0.contains("[#") }
            }
            try session.press("C-c")
            var after: [String] = []
            try await eventually("haul exits", within: .seconds(30)) {
                after = (try? session.screen()) ?? []
                return after.contains { $0.hasPrefix("HAUL-EXIT=") }
            }
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

/// Calls `body` with `strings` as a NULL-terminated array of C strings.
private func withCStrings<Result>(
    _ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> Result
) -> Result {
    let pointers = strings.map { strdup($0) } + [nil]
    defer { pointers.forEach { free($0) } }
    return pointers.withUnsafeBufferPointer { buffer in
        // Never empty: it ends with the NULL terminator.
        guard let base = buffer.baseAddress else { preconditionFailure("an array with a terminator has storage") }
        return body(base)
    }
}
