public import Foundation
public import Haul
import HaulOperations
public import Logging

/// Downloads as a service: a `DownloadQueue` driven through aria2's JSON-RPC methods (``call(_:_:session:)``), with every
/// download's identity (a GID), options and outcome kept while the daemon runs.
///
/// It holds no download logic: adding, pausing, moving and limiting go through the queue's public API, and every
/// path an RPC names is confined to the download root (``Configuration/root``).
public final class Daemon: Sendable {
    /// How the daemon is set up.
    public struct Configuration: Sendable {
        /// The download root: every `dir` and `out` a call names stays inside it.
        public var root: URL
        /// What `getVersion` answers.
        public var version: String
        /// aria2's global options at start (from its configuration file): the defaults of every download, and
        /// `max-concurrent-downloads` and `max-overall-download-limit`, checked as `changeGlobalOption` checks them.
        /// What `changeGlobalOption` changed at an earlier run (kept in ``store``) applies over them.
        public var globalOptions: [String: String]
        /// Where downloads and their outcomes are kept across restarts; `nil` keeps them in memory only.
        public var store: DaemonStore?
        /// Where `saveSession` writes aria2's session file (aria2's `--save-session`); `nil`: the call fails, as in
        /// aria2 without that option.
        public var sessionFile: URL?
        /// Told when the store cannot be written (the download goes on; a restart may not know of the change).
        public var onStoreError: @Sendable (String) -> Void = { _ in }
        /// Where each download's start and end are logged, with its `gid`, `download.url` (no credentials) and
        /// `download.path` as metadata: info for a start and a completion, warning for an error. Logs nothing by
        /// default.
        public var logger = Logger(label: "haul.daemon", factory: { _ in SwiftLogNoOpLogHandler() })

        /// A configuration for a daemon downloading into `root`.
        public init(
            root: URL, version: String = "0.1.0", globalOptions: [String: String] = [:], store: DaemonStore? = nil
        ) {
            self.root = root
            self.version = version
            self.globalOptions = globalOptions
            self.store = store
        }
    }

    /// The queue every download runs through.
    public let queue: DownloadQueue
    let configuration: Configuration
    /// The root's real path (symbolic links resolved), which every destination must stay under.
    let root: String
    /// The download root as the daemon writes under it (symbolic links resolved).
    public var rootPath: String { root }
    let sessionID: String
    let state: Locked<State>
    private let watcher: EventObservation
    /// Held while a host's settings change (read, stored, applied), one change at a time; its value counts the
    /// changes made. (Not a lock on an empty value: ThreadSanitizer takes a value of no size, which shares the
    /// mutex's address, for a race with the mutex itself.)
    let hostChanges = Locked(0)
    /// Held while what the store says of the downloads not stopped is read from the queue and written (paused or
    /// waiting, the waiting order), one at a time: the last write is then of the queue as it is after every change,
    /// whatever order calls changing it at once run in. Not held across the queue's own changes, which may send its
    /// events (and so call the notification hook) on the calling thread.
    let storeSync = Locked(0)
    /// Held while a download's settings or URIs change (changeOption, changeUri), one change at a time: each plans
    /// from the options and URIs the one before left, and stores what it changed before the next begins.
    let downloadChanges = Locked(0)
    /// Held by a removal from the history (removeDownloadResult, purgeDownloadResult), one at a time: a second removal
    /// of one result finds it gone, as in aria2, and the count of stopped downloads kept only in the store stays right.
    let historyChanges = Locked(0)
    /// The last page of stopped downloads answered: every client asks for the same one every second, and a stopped
    /// download does not change.
    let stoppedPage = Locked<StoppedPage?>(nil)

    /// A page of ``tellList(_:stopped:)`` for the stopped downloads as they were at `version`.
    struct StoppedPage {
        var offset: Int64
        var count: Int64
        var keys: [String]?
        var version: Int
        var answer: JSON
    }
    private let shutdownHandler = Locked<Hook<Bool>?>(nil)
    let notificationHandler: Locked<Hook<(method: String, gid: String)>?>

    struct State {
        var items: [GID: Item] = [:]
        var byDownload: [DownloadID: GID] = [:]
        /// Stopped downloads (complete, error, removed) in the order they stopped: the newest, with a store (see
        /// ``Daemon/stoppedInMemory``); older ones, `storedStopped` of them, are in the store only.
        var stopped: [GID] = []
        var storedStopped = 0
        /// Changed whenever the stopped downloads do: a page of them answered before stays right while it holds.
        var stoppedVersion = 0
        /// Where how a download ended is written (``DaemonStore/saveSoon(_:onError:)``), from inside the lock that
        /// records it: a call that removes the download after it ended finds its row written first; and where old
        /// stopped downloads are left to.
        var store: DaemonStore?
        var onStoreError: Hook<String>?
        /// Outcomes of downloads that ended before their GID was recorded (an add answered at once).
        var early: [DownloadID: Result<DownloadResult, DownloadError>] = [:]
        /// Downloads that started before their GID was recorded: their start is announced once it is.
        var startedEarly: Set<DownloadID> = []
        var globalOptions: [String: String]
        /// How many downloads have stopped: the next one's place in the stored history.
        var stoppedCount = 0
        /// The rank of the next download added (after every unfinished one).
        var nextRank = 0
        /// The hosts with settings of their own (``HostSettings``).
        var hosts: [String: HostSettings] = [:]
        /// Set by ``Daemon/close()``: the downloads cancelled from now on stop with the daemon and come back with it.
        var closing = false
        /// The directories downloads are shown in, each kept once however many downloads it holds.
        var directories: Set<String> = []
        /// Whether changes are logged for `haul.subscribe` (from its first call on).
        var logsChanges = false
        /// The downloads that changed, in order (``touch(_:)``); `changeLogStart` counts those dropped before its
        /// first element.
        var changeLog: [GID] = []
        var changeLogStart = 0
        /// How many times the waiting order changed by a call.
        var orderChanges = 0
        /// What happened to the downloads in memory that something noteworthy happened to (``Trail``).
        var trails: [GID: Trail] = [:]

        /// `directory`, as the one string kept for it.
        mutating func intern(_ directory: String) -> String {
            if let known = directories.firstIndex(of: directory) { return directories[known] }
            directories.insert(directory)
            return directory
        }

        /// Keeps `item` under its GID, its directory shared with the others'.
        mutating func keep(_ item: Item) {
            var item = item
            item.shownDirectory = intern(item.shownDirectory)
            items[item.gid] = item
            touch(item.gid)
        }

        /// Notes that `gid`'s download started (a change subscribers hear of); returns its item to announce.
        mutating func markStarted(_ gid: GID) -> Item? {
            items[gid]?.started = true
            touch(gid)
            return items[gid]
        }
    }

    /// One download the daemon knows: its URIs and options, its handle while it is in the queue, and how it ended
    /// once it has. Kept small: a history of a hundred thousand downloads stays in memory, as aria2's clients expect
    /// every list answered from memory.
    struct Item {
        let gid: GID
        /// Its URIs as given (user info and all, for this run's requests; the store and the session file leave it
        /// out); the first is used, the others are its mirrors.
        var uris: [String]
        var options: [String: String]
        /// Its file's directory as the lists show it (one string shared by the downloads of a directory,
        /// ``State/intern(_:)``), and the file's path: relative to that directory, or absolute when it is not under
        /// it; empty while a name from the response is still to come.
        var shownDirectory: String
        var shownFile: String
        var handle: DownloadHandle?
        var ending: Ending?
        /// Removed by a call (its cancellation is a removal, not an error).
        var removing = false
        /// Whether it has started since the daemon started (as aria2, the removal of one that never did is not
        /// announced).
        var started = false
        /// Whether secrets were left out of what is stored of it (see ``DaemonStore``).
        var withheldSecrets = false
        /// Its place among the unfinished downloads when stored.
        var rank = 0
        /// When it was added (or brought back at a start): how long it has waited.
        var addedAt = ContinuousClock.now
        /// The order it stopped in.
        var stoppedOrder: Int?

        init(gid: GID, uris: [String], options: [String: String], request: DownloadRequest) {
            self.gid = gid
            self.uris = uris
            self.options = options
            let (directory, path) = Aria2Status.destination(of: request)
            (shownDirectory, shownFile) = (directory, "")
            show(path)
        }

        /// The path of its file as the lists show it.
        var shownPath: String {
            if shownFile.isEmpty || shownFile.hasPrefix("/") { return shownFile }
            return shownDirectory == "/" ? "/" + shownFile : shownDirectory + "/" + shownFile
        }

        /// Shows `path` as its file's path, its directory kept.
        mutating func show(_ path: String) {
            let prefix = shownDirectory == "/" ? "/" : shownDirectory + "/"
            // Compared as bytes, as the file system names them (and without counting characters as each one ends).
            shownFile =
                path.utf8.count > prefix.utf8.count && path.utf8.starts(with: prefix.utf8)
                ? String(decoding: path.utf8.dropFirst(prefix.utf8.count), as: UTF8.self) : path
        }
    }

    /// How a download ended (its file's path is the item's).
    struct Ending {
        var status: String
        var length: Int64
        var completed: Int64
        var errorCode: Int
        var errorMessage: String
    }

    /// A daemon driving `queue`, set up as `configuration` says. It watches the queue's outcomes until ``close()``.
    public init(queue: DownloadQueue, configuration: Configuration) throws {
        self.queue = queue
        self.configuration = configuration
        guard let real = realpath(configuration.root.path, nil) else {
            throw RPCError("the download root '\(configuration.root.path)' cannot be read")
        }
        root = String(cString: real)
        free(real)
        sessionID = GID.random().description + GID.random().description
        var initial = State(globalOptions: [:])
        initial.store = configuration.store
        initial.onStoreError = Hook(configuration.onStoreError)
        let state = Locked(initial)
        self.state = state
        let notifications = Locked<Hook<(method: String, gid: String)>?>(nil)
        notificationHandler = notifications
        // Called as the queue sends each event: a task woken for every start and end cost small files more than
        // the account kept of them.
        watcher = queue.observe(including: Self.trailKinds) { event in
            let ended: Item?
            switch event {
            case .download(let id, .finished(let result)): ended = Self.record(.success(result), of: id, in: state)
            case .download(let id, .failed(let error)): ended = Self.record(.failure(error), of: id, in: state)
            case .download(let id, .started(1, let resumingAt)):
                if resumingAt > 0 {
                    Self.recordTrail(.started(attempt: 1, resumingAt: resumingAt), of: id, in: state)
                }
                let item = state.withLock { state -> Item? in
                    guard let gid = state.byDownload[id] else {
                        state.startedEarly.insert(id)
                        return nil
                    }
                    return state.markStarted(gid)
                }
                if let item { Self.announceStart(of: item, to: configuration.logger, notifications) }
                return
            case .download(let id, let other):
                Self.recordTrail(other, of: id, in: state)
                return
            case .paused(let id):
                Self.noteTrail("paused", "paused, its partial file kept", of: id, in: state)
                return
            case .resumed(let id):
                Self.noteTrail("resumed", "resumed: waiting for a slot", of: id, in: state)
                // Told by the queue's event for every way a download is resumed (one, or all of them), before the
                // start that may follow it.
                if let gid = state.withLock({ $0.byDownload[id] }) {
                    notifications.withLock { $0 }?.call(("haul.onDownloadWaiting", gid.description))
                }
                return
            default: return
            }
            if let ended {
                Self.announceEnd(of: ended, to: configuration.logger, notifications, storedIn: configuration.store)
            }
        }
        apply(try globalChange(configuration.globalOptions.mapValues { $0.components(separatedBy: "\n") }))
        if let store = configuration.store {
            for (name, value) in try store.loadGlobalOptions().sorted(by: { $0.key < $1.key }) {
                do throws(RPCError) {
                    apply(try globalChange([name: value.components(separatedBy: "\n")]))
                } catch {
                    configuration.onStoreError(
                        "the global option \(name) kept at an earlier run is not applied: \(error.message)")
                }
            }
            for (host, settings) in try store.loadHosts() { apply(settings, to: host) }
            try restore(from: store)
        }
    }

    /// Stops watching the queue: a download cancelled from now on (the daemon's own shutdown cancels them) is not
    /// recorded as ended, so that a restart brings it back. Call it before cancelling the queue's downloads, or call
    /// ``stop()``, which also records the downloads that end otherwise meanwhile.
    public func close() {
        state.withLock { $0.closing = true }
        watcher.cancel()
        configuration.store?.flush()
    }

    /// Stops the queue's downloads and then watching them, for a shutdown: a download cancelled by it keeps its partial
    /// file and is not recorded as ended, so that a restart brings it back; one that completes or fails before its
    /// cancellation reaches it is recorded so, and stored, before this returns.
    public func stop() async {
        state.withLock { $0.closing = true }
        queue.cancelAll()
        await queue.waitUntilIdle()
        // The last downloads' ends may still be on their way to the watcher (another thread sending the events before
        // them): every one is recorded before the watcher stops.
        await queue.eventsSent()
        close()
    }

    /// Calls `body` with each notification for WebSocket clients (`aria2.onDownloadStart`, ..., and
    /// `haul.onDownloadWaiting` when a download starts waiting) and the GID it is about.
    public func onNotification(_ body: @escaping @Sendable (_ method: String, _ gid: String) -> Void) {
        notificationHandler.withLock { $0 = Hook { body($0.method, $0.gid) } }
    }

    /// Sends the notification `method` about `gid`.
    func notify(_ method: String, _ gid: GID) {
        notificationHandler.withLock { $0 }?.call((method, gid.description))
    }

    /// Logs `message` about `item` with its identity as metadata (``Configuration/logger``).
    static func log(_ level: Logger.Level, _ message: String, _ item: Item, to logger: Logger) {
        guard logger.logLevel <= level else { return }
        logger.log(
            level: level, "\(message)",
            metadata: [
                "gid": "\(item.gid.description)",
                "download.url": "\(item.uris.first.flatMap { URL(string: $0)?.redactedString } ?? "")",
                "download.path": "\(item.shownPath)",
            ])
    }

    /// Logs that `item` started and tells WebSocket clients (`aria2.onDownloadStart`).
    static func announceStart(
        of item: Item, to logger: Logger, _ notifications: Locked<Hook<(method: String, gid: String)>?>
    ) {
        log(.info, "started", item, to: logger)
        notifications.withLock { $0 }?.call(("aria2.onDownloadStart", item.gid.description))
    }

    /// Logs how `item` ended and tells WebSocket clients, as aria2 does (``notification(for:)``), once `store` holds
    /// the ending: a client told of it never finds it undone by a SIGKILL.
    static func announceEnd(
        of item: Item, to logger: Logger, _ notifications: Locked<Hook<(method: String, gid: String)>?>,
        storedIn store: DaemonStore?
    ) {
        logEnd(of: item, to: logger)
        guard let method = notification(for: item) else { return }
        let gid = item.gid.description
        let tell: @Sendable () -> Void = { notifications.withLock { $0 }?.call((method, gid)) }
        if let store { store.whenWritten(tell) } else { tell() }
    }

    /// Logs how `item` ended: complete, removed, or its error.
    static func logEnd(of item: Item, to logger: Logger) {
        guard let ending = item.ending else { return }
        switch ending.status {
        case "complete": log(.info, "complete (\(ending.completed) bytes)", item, to: logger)
        case "error": log(.warning, "error \(ending.errorCode): \(ending.errorMessage)", item, to: logger)
        default: log(.info, ending.status, item, to: logger)
        }
    }

    /// aria2's notification for a download that ended: none for the removal of one that never started, as aria2.
    static func notification(for item: Item) -> String? {
        switch item.ending?.status {
        case "complete": "aria2.onDownloadComplete"
        case "removed": item.started ? "aria2.onDownloadStop" : nil
        case "error": "aria2.onDownloadError"
        default: nil
        }
    }

    /// Calls `body` when a client asks the daemon to shut down (`aria2.shutdown`, `forceShutdown` with `force`).
    public func onShutdown(_ body: @escaping @Sendable (_ force: Bool) -> Void) {
        shutdownHandler.withLock { $0 = Hook(body) }
    }

    /// The daemon's endpoint: aria2's JSON-RPC, checking `secret`.
    public func endpoint(secret: RPCSecret?) -> RPCEndpoint {
        RPCEndpoint(
            secret: secret,
            sessionMethods: { [self] method, params, session throws(RPCError) in
                try call(method, params, session: session)
            },
            together: ["aria2.addUri"],
            runMethods: { [self] _, calls, _ in addUris(calls) })
    }

    /// Notes how the download `id` ended; returns its item to store.
    private static func record(
        _ outcome: Result<DownloadResult, DownloadError>, of id: DownloadID, in state: Locked<State>
    ) -> Item? {
        state.withLock { state in
            guard let gid = state.byDownload.removeValue(forKey: id) else {
                state.early[id] = outcome
                return nil
            }
            return end(gid, with: outcome, in: &state)
        }
    }

    /// Notes how `gid` ended; returns its item, unless it had ended already.
    @discardableResult
    static func end(_ gid: GID, with outcome: Result<DownloadResult, DownloadError>, in state: inout State) -> Item? {
        guard var item = state.items[gid], item.ending == nil else { return nil }
        if state.closing, case .failure(let error) = outcome, error.isCancellation, !item.removing { return nil }
        // How far one that did not complete got (asked of the queue only then: a completed one's result says all).
        let handle = item.handle
        var total: DownloadProgress? { handle?.status.progress }
        let path: String?
        switch outcome {
        case .success(let result):
            path = result.filePath
            item.ending = Ending(
                status: "complete", length: result.size, completed: result.size, errorCode: 0, errorMessage: "")
        case .failure(let error) where error.isCancellation && item.removing:
            path = nil
            item.ending = Ending(
                status: "removed", length: total?.totalBytes ?? 0, completed: total?.bytesWritten ?? 0,
                errorCode: Aria2Status.removedCode, errorMessage: "")
        case .failure(let error):
            path = error.path
            item.ending = Ending(
                status: "error", length: total?.totalBytes ?? 0, completed: total?.bytesWritten ?? 0,
                errorCode: Aria2Status.exitCode(of: error), errorMessage: error.message)
        }
        if let path {
            item.shownDirectory = Aria2Status.directory(of: path)
            item.show(path)
        }
        // Only a download something happened to has a trail: the end of a plain one is in its status.
        switch outcome {
        case .success(let result): state.trails[gid]?.record(.finished(result), firstSource: "")
        case .failure(let error): state.trails[gid]?.record(.failed(error), firstSource: "")
        }
        item.handle = nil
        state.stopped.append(gid)
        state.stoppedVersion += 1
        state.stoppedCount += 1
        item.stoppedOrder = state.stoppedCount
        state.keep(item)
        if let store = state.store {
            let hook = state.onStoreError
            store.saveSoon(row(item)) { hook?.call($0) }
        }
        // Stored long ago (each stopped one is stored as it stops): from now on read from there.
        state.leaveOldStoppedToStore()
        return item
    }

    /// Answers one aria2 method (its secret already checked); `session` is the WebSocket session it came on, for
    /// `haul.subscribe`.
    public func call(_ method: String, _ params: [JSON], session: RPCSession? = nil) throws(RPCError) -> JSON {
        let answer = try answer(method, params, session: session)
        // An ending is told only once it is stored, so that a client never finds one it read undone by a SIGKILL. Its
        // row is written with others' a moment after it ends (DaemonStore.saveSoon); an answer that can show it, or
        // count it, writes them before it goes (nothing to write: two locks taken).
        if Self.showingEndings.contains(method) { configuration.store?.flush() }
        return answer
    }

    /// The methods whose answers can show or count how a download ended.
    static let showingEndings: Set<String> = [
        "aria2.tellStatus", "aria2.tellStopped", "aria2.getFiles", "aria2.getGlobalStat", "haul.tellHistory",
        "haul.tellDetail",
    ]

    /// ``call(_:_:session:)``'s answer.
    private func answer(_ method: String, _ params: [JSON], session: RPCSession?) throws(RPCError) -> JSON {
        let arguments = Arguments(method: method, params: params)
        switch method {
        case "haul.subscribe": return try subscribe(arguments, session: session)
        case "haul.unsubscribe": return try unsubscribe(session: session)
        case "aria2.addUri": return try addUri(arguments)
        case "aria2.remove", "aria2.forceRemove": return try remove(arguments)
        case "aria2.pause", "aria2.forcePause": return try pause(arguments)
        case "aria2.pauseAll", "aria2.forcePauseAll": return try pauseAll(true)
        case "aria2.unpause": return try unpause(arguments)
        case "aria2.unpauseAll": return try pauseAll(false)
        case "aria2.tellStatus": return try tellStatus(arguments)
        case "aria2.tellActive": return try tellActive(arguments)
        case "aria2.tellWaiting": return try tellList(arguments, stopped: false)
        case "aria2.tellStopped": return try tellList(arguments, stopped: true)
        case "aria2.getUris": return try getUris(arguments)
        case "aria2.changeUri": return try changeUri(arguments)
        case "aria2.getFiles": return try getFiles(arguments)
        case "aria2.getServers": return try getServers(arguments)
        case "aria2.getOption": return try getOption(arguments)
        case "aria2.changeOption": return try changeOption(arguments)
        case "aria2.getGlobalOption": return getGlobalOption()
        case "aria2.changeGlobalOption": return try changeGlobalOption(arguments)
        case "aria2.changePosition": return try changePosition(arguments)
        case "aria2.getGlobalStat": return getGlobalStat()
        case "aria2.removeDownloadResult": return try removeDownloadResult(arguments)
        case "aria2.purgeDownloadResult": return try purgeDownloadResult()
        case "aria2.getVersion":
            return [
                "version": .string(configuration.version), "enabledFeatures": .array(Self.features.map(JSON.string)),
            ]
        case "aria2.getSessionInfo": return ["sessionId": .string(sessionID)]
        case "aria2.saveSession": return try saveSession()
        case "haul.getHosts": return getHosts()
        case "haul.changeHostOption": return try changeHostOption(arguments)
        case "haul.pauseHost": return try pauseHost(arguments, true)
        case "haul.unpauseHost": return try pauseHost(arguments, false)
        case "haul.tellHistory": return try tellHistory(arguments)
        case "haul.tellQueue": return try tellQueue(arguments)
        case "haul.tellDetail": return try tellDetail(arguments)
        case "aria2.shutdown", "aria2.forceShutdown":
            let handler = shutdownHandler.withLock { $0 }
            handler?.call(method == "aria2.forceShutdown")
            return "OK"
        case "system.listMethods": return .array(Self.methods.map(JSON.string))
        case "system.listNotifications": return .array(Self.notifications.map(JSON.string))
        default: throw RPCError("No such method: \(method)")
        }
    }

    /// What `getVersion` lists: the protocols and capabilities there are, and Haul's own extensions (a client that
    /// knows them looks for them here).
    static let features = [
        "HTTPS", "Async DNS", "GZip", "Firefox3 Cookie", "Checksum", "haul.onDownloadWaiting", "haul.hosts",
        "haul.history", "haul.subscribe",
    ]

    /// The methods `system.listMethods` lists: those ``call(_:_:session:)`` answers.
    static let methods = [
        "aria2.addUri", "aria2.remove", "aria2.forceRemove", "aria2.pause", "aria2.pauseAll", "aria2.forcePause",
        "aria2.forcePauseAll", "aria2.unpause", "aria2.unpauseAll", "aria2.tellStatus", "aria2.getUris",
        "aria2.changeUri",
        "aria2.getFiles", "aria2.getServers", "aria2.tellActive", "aria2.tellWaiting", "aria2.tellStopped",
        "aria2.getOption", "aria2.changeOption", "aria2.getGlobalOption", "aria2.changeGlobalOption",
        "aria2.changePosition", "aria2.getGlobalStat", "aria2.purgeDownloadResult", "aria2.removeDownloadResult",
        "aria2.getVersion", "aria2.getSessionInfo", "aria2.saveSession", "aria2.shutdown", "aria2.forceShutdown",
        "system.multicall",
        "system.listMethods", "system.listNotifications", "haul.getHosts", "haul.changeHostOption", "haul.pauseHost",
        "haul.unpauseHost", "haul.tellHistory", "haul.tellQueue", "haul.tellDetail", "haul.subscribe",
        "haul.unsubscribe",
    ]

    /// The notifications a WebSocket client may get.
    static let notifications = [
        "aria2.onDownloadStart", "aria2.onDownloadPause", "aria2.onDownloadStop", "aria2.onDownloadComplete",
        "aria2.onDownloadError", "haul.onDownloadWaiting", "haul.onChange",
    ]
}

/// A closure set after a daemon is made and called on every event, kept in a class: a closure kept directly in a
/// `Locked` is read and written back through a generic `inout` on every access, and each time it gains a layer of
/// reabstraction thunks; after a few hundred thousand notifications the next call overflowed the stack.
final class Hook<Argument>: Sendable {
    private let body: @Sendable (Argument) -> Void

    init(_ body: @escaping @Sendable (Argument) -> Void) { self.body = body }

    func call(_ argument: Argument) { body(argument) }
}
