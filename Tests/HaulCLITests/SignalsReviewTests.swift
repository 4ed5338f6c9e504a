import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Signals at the stages a review found unguarded: a stop while a client is still adding downloads, and a hangup a
/// user asked to be ignored (`nohup`).
@Suite("signals: review hazards", .timeLimit(.minutes(3)))
struct SignalsReviewTests {
    /// Whether `pid` ignores `signal` now (its `SigIgn` mask in `/proc`).
    func ignores(_ pid: pid_t, _ signal: Int32) throws -> Bool {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("SigIgn:") })
        let mask = try #require(UInt64(line.dropFirst("SigIgn:".count).trimmingCharacters(in: .whitespaces), radix: 16))
        return mask & (1 << UInt64(signal - 1)) != 0
    }

    @Test("SIGTERM while multicalls still add paused downloads: the daemon stops, and keeps each one it answered")
    func sigtermDuringMulticall() async throws {
        let dir = try TemporaryDirectory()
        let daemon = try await DaemonCommandTests.start(dir)
        let secret = try #require(daemon.secret)
        // Three clients at once, each with a multicall of as many calls as one may hold: groups of downloads keep
        // landing in the queue all through the stop's cancelling.
        let (clients, count) = (3, 10_000)
        let adding = (0..<clients).map { client in
            // The GIDs answered and the messages of the calls refused, when the answer came.
            Task { () -> (added: [String], refused: [String])? in
                let calls: [[String: Any]] = (0..<count).map { index in
                    [
                        "methodName": "aria2.addUri",
                        "params": ["token:\(secret)", ["http://127.0.0.1:9/\(client)/f\(index)"], ["pause": "true"]],
                    ]
                }
                let answer = try? await daemon.call("system.multicall", [calls])
                guard let answers = answer?["result"] as? [Any] else { return nil }
                return (
                    answers.compactMap { ($0 as? [Any])?.first as? String },
                    answers.compactMap { ($0 as? [String: Any])?["message"] as? String }
                )
            }
        }
        // Thousands are in the queue (the stop has that many to cancel), and more are being added.
        try await eventuallyAsync("the first downloads are added", within: .seconds(60)) {
            let stat = try? await daemon.result("aria2.getGlobalStat") as? [String: Any]
            return Int(stat?["numWaiting"] as? String ?? "") ?? 0 >= 2_000
        }
        daemon.process.send(SIGTERM)
        let stopped = await daemon.process.exits(within: .seconds(30))
        let output = await daemon.process.finish()
        #expect(stopped, "haul daemon did not stop within 30 s of SIGTERM\n\(output.stderr.suffix(2000))")
        #expect(!stopped || output.status == 0, "\(output)")
        var answers: [(added: [String], refused: [String])?] = []
        for task in adding { answers.append(await task.value) }

        // What a client was told was added is there after a restart, paused; the calls refused say why.
        let restarted = try await DaemonCommandTests.start(dir)
        defer { restarted.process.send(SIGKILL) }
        let stat = try #require(try await restarted.result("aria2.getGlobalStat") as? [String: Any])
        let kept = Int(stat["numWaiting"] as? String ?? "") ?? -1
        #expect(kept >= 2_000 && kept < clients * count, "\(stat)")
        for case let (added, refused)? in answers {
            #expect(added.count + refused.count == count)
            #expect(refused.allSatisfy { $0 == "haul daemon is shutting down" }, "\(Set(refused))")
            for gid in [added.first, added.last].compactMap(\.self) {
                let status = try await restarted.result("aria2.tellStatus", [gid, ["status"]]) as? [String: Any]
                #expect(status?["status"] as? String == "paused", "\(gid): \(status ?? [:])")
            }
        }
        if answers.allSatisfy({ $0 != nil }) {
            let added = answers.compactMap(\.self).map(\.added.count).reduce(0, +)
            #expect(kept == added, "answered \(added) GIDs, \(kept) are back")
        }
        restarted.process.send(SIGTERM)
        #expect(await restarted.process.finish().status == 0)
    }

    @Test("nohup haul get: SIGHUP stays ignored and the download finishes; without nohup it still stops the run")
    func nohupGet() async throws {
        try await TestServer.withRunning { server in
            for underNohup in [true, false] {
                let dir = try TemporaryDirectory()
                let gate = "hup-\(underNohup)"
                let url = bytes(server, "held.bin", size: 1000, ["hold": gate])
                let process = try HaulProcess(["get", "-d", dir.path, url], under: underNohup ? "nohup" : nil)
                defer { process.send(SIGKILL) }
                try await eventually("the download is held at the server", within: .seconds(30)) {
                    server.heldCount(at: gate) == 1
                }
                #expect(try ignores(process.pid, SIGHUP) == underNohup)
                process.send(SIGHUP)
                if underNohup { server.openGate(gate) }
                let run = await process.finish()
                if !underNohup { server.openGate(gate) }
                #expect(run.status == (underNohup ? 0 : 130), "\(run)")
                #expect(FileManager.default.fileExists(atPath: dir.file("held.bin").path) == underNohup)
            }
        }
    }

    @Test("nohup haul daemon: SIGHUP stays ignored, SIGTERM stops it")
    func nohupDaemon() async throws {
        let dir = try TemporaryDirectory()
        let process = try HaulProcess(
            ["daemon", "-d", dir.path, "--rpc-listen", "127.0.0.1:0", "-j", "1"], under: "nohup")
        defer { process.send(SIGKILL) }
        let port = try #require(try await process.daemonRPCPort(), "\(process.stderrSoFar)")
        let secret = try String(contentsOf: dir.file(".haul/rpc-secret"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let daemon = DaemonCommandTests.Running(process: process, port: port, secret: secret)
        #expect(try ignores(process.pid, SIGHUP))
        process.send(SIGHUP)
        #expect(try await daemon.result("aria2.getVersion") is [String: Any])
        process.send(SIGTERM)
        let output = await process.finish()
        #expect(output.status == 0, "\(output)")
    }
}
