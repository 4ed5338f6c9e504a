import Foundation
import Haul
import HaulSQLite
import HaulTestServer
import HaulTestSupport
import Testing

/// A killed `haul get` loses nothing: SIGKILL at 20 random moments of a throttled batch, then rerun until it exits 0.
/// The moments are random on purpose (they land in transfers, renames and journal writes alike); what is checked
/// holds whenever they land.
@Suite("haul get killed", .timeLimit(.minutes(3)))
struct CrashTests {
    @Test(
        "SIGKILL at 20 random moments, then reruns: every file identical, resumed not restarted, journal truthful",
        arguments: ["http", "https"])
    func killedRunsResume(scheme: String) async throws {
        let overTLS = scheme == "https"
        try await TestServer.withRunning(overTLS ? TestTLS.server() : .init()) { server in
            let dir = try TemporaryDirectory()
            // Per kill, what was in flight is lost (sent, not yet on disk): tens of KB per connection on a loaded
            // machine. Large enough a batch that 20 kills' worth of it stays well inside the 1.25x allowed.
            let sizes = [
                40_000, 90_000, 150_000, 300_000, 450_000, 600_000, 800_000, 1_000_000, 1_200_000, 1_500_000, 2_000_000,
                2_500_000, 3_000_000,
            ]
            let names = sizes.indices.map { "file\($0).bin" }
            let list = zip(names, sizes).map { name, size in
                server.url(path: "/bytes/\(name)", query: ["size": "\(size)", "rate": "400000"]).absoluteString
            }.joined(separator: "\n")
            let input = dir.url.appendingPathComponent("urls.txt")
            try Data(list.utf8).write(to: input)
            let target = dir.url.appendingPathComponent("out")
            let arguments =
                ["get", "-q", "-j", "4", "-d", target.path, "-i", input.path]
                + (overTLS ? ["--cacert", TestTLS.caFile] : [])

            var generator = SystemRandomNumberGenerator()
            var killed = 0
            for _ in 0..<20 {
                let start = server.stats.bodyBytesSent
                let process = try HaulProcess(arguments)
                // The kill follows what this run has been served (a random amount), not the clock, so that it lands
                // mid-run however slowly a loaded machine starts the process; then a random few milliseconds more,
                // so that it lands anywhere: in transfers, in publishing, in journal writes. Watched from a thread
                // of its own: a task's sleep can be held up for seconds while other tests keep the pool busy.
                let threshold = Int.random(in: 1...700_000, using: &generator)
                let extra = UInt32.random(in: 0...20_000, using: &generator)
                try await onOwnThread {
                    while server.stats.bodyBytesSent - start < threshold, !process.hasExited { usleep(1_000) }
                    usleep(extra)
                    process.send(SIGKILL)
                }
                let run = await process.finish()
                if run.status != 0 { killed += 1 }  // it may have finished before the kill came
                // Whatever the moment, a destination holds either nothing or the whole, right file.
                for (name, size) in zip(names, sizes) {
                    if let bytes = contentsOf(target.appendingPathComponent(name)) {
                        #expect(bytes == TestServer.expectedBytes(name: name, size: size), "\(name) wrong after a kill")
                    }
                }
            }
            var final = try await HaulProcess.run(arguments)
            for _ in 0..<3 where final.status != 0 { final = try await HaulProcess.run(arguments) }
            #expect(final.status == 0, "\(final)")
            #expect(killed >= 10, "only \(killed) of 20 runs were killed mid-way")

            for (name, size) in zip(names, sizes) {
                #expect(
                    contentsOf(target.appendingPathComponent(name)) == TestServer.expectedBytes(name: name, size: size),
                    "\(name)")
            }
            let visible = (try? FileManager.default.contentsOfDirectory(atPath: target.path)) ?? []
            #expect(visible.filter { !$0.hasPrefix(".") }.sorted() == names.sorted())
            #expect(!visible.contains { $0.hasSuffix(".haul-partial") }, "partials left: \(visible)")

            let total = sizes.reduce(0, +)
            let served = server.stats.bodyBytesSent
            #expect(
                Double(served) <= 1.25 * Double(total), "served \(served) bytes for \(total): restarted, not resumed")

            // No journal entry says "done" for a file that is missing or different.
            let journal = try SQLiteJournal(path: target.appendingPathComponent(".haul/journal.sqlite").path)
            for record in journal.allRecords() {
                guard case .completed(let size, let sha256, let stamp, _) = record.state else { continue }
                let bytes = try #require(contentsOf(URL(fileURLWithPath: record.path)), "\(record.path) missing")
                #expect(Int64(bytes.count) == size)
                #expect(FileStamp(ofFileAt: record.path) == stamp, "\(record.path): the record is not of this file")
                if let sha256 { #expect(sha256Hex(bytes) == sha256) }
            }
            print(
                "killed \(killed) of 20 runs; served \(served) bytes for \(total) (\(Double(served) / Double(total))x)")
        }
    }
}

/// A disk that fills up mid-batch: a clear error, no corrupt file at a destination, and once there is room a rerun
/// finishes without fetching the completed files again.
@Suite("haul get on a full disk", .timeLimit(.minutes(1)))
struct FullDiskTests {
    @Test(
        "a full tmpfs fails the downloads that do not fit; after growing it a rerun finishes the job",
        .enabled(if: getuid() == 0, "needs root to mount a small tmpfs"))
    func fullDiskThenRerun() async throws {
        let mountPoint = try TemporaryDirectory()
        try await mount(["-t", "tmpfs", "-o", "size=1m", "tmpfs", mountPoint.path])
        // Unmounted whatever happens in between (a test that throws still leaves no mount behind).
        let outcome: Result<Void, any Error>
        do {
            try await fill(mountPoint)
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        _ = try? await ChildProcess("/bin/umount", ["-l", mountPoint.path]).finish()
        try outcome.get()
    }

    private func fill(_ mountPoint: TemporaryDirectory) async throws {
        try await TestServer.withRunning { server in
            let names = ["a.bin", "b.bin", "c.bin", "d.bin"]
            let urls = names.map { server.url(path: "/bytes/\($0)", query: ["size": "400000"]).absoluteString }
            let arguments = ["get", "-j", "1", "-d", mountPoint.path] + urls
            let full = try await HaulProcess.run(arguments)
            #expect(full.status == 1, "\(full)")
            #expect(full.stderr.contains("No space left on device"), "\(full)")
            var completed = 0
            for name in names {
                guard let bytes = contentsOf(mountPoint.file(name)) else { continue }
                #expect(bytes == TestServer.expectedBytes(name: name, size: 400_000), "\(name) is corrupt")
                completed += 1
            }
            #expect(completed >= 1 && completed < names.count)
            let requestsBefore = server.stats.requestCount

            try await mount(["-o", "remount,size=8m", mountPoint.path])
            let rerun = try await HaulProcess.run(arguments)
            #expect(rerun.status == 0, "\(rerun)")
            for name in names {
                #expect(
                    { contentsOf(mountPoint.file(name)) == TestServer.expectedBytes(name: name, size: 400_000) }(),
                    "not the server's bytes")
            }
            // Only what had not completed was fetched again.
            #expect(server.stats.requestCount - requestsBefore == names.count - completed)
            #expect(rerun.stdout.contains("\(completed) already complete"))
        }
    }

    private func mount(_ arguments: [String], command: String = "/bin/mount") async throws {
        let (status, stdout, stderr) = try await ChildProcess(command, arguments).finish()
        try #require(status == 0, "\(command) \(arguments.joined(separator: " ")) failed: \(stdout)\(stderr)")
    }
}

/// A destination the user may not write: a clear error naming it, nothing half-written, the journal truthful, and
/// a rerun once it is writable fetches only what failed.
@Suite("haul get without permission to write", .timeLimit(.minutes(1)))
struct PermissionTests {
    @Test(
        "an unwritable directory fails its downloads with the path and the reason; the rest complete; a rerun finishes",
        .enabled(if: getuid() == 0, "needs root to run haul as another user (root may write anywhere)"))
    func unwritableDirectoryThenRerun() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let locked = dir.file("locked")
            try FileManager.default.createDirectory(at: locked, withIntermediateDirectories: false)
            try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: dir.path)
            try FileManager.default.setAttributes([.posixPermissions: 0o555], ofItemAtPath: locked.path)
            let url = { (name: String) in server.url(path: "/bytes/\(name)", query: ["size": "300000"]).absoluteString }
            let list = dir.file("list.txt")
            try "\(url("a.bin"))\n\(url("b.bin"))\n\(url("c.bin"))\n  dir=locked\n".write(
                to: list, atomically: true, encoding: .utf8)
            try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: list.path)
            // As "nobody": root could write into the locked directory anyway.
            let command = [
                "--reuid=65534", "--regid=65534", "--clear-groups", try HaulProcess.binary().path,
                "get", "-j", "2", "-d", dir.path, "-i", list.path,
            ]
            let first = try await ChildProcess("/usr/bin/setpriv", command, environment: ["TERM": "dumb"]).finish()
            #expect(first.status == 1, "\(first)")
            #expect(first.stderr.contains("Permission denied") && first.stderr.contains(locked.path), "\(first)")
            for name in ["a.bin", "b.bin"] {
                let intact = contentsOf(dir.file(name)) == TestServer.expectedBytes(name: name, size: 300_000)
                #expect(intact, "\(name)")
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: locked.path).isEmpty)
            #expect(!dir.contents().contains { $0.hasSuffix(".haul-partial") })
            let requestsBefore = server.stats.requestCount

            try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: locked.path)
            let rerun = try await ChildProcess("/usr/bin/setpriv", command, environment: ["TERM": "dumb"]).finish()
            #expect(rerun.status == 0, "\(rerun)")
            let intact =
                contentsOf(locked.appendingPathComponent("c.bin"))
                == TestServer.expectedBytes(name: "c.bin", size: 300_000)
            #expect(intact)
            #expect(server.stats.requestCount - requestsBefore == 1)  // only c.bin; a and b were complete
            #expect(rerun.stdout.contains("2 already complete"), "\(rerun)")
        }
    }
}
