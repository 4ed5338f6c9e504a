import Foundation
import GRDB
import Haul
import HaulDaemon
import HaulTestServer
import HaulTestSupport
import Testing

/// What a restart brings back, a third look: history a purge did not cover, global options changed to what cannot be
/// stored, and a mirror added with credentials.
@Suite("Daemon durability, a third look", .timeLimit(.minutes(2)))
struct DaemonDurabilityThirdReviewTests {
    /// A daemon on `root` with its store there, one download at a time, paused if asked (nothing starts).
    private func start(_ root: TemporaryDirectory, paused: Bool = false) throws -> (Daemon, DownloadQueue) {
        let started = try startStoredDaemon(root, paused: paused)
        return (started.daemon, started.queue)
    }

    /// The GIDs of every stopped download `daemon` lists.
    private func stoppedGIDs(_ daemon: Daemon) throws -> Set<String> {
        Set(listedGIDs(try daemon.call("aria2.tellStopped", [0, 100_000, ["gid"]])))
    }

    /// A purge removes the results there are when it is called. A download that ends while it runs (after the
    /// purge cleared the history in memory, before it cleared the store) stays in the history shown, and must stay in
    /// the store too: a kill then would lose both the download and its result.
    @Test("a download that ends while purgeDownloadResult runs is in the store, as it is in the history shown")
    func endDuringPurgeKept() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let (daemon, queue, store) = try startStoredDaemon(root, width: 16)
            let purging = Locked(true)
            let lost = Locked<Set<String>>([])
            let purger = ResultBox<Void>()
            Thread.detachNewThread {
                while purging.withLock({ $0 }) {
                    _ = try? daemon.call("aria2.purgeDownloadResult", [])
                    // Every result shown now ended before this read, its row on its way to the store: written by
                    // the flush, unless the purge took it.
                    guard let shown = try? self.stoppedGIDs(daemon) else { continue }
                    store.flush()
                    guard let stored = try? Self.storedStopped(in: root) else { continue }
                    let missing = shown.subtracting(stored)
                    lost.withLock { $0.formUnion(missing) }
                }
                purger.resolve(())
            }
            // Small files ending one after another while purges run without a pause.
            for index in 0..<1500 {
                let url = server.url(path: "/bytes/p\(index)", query: ["size": "10"])
                _ = try daemon.call("aria2.addUri", [[.string(url.absoluteString)]])
            }
            await queue.waitUntilIdle()
            await queue.eventsSent()
            purging.withLock { $0 = false }
            await purger.wait()
            #expect(lost.withLock { $0 }.isEmpty, "shown as stopped, gone from the store: \(lost.withLock { $0 })")
            daemon.close()
        }
    }

    /// The GIDs of the stopped downloads in the store, read with a connection of its own.
    private static func storedStopped(in root: TemporaryDirectory) throws -> Set<String> {
        var configuration = Configuration()
        configuration.readonly = true
        let database = try DatabaseQueue(path: root.file(".haul/daemon.sqlite").path, configuration: configuration)
        return try database.read { db in
            Set(try String.fetchAll(db, sql: "SELECT gid FROM downloads WHERE stopped_order IS NOT NULL"))
        }
    }

    /// `changeGlobalOption` replaces a global option; when its new value holds only what is never stored (a header
    /// that is all secrets), the value stored before must not come back with the next start in its place.
    @Test("a global header replaced by one of secrets only does not come back as it was before the change")
    func replacedGlobalHeaderNotRestored() throws {
        let root = try TemporaryDirectory()
        let (first, _) = try start(root, paused: true)
        #expect(try first.call("aria2.changeGlobalOption", [["header": ["X-Tenant: old"]]]) == "OK")
        #expect(try first.call("aria2.changeGlobalOption", [["header": ["Authorization: Bearer t-9"]]]) == "OK")
        // In force now: the new header only (its secret not shown).
        #expect(try first.call("aria2.getGlobalOption", []).object?["header"] != ["X-Tenant: old"])
        first.close()

        let (second, _) = try start(root, paused: true)
        // The secret is not kept, and the header it replaced is not in force again.
        let after = try second.call("aria2.getGlobalOption", []).object?["header"]
        #expect(after == nil, "header in force after a restart: \(String(describing: after))")
        second.close()
    }

    /// A mirror added with `changeUri` with a user and password in it is stored without them, as an added URI is: a
    /// restart cannot go on with it as it was added, and says so, as for a download added with credentials.
    @Test("a mirror with credentials added by changeUri is not used without them after a restart")
    func mirrorCredentialsWithheld() throws {
        let root = try TemporaryDirectory()
        let (first, _) = try start(root, paused: true)
        let gid = try #require(try first.call("aria2.addUri", [["http://127.0.0.1:9/f.bin"]]).string)
        #expect(try first.call("aria2.changeUri", [.string(gid), 1, [], ["http://u:pw@127.0.0.1:9/f.bin"]]) == [0, 1])
        first.close()

        let (second, _) = try start(root, paused: true)
        let status = try second.call("aria2.tellStatus", [.string(gid), ["status", "errorMessage"]])
        #expect(status.object?["status"] == "error", "\(status)")
        #expect(status.object?["errorMessage"]?.string?.contains("credentials were not kept") == true, "\(status)")
        second.close()
    }
}
