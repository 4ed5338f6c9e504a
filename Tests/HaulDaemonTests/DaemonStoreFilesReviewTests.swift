import Foundation
import GRDB
import HaulDaemon
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Hostile review of the daemon's store as a file: one damaged or edited by hand is refused with a message naming
/// it, never a crash.
@Suite("Daemon store files, hostile", .timeLimit(.minutes(1)))
struct DaemonStoreFilesReviewTests {
    /// Promise: bad input gets a clear error naming what is wrong; no crash. SQLite keeps a value of any type in a
    /// column (`rank` is INTEGER, and holds the text given): a restart reading such a row must say so.
    @Test(
        "haul daemon on a store whose row holds a value of the wrong type exits naming the store, no crash",
        arguments: ["rank", "stopped_order"])
    func wrongTypeInStoredRow(column: String) async throws {
        let root = try TemporaryDirectory()
        let (daemon, _, _) = try startStoredDaemon(root, paused: true)
        _ = try daemon.call("aria2.addUri", [["http://127.0.0.1:9/f.bin"]])
        daemon.close()
        let storePath = root.file(".haul/daemon.sqlite").path
        let database = try DatabaseQueue(path: storePath)
        try await database.write { db in try db.execute(sql: "UPDATE downloads SET \(column) = 'x'") }
        try database.close()

        let haul = try #require(builtProduct(named: "haul"), "haul is not built")
        let child = try ChildProcess(
            haul.path, ["daemon", "-d", root.path, "--rpc-listen", "127.0.0.1:0", "--rpc-no-secret"])
        // A daemon that started anyway is stopped after a while (its status then tells).
        _ = await child.exits(within: .seconds(20))
        let (status, _, stderr) = await child.finish()
        #expect(status != 0 && status < 128, "exit \(status): \(stderr.suffix(600))")
        #expect(stderr.contains(storePath) && stderr.contains(column), "\(stderr.suffix(600))")
        #expect(!stderr.contains("Fatal error"), "\(stderr.suffix(600))")
    }
}
