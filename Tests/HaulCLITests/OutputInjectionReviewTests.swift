import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

/// A hostile review of what `haul get` prints that a server or someone else's URL list controls: terminal escapes,
/// C1 controls and bidirectional overrides must not reach the terminal, a log or a file name raw.
@Suite("haul get: output injection review", .timeLimit(.minutes(3)))
struct OutputInjectionReviewTests {
    /// A status line that is not HTTP, holding what, printed raw, writes the clipboard (OSC 52), clears the screen
    /// (ESC [ and the C1 CSI) and returns the cursor to the start of the line to overwrite it.
    static let hostileStatusLine = "HTTP/1.1 5x3 \u{1B}]52;c;aGFjaw==\u{07}\u{1B}[2J\u{9B}2J\rdone   evil.bin"

    @Test("-v: a dropped source's reason (a server's status line) reaches stderr without its escape sequences")
    func verboseLogEscapesDropReason() async throws {
        let dir = try TemporaryDirectory()
        let response = Array("\(Self.hostileStatusLine)\r\nContent-Length: 0\r\n\r\n".utf8)
        try await TestServer.withRunning { server in
            try await RawServer.withRunning(responses: [response]) { port in
                // The hostile server first, a good mirror of the same file after it (tab-separated).
                let list = dir.path + "/urls.txt"
                let text = "http://127.0.0.1:\(port)/file.bin\t\(bytes(server, "file.bin", size: 10))\n"
                try Data(text.utf8).write(to: URL(fileURLWithPath: list))
                let run = try await HaulProcess.run(["get", "-v", "-d", dir.path + "/D", "-i", list])
                #expect(run.status == 0, "\(run)")
                #expect(run.stderr.contains("source dropped"), "\(run)")
                let controls = run.stderr.unicodeScalars.filter {
                    $0.value < 0x20 && $0 != "\n" || (0x7F...0x9F).contains($0.value)
                }
                #expect(
                    controls.isEmpty,
                    "stderr carries \(controls.count) raw control characters: \(run.stderr.debugDescription)")
            }
        }
    }

    @Test("--json: a C1 control (CSI, U+009B) in a server's reason phrase is escaped, as the JSON logs escape it")
    func jsonEscapesC1Controls() async throws {
        let dir = try TemporaryDirectory()
        let response = Array("HTTP/1.1 404 Gone \u{9B}2J\u{9D}52;c;aGFjaw==\u{9C}\r\nContent-Length: 0\r\n\r\n".utf8)
        try await RawServer.withRunning(responses: [response]) { port in
            let run = try await HaulProcess.run(["get", "--json", "-d", dir.path, "http://127.0.0.1:\(port)/f.bin"])
            #expect(run.status == 1, "\(run)")
            let fail = try #require(
                run.stdout.split(separator: "\n").first { $0.contains("\"event\":\"fail\"") }, "\(run)")
            let object = try #require(try JSONSerialization.jsonObject(with: Data(fail.utf8)) as? [String: Any])
            // The message itself keeps what the server sent, for scripts...
            #expect((object["error"] as? String)?.contains("\u{9B}2J") == true, "\(fail)")
            // ...but escaped in the line, so a terminal showing it sees no CSI / OSC / ST.
            let c1 = run.stdout.unicodeScalars.filter { (0x80...0x9F).contains($0.value) }
            #expect(c1.isEmpty, "stdout carries \(c1.count) raw C1 controls: \(run.stdout.debugDescription)")
        }
    }

    @Test("an out= name in someone else's URL list cannot put control or bidi characters in a file's name")
    func outNameFromListIsSafe() async throws {
        let dir = try TemporaryDirectory()
        try await TestServer.withRunning { server in
            // `‮fdp.exe` lists as `exe.pdf`; the other rings the bell, writes the clipboard and overwrites the line
            // whenever a tool prints the name raw.
            for (index, name) in ["invoice\u{202E}fdp.exe", "a\u{1B}]52;c;aGFjaw==\u{7}b\r.txt"].enumerated() {
                let list = dir.path + "/urls\(index).txt"
                try Data("\(bytes(server, "f\(index)", size: 10))\n  out=\(name)\n".utf8)
                    .write(to: URL(fileURLWithPath: list))
                let run = try await HaulProcess.run(["get", "-d", dir.path + "/D", "-i", list])
                let names = (try? FileManager.default.contentsOfDirectory(atPath: dir.path + "/D")) ?? []
                for written in names where written != ".haul" {
                    let bad = written.unicodeScalars.filter {
                        $0.value < 0x20 || (0x7F...0x9F).contains($0.value) || (0x202A...0x202E).contains($0.value)
                    }
                    #expect(bad.isEmpty, "written as \(written.debugDescription): \(run)")
                }
            }
        }
    }
}
