import Foundation
import Haul
import HaulNIO
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Logging
import Testing

@testable import HaulDaemon

/// The queue sends a download's events as they happen, on the download's thread: a start and an end may come before
/// the daemon has given the download its GID. They are then announced when it does, as they would have been.
@Suite("haul daemon: a start and an end before the GID is known")
struct DaemonEarlyEventTests {
    /// Keeps every log line's message and `gid` metadata.
    struct Capture: LogHandler {
        let lines: Locked<[(message: String, gid: String)]>
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .info

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let gid = event.metadata?["gid"].map { "\($0)" } ?? ""
            lines.withLock { $0.append(("\(event.message)", gid)) }
        }
    }

    /// A daemon over a queue of one download at a time, with no store, its log lines and notifications kept.
    static func daemon(
        in root: TemporaryDirectory
    ) throws -> (Daemon, DownloadQueue, Locked<[(message: String, gid: String)]>, Locked<[String]>) {
        let lines = Locked<[(message: String, gid: String)]>([])
        let queue = daemonTestQueue(width: 1, retries: 0)
        var configuration = Daemon.Configuration(root: root.url)
        configuration.logger = Logger(label: "haul.daemon") { _ in Capture(lines: lines) }
        let daemon = try Daemon(queue: queue, configuration: configuration)
        let notifications = Locked<[String]>([])
        daemon.onNotification { method, gid in notifications.withLock { $0.append("\(method) \(gid)") } }
        return (daemon, queue, lines, notifications)
    }

    @Test("a download that started and failed before it was attached to its GID is logged and announced then")
    func endedBeforeAttached() async throws {
        let root = try TemporaryDirectory()
        let (daemon, queue, lines, notifications) = try Self.daemon(in: root)

        // Added to the queue behind the daemon's back: its events find no GID, as when they outrun an add.
        let request = DownloadRequest(
            url: try #require(URL(string: "http://127.0.0.1:9/refused")), destination: .directory(root.url))
        let handle = queue.add(request)
        _ = try? await handle.result
        await queue.waitUntilIdle()
        #expect(lines.withLock { $0.isEmpty } && notifications.withLock { $0.isEmpty })

        let gid = GID.random()
        daemon.state.withLock {
            $0.keep(Daemon.Item(gid: gid, uris: [request.url.absoluteString], options: [:], request: request))
        }
        daemon.attach(handle, to: gid)
        #expect(lines.withLock { $0.map(\.gid) } == [gid.description, gid.description])
        #expect(lines.withLock { $0.first?.message } == "started")
        #expect(lines.withLock { $0.last?.message.hasPrefix("error") } == true)
        #expect(
            notifications.withLock { $0 } == ["aria2.onDownloadStart \(gid)", "aria2.onDownloadError \(gid)"])
        #expect(try daemon.call("aria2.tellStatus", [.string(gid.description), ["status"]]) == ["status": "error"])
    }

    @Test("a download that started before it was attached is announced then, and is a change subscribers hear of")
    func startedBeforeAttached() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let (daemon, queue, lines, notifications) = try Self.daemon(in: root)

            // Held by the server once started: its start is noted with no GID to give it.
            let request = DownloadRequest(
                url: server.url(path: "/bytes/held", query: ["size": "1000", "hold": "g"]),
                destination: .directory(root.url))
            let handle = queue.add(request)
            try await eventually("the start noted") { daemon.state.withLock { $0.startedEarly.contains(handle.id) } }

            let gid = GID.random()
            let seen = daemon.state.withLock { state in
                state.logsChanges = true
                state.keep(Daemon.Item(gid: gid, uris: [request.url.absoluteString], options: [:], request: request))
                // What a subscriber has been sent: the item as kept, not yet started.
                return state.changeLogStart + state.changeLog.count
            }
            daemon.attach(handle, to: gid)
            #expect(lines.withLock { $0.map(\.message) } == ["started"])
            #expect(notifications.withLock { $0 } == ["aria2.onDownloadStart \(gid)"])
            let changed = daemon.state.withLock { $0.changeLog[(seen - $0.changeLogStart)...] }
            #expect(changed.contains(gid))
            #expect(daemon.state.withLock { $0.items[gid]?.started } == true)

            server.openGate("g")
            _ = try await handle.result
            try await eventually("the end announced") { notifications.withLock { $0.count } == 2 }
            #expect(notifications.withLock { $0.last } == "aria2.onDownloadComplete \(gid)")
        }
    }
}
