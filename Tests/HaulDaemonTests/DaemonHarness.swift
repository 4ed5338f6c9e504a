import Foundation
import Haul
import HaulDaemon
import HaulMetrics
import HaulNIO
import HaulTestServer
import HaulTestSupport
import NIOCore
import Testing

extension HTTPAnswer {
    var json: JSON? { try? JSON.parse(body) }
}

/// A daemon on a free loopback port, downloading into a temporary root with a journal in memory, and a client
/// that calls it with the right secret.
final class DaemonHarness: Sendable {
    static let secret = "test-secret-0123"
    let root: TemporaryDirectory
    let daemon: Daemon
    let queue: DownloadQueue
    /// The downloader's backoff clock: it records the waits between tries instead of sleeping.
    let clock = RecordingClock()
    private let current: Locked<RPCServer>
    private let access: RPCAccess
    private let secret: String?
    /// The event loops its RPC server runs on (`nil`: NIO's shared ones, which the other tests' servers use too).
    private let group: (any EventLoopGroup)?

    init(
        maxConcurrent: Int = 4, access: RPCAccess = RPCAccess(unauthorizedDelay: .milliseconds(300)),
        secret: String? = DaemonHarness.secret, journal: (any Journal)? = nil, monitoring: MonitoringEndpoint? = nil,
        group: (any EventLoopGroup)? = nil
    ) async throws {
        root = try TemporaryDirectory()
        var configuration = testConfiguration(clock: clock)
        configuration.keepsPartialOnCancel = true
        configuration.journal = journal
        queue = DownloadQueue(
            downloader: Downloader(transport: NIOTransport(), configuration: configuration),
            configuration: .init(maxConcurrentDownloads: maxConcurrent, recordsRequests: false))
        daemon = try Daemon(queue: queue, configuration: Daemon.Configuration(root: root.url))
        self.access = access
        self.secret = secret
        self.group = group
        let server = try await RPCServer.start(
            endpoint: daemon.endpoint(secret: secret.flatMap(RPCSecret.init)), host: "127.0.0.1", port: 0,
            access: access, monitoring: monitoring, group: group)
        current = Locked(server)
        daemon.onNotification { method, gid in server.notify(method, gid: gid) }
    }

    /// The RPC server the daemon answers through now.
    var server: RPCServer { current.withLock { $0 } }
    var port: Int { server.port }
    var host: String { "127.0.0.1:\(port)" }

    /// Stops the RPC server and starts a new one on its port, as a restarted daemon does: the sessions it kept in
    /// memory are gone. `whileDown` runs between the two. The new server is the one `stop()` stops, so a page still
    /// open is checked before its server goes.
    func restartServer(whileDown: () async throws -> Void) async throws {
        let old = server
        await old.stop()
        try await whileDown()
        let again = try await RPCServer.start(
            endpoint: daemon.endpoint(secret: secret.flatMap(RPCSecret.init)), host: "127.0.0.1", port: old.port,
            access: access, group: group)
        current.withLock { $0 = again }
        daemon.onNotification { method, gid in again.notify(method, gid: gid) }
    }

    func stop() async {
        await server.stop()
        queue.cancelAll()
        await queue.waitUntilIdle()
        daemon.close()
    }

    /// Calls `method` with the secret and `params`; the answer's `result`, or the error object thrown.
    @discardableResult
    func call(_ method: String, _ params: [JSON] = [], token: String? = DaemonHarness.secret) async throws -> JSON {
        let answer = try await post([
            "jsonrpc": "2.0", "id": "t", "method": .string(method),
            "params": .array(
                (token.map { [JSON.string("token:\($0)")] } ?? []) + params),
        ])
        let members = try #require(answer.json?.object, "not a JSON-RPC answer: \(answer.text)")
        if let error = members["error"] { throw CallError(object: error) }
        return try #require(members["result"])
    }

    /// POSTs `body` to /jsonrpc with a right Host and no Origin, as a local tool does.
    func post(_ body: JSON, headers: [(String, String)] = []) async throws -> HTTPAnswer {
        try await RawHTTP.send(
            port: port, headers: [("Host", host), ("Content-Type", "application/json")] + headers, body: body.encoded())
    }

    /// Waits until `gid` has the status `status`.
    func waitFor(_ gid: String, status: String) async throws {
        try await eventually("\(gid) \(status)") {
            // A blocking poll of the daemon itself: its methods answer from memory.
            (try? daemon.call("aria2.tellStatus", [.string(gid), ["status"]]))?.object?["status"]?.string == status
        }
    }
}

/// An error object an RPC call answered with.
struct CallError: Error, CustomStringConvertible {
    var object: JSON
    var message: String { object.object?["message"]?.string ?? "" }
    var code: Int64? { object.object?["code"]?.int }
    var description: String { "\(object)" }
}

/// A queue running `width` downloads at once over Haul's own transport, with the tests' downloader configuration
/// (`retries` retries, waiting before each on `clock`), as a test that drives a ``Daemon`` directly makes it.
func daemonTestQueue(width: Int, retries: Int = 3, clock: any BackoffClock = RecordingClock()) -> DownloadQueue {
    DownloadQueue(
        downloader: Downloader(
            transport: NIOTransport(), configuration: testConfiguration(clock: clock, retries: retries)),
        configuration: .init(maxConcurrentDownloads: width))
}

/// The notifications `daemon` sends from now on, each as `"METHOD GID"`, in the order sent.
/// A daemon on `root` with its store in `root/.haul`, as `haul daemon` keeps one: `width` downloads at once, paused if
/// asked (nothing starts), partials kept on cancel, its downloader's waits before a retry on `clock`.
func startStoredDaemon(
    _ root: TemporaryDirectory, width: Int = 1, paused: Bool = false, globalOptions: [String: String] = [:],
    clock: any BackoffClock = RecordingClock(), onStoreError: @escaping @Sendable (String) -> Void = { _ in }
) throws -> (daemon: Daemon, queue: DownloadQueue, store: DaemonStore) {
    var configuration = testConfiguration(clock: clock)
    configuration.keepsPartialOnCancel = true
    let queue = DownloadQueue(
        downloader: Downloader(transport: NIOTransport(), configuration: configuration),
        configuration: .init(maxConcurrentDownloads: width, recordsRequests: false))
    if paused { queue.pause() }
    try FileManager.default.createDirectory(at: root.file(".haul"), withIntermediateDirectories: true)
    let store = try DaemonStore(path: root.file(".haul/daemon.sqlite").path)
    var daemonConfiguration = Daemon.Configuration(root: root.url, globalOptions: globalOptions, store: store)
    daemonConfiguration.onStoreError = onStoreError
    return (try Daemon(queue: queue, configuration: daemonConfiguration), queue, store)
}

/// Runs `body` with a daemon over a paused queue that starts nothing, so that every request can be read as it was
/// planned; closed after, its queue's downloads cancelled.
func withIdleDaemon(_ body: (Daemon) throws -> Void) throws {
    let root = try TemporaryDirectory()
    let queue = daemonTestQueue(width: 1)
    queue.pause()
    let daemon = try Daemon(queue: queue, configuration: .init(root: root.url))
    defer {
        daemon.close()
        queue.cancelAll()
    }
    try body(daemon)
}

func recordedNotifications(of daemon: Daemon) -> Locked<[String]> {
    let notes = Locked<[String]>([])
    daemon.onNotification { method, gid in notes.withLock { $0.append("\(method) \(gid)") } }
    return notes
}

/// The GIDs of a list answer (`tellActive`, `tellWaiting`, `tellStopped`), in its order.
func listedGIDs(_ list: JSON) -> [String] { list.array?.compactMap { $0.object?["gid"]?.string } ?? [] }

/// A daemon (its secret `DaemonHarness.secret`), a test server and a browser, the page open and signed in.
func withDashboard(
    _ kind: Browser.Kind, maxConcurrent: Int = 4, signedIn: Bool = true, journal: (any Journal)? = nil,
    _ body: (DaemonHarness, TestServer, Browser) async throws -> Void
) async throws {
    try await TestServer.withRunning { server in
        let harness = try await DaemonHarness(maxConcurrent: maxConcurrent, journal: journal)
        let browser = try await Browser.start(kind)
        do {
            try await browser.open("http://\(harness.host)/")
            try await browser.waitUntil("the sign-in form", "return !document.getElementById('signin').hidden")
            if signedIn { try await browser.signIn() }
            try await body(harness, server, browser)
            let errors = try await browser.consoleErrors()
            #expect(errors.isEmpty, "console errors: \(errors)")
        } catch {
            await browser.close()
            await harness.stop()
            throw error
        }
        await browser.close()
        await harness.stop()
    }
}

extension Browser {
    /// Signs in to the dashboard open in this browser with `secret`, and waits for its downloads to show.
    func signIn(secret: String = DaemonHarness.secret) async throws {
        try await type(secret, into: "#secret")
        try await click("#signin-form button[type=submit]")
        try await waitUntil("the downloads shown", "return !document.getElementById('app').hidden")
    }
}
