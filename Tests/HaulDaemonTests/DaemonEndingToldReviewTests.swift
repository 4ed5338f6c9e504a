import Foundation
import Haul
import HaulTestServer
import HaulTestSupport
import Testing

@testable import HaulDaemon

/// How a download ended is stored before a client is notified of it: a SIGKILL right after never brings it back
/// unfinished (downloaded again, over a file the client moved or changed).
@Suite("haul daemon: an ending notified is stored")
struct DaemonEndingToldReviewTests {
    @Test("onDownloadComplete is sent once the store holds the download complete")
    func endingStoredBeforeTold() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let (daemon, queue, _) = try startStoredDaemon(root)
            // A second connection, as a restart after a SIGKILL reads the file.
            let reader = try DaemonStore(path: root.file(".haul/daemon.sqlite").path)
            let storedWhenNotified = Locked<[Bool]>([])
            daemon.onNotification { method, gid in
                guard method == "aria2.onDownloadComplete" else { return }
                let unfinished = (try? reader.loadUnfinished().map(\.gid.description)) ?? [gid]
                storedWhenNotified.withLock { $0.append(!unfinished.contains(gid)) }
            }
            let url = server.url(path: "/bytes/told.bin", query: ["size": "1000"]).absoluteString
            let gid = try #require(try daemon.call("aria2.addUri", [[.string(url)]]).string)
            try await eventually("told complete") {
                (try? daemon.call("aria2.tellStatus", [.string(gid), ["status"]]))?.object?["status"]?.string
                    == "complete"
            }
            try await eventually("notified") { !storedWhenNotified.withLock { $0 }.isEmpty }
            #expect(storedWhenNotified.withLock { $0 } == [true], "notified complete before it was stored")
            queue.cancelAll()
            await queue.waitUntilIdle()
            daemon.close()
        }
    }
}
