import Foundation
import Haul
public import HaulPostgres

/// The daemon as the control plane of a fleet (`haul daemon --db`): aria2's RPC and the dashboard over a PostgreSQL
/// `SharedQueue` whose `SharedQueueWorker`s (`haul worker`, on any machine) do the downloading.
///
/// `aria2.addUri` enqueues; the lists and `tellStatus` read the shared queue (a running download names its worker);
/// pause, resume and remove act on the queue, so every worker obeys them (a running download stops at its worker's
/// next heartbeat). A download's GID is its number in the queue. The `haul.fleet*` methods give the fleet page its
/// view: the workers with their lease state, the hosts across the fleet, throughput over time, and the downloads by
/// state with bulk actions.
///
/// Paths are the shared queue's: relative to each worker's directory (`dir` and `out` name a place under it). What
/// only a download running in this process could say (live progress, speed, segments) is not in the database, and the
/// methods that need it answer that they are not available here.
public final class Fleet: Sendable {
    /// The queue this fleet works on.
    public let queue: SharedQueue
    let version: String
    let sessionID: String

    /// A control plane for `queue`; `version` is what `getVersion` answers.
    public init(queue: SharedQueue, version: String = "0.1.0") {
        self.queue = queue
        self.version = version
        sessionID = GID.random().description + GID.random().description
    }

    /// An endpoint answering the calls with this fleet, checking `secret` (`nil`: none).
    public func endpoint(secret: RPCSecret?) -> RPCEndpoint {
        RPCEndpoint(
            secret: secret,
            asyncMethods: { [self] method, params throws(RPCError) in
                try await call(method, params)
            })
    }

    /// The methods answered, as `system.listMethods` lists them.
    static let methods = [
        "aria2.addUri", "aria2.remove", "aria2.forceRemove", "aria2.pause", "aria2.forcePause", "aria2.unpause",
        "aria2.tellStatus", "aria2.tellActive", "aria2.tellWaiting", "aria2.tellStopped", "aria2.getGlobalStat",
        "aria2.getVersion", "aria2.getSessionInfo", "haul.fleet", "haul.fleetDownloads", "haul.fleetPause",
        "haul.fleetResume", "haul.fleetRemove", "haul.fleetRetry", "haul.changeFleet", "system.multicall",
        "system.listMethods", "system.listNotifications",
    ]

    /// The answer to one call (its secret already checked).
    public func call(_ method: String, _ params: [JSON]) async throws(RPCError) -> JSON {
        let arguments = Arguments(method: method, params: params)
        switch method {
        case "aria2.addUri": return try await addUri(arguments)
        case "aria2.remove", "aria2.forceRemove":
            return try await act(on: arguments) { queue, id in try await queue.cancel(.ids([id])) }
        case "aria2.pause", "aria2.forcePause":
            return try await act(on: arguments) { queue, id in try await queue.pause([id]) }
        case "aria2.unpause":
            return try await act(on: arguments) { queue, id in try await queue.resume([id]) }
        case "aria2.tellStatus":
            let id = try Self.id(arguments, 0)
            guard let record = try await database({ try await self.queue.download(id) }) else {
                throw RPCError("GID \(try arguments.string(0, "gid")) is not found")
            }
            return Self.object(record, keys: try arguments.strings(1, "keys"))
        case "aria2.tellActive":
            return try await list([.running], offset: 0, count: 1_000, keys: try arguments.strings(0, "keys"))
        case "aria2.tellWaiting", "aria2.tellStopped":
            let states: Set<SharedDownloadState> =
                method == "aria2.tellWaiting" ? [.waiting, .paused] : [.done, .failed, .cancelled]
            return try await list(
                states, offset: try arguments.int(0, "offset"), count: try arguments.int(1, "num"),
                keys: try arguments.strings(2, "keys"))
        case "aria2.getGlobalStat": return try await globalStat()
        case "aria2.getVersion": return ["version": .string(version), "enabledFeatures": ["HTTPS", "fleet"]]
        case "aria2.getSessionInfo": return ["sessionId": .string(sessionID)]
        case "haul.fleet": return try await overview()
        case "haul.fleetDownloads": return try await downloads(arguments)
        case "haul.fleetPause": return try await bulk(arguments) { queue, ids in try await queue.pause(ids) }
        case "haul.fleetResume": return try await bulk(arguments) { queue, ids in try await queue.resume(ids) }
        case "haul.fleetRemove": return try await bulk(arguments) { queue, ids in try await queue.cancel(.ids(ids)) }
        case "haul.fleetRetry":
            if arguments.optional(0) == nil {
                return .int(Int64(try await database { try await self.queue.retryFailed() }))
            }
            return try await bulk(arguments) { queue, ids in try await queue.retry(ids) }
        case "haul.changeFleet": return try await changeFleet(arguments)
        case "system.listMethods": return .array(Self.methods.map { .string($0) })
        case "system.listNotifications": return []
        default:
            if Daemon.methods.contains(method) {
                throw RPCError("\(method) is not available on a shared queue (haul daemon --db)")
            }
            throw RPCError("No such method: \(method)")
        }
    }

    /// `addUri(uris, options, position)`: one download enqueued (its position is the queue's: by priority, then
    /// order added). The same URL added again at the same path is the download queued already.
    private func addUri(_ arguments: Arguments) async throws(RPCError) -> JSON {
        guard let list = arguments.optional(0)?.array, !list.isEmpty else { throw RPCError("No URI to download.") }
        let uris = try list.map { value throws(RPCError) -> String in
            guard let uri = value.string else { throw .invalidParams("aria2.addUri: each URI must be a string") }
            return uri
        }
        let options = try arguments.options(1)
        for name in options.keys.sorted() where !Self.options.contains(name) {
            throw RPCError(
                Aria2Options.known.contains(name)
                    ? "option \(name) is not available on a shared queue (haul daemon --db)" : "No such option: \(name)"
            )
        }
        // The workers' directories are theirs: the plan is made under a root that stands for each of them.
        let root = "/fleet"
        let plan = try DownloadPlan(uris: uris, options: options, defaults: [:], root: root, base: .init())
        let path: String
        switch plan.request.destination {
        case .file(let file): path = String(file.path.dropFirst(root.count + 1))
        case .directory(let directory, _):
            guard let name = DownloadRequest.fileName(for: plan.uris[0]) else {
                throw RPCError("'\(uris[0])' names no file: give its name with the option out")
            }
            let under = String(directory.path.dropFirst(root.count)).drop { $0 == "/" }
            path = under.isEmpty ? name : under + "/" + name
        }
        let maxAttempts = try options["max-tries"]?.last.map { text throws(RPCError) -> Int in
            guard let count = Int(text), (1...100).contains(count) else {
                throw RPCError("max-tries must be a number from 1 to 100, not '\(text)'")
            }
            return count
        }
        let download: SharedDownload
        do {
            download = try SharedDownload(request: plan.request, path: path, maxAttempts: maxAttempts ?? 4)
        } catch {
            throw RPCError(error.message)
        }
        // Added paused in the enqueue's own transaction: a worker woken by another download could claim it first.
        let record = try await database {
            try await self.queue.enqueue([download], paused: plan.paused)
            return try await self.queue.download(atPath: path)
        }
        guard let record, let gid = GID(UInt64(record.id)) else {
            throw RPCError("'\(path)' was enqueued but cannot be read back")
        }
        // Queued before, and not paused then: paused now, as aria2 would.
        if plan.paused, record.state != .paused {
            _ = try await database { try await self.queue.pause([record.id]) }
        }
        return .string(gid.description)
    }

    /// The options `addUri` takes here: a download's own, which the database keeps (no secrets: workers bring
    /// their credentials), and its place under the workers' directories.
    static let options: Set<String> = [
        "dir", "out", "split", "min-split-size", "max-download-limit", "lowest-speed-limit", "header", "user-agent",
        "referer", "checksum", "max-tries", "pause", "allow-overwrite", "auto-file-renaming",
    ]

    /// Does `change` to the download the first parameter names; its GID back, or aria2's error when it was in no state
    /// for it.
    private func act(
        on arguments: Arguments, _ change: @escaping @Sendable (SharedQueue, Int64) async throws -> Int
    ) async throws(RPCError) -> JSON {
        let id = try Self.id(arguments, 0)
        let gid = try arguments.string(0, "gid")
        let changed = try await database { try await change(self.queue, id) }
        guard changed > 0 else {
            guard try await database({ try await self.queue.download(id) }) != nil else {
                throw RPCError("GID \(gid) is not found")
            }
            throw RPCError("GID \(gid) cannot be changed in its state")
        }
        return .string(GID(UInt64(id))?.description ?? gid)
    }

    /// Does `change` to every download of the first parameter (an array of GIDs); how many it changed.
    private func bulk(
        _ arguments: Arguments, _ change: @escaping @Sendable (SharedQueue, [Int64]) async throws -> Int
    ) async throws(RPCError) -> JSON {
        guard let gids = try arguments.strings(0, "gids") else {
            throw .invalidParams("\(arguments.method): parameter 1 (gids) must be an array of strings")
        }
        let ids = try gids.map { text throws(RPCError) -> Int64 in try Self.id(text) }
        return .int(Int64(try await database { try await change(self.queue, ids) }))
    }

    /// aria2's lists over the downloads in `states`.
    private func list(_ states: Set<SharedDownloadState>, offset: Int64, count: Int64, keys: [String]?)
        async throws(RPCError) -> JSON
    {
        guard count >= 0 else { throw .invalidParams("num must be 0 or more") }
        let records = try await database {
            try await self.queue.downloads(states, offset: Int(clamping: max(0, offset)), limit: Int(clamping: count))
        }
        return .array(records.map { Self.object($0, keys: keys) })
    }

    /// `getGlobalStat`: counts, and the pace of the last minute as the download speed.
    private func globalStat() async throws(RPCError) -> JSON {
        let (counts, pace) = try await database { (try await self.queue.counts(), try await self.queue.pace()) }
        func count(_ states: SharedDownloadState...) -> JSON {
            .string(String(states.reduce(0) { $0 + (counts[$1] ?? 0) }))
        }
        return [
            "downloadSpeed": .string(String(Int64(pace.bytesPerSecond))), "uploadSpeed": "0",
            "numActive": count(.running), "numWaiting": count(.waiting, .paused),
            "numStopped": count(.done, .failed, .cancelled), "numStoppedTotal": count(.done, .failed, .cancelled),
        ]
    }

    /// `haul.fleet()`: the fleet page's view: counts, workers (stopped and lost ones for ten minutes), hosts, the
    /// queue's throughput every 10 seconds over ten minutes, and the per-host limit (failures are the error list's).
    private func overview() async throws(RPCError) -> JSON {
        let (status, samples, settings) = try await database {
            (
                try await self.queue.status(failures: 0, stoppedWithin: .seconds(600)),
                try await self.queue.throughput(last: .seconds(600), every: .seconds(10)),
                try await self.queue.hostSettings()
            )
        }
        let counts: JSON = [
            "waiting": .int(Int64(status.waiting)), "running": .int(Int64(status.running)),
            "paused": .int(Int64(status.paused)), "done": .int(Int64(status.done)),
            "failed": .int(Int64(status.failed)), "cancelled": .int(Int64(status.cancelled)),
        ]
        return [
            "queue": .string(status.queue), "database": .string(queue.databaseURL.description), "counts": counts,
            "bytesDone": .int(status.bytesDone), "bytesPerSecond": .double(status.bytesPerSecond),
            "filesPerSecond": .double(status.filesPerSecond),
            "perHost": settings.maxConnectionsPerHost.map { .int(Int64($0)) } ?? .null,
            "workers": .array(
                status.workers.map { worker in
                    [
                        "id": .int(worker.id), "name": .string(worker.name), "machine": .string(worker.machine),
                        "state": .string(worker.state),
                        "secondsSinceHeartbeat": .double((worker.secondsSinceHeartbeat * 10).rounded() / 10),
                        "running": .int(Int64(worker.running)), "done": .int(Int64(worker.done)),
                        "bytesDone": .int(worker.bytesDone), "bytesPerSecond": .double(worker.bytesPerSecond),
                    ]
                }),
            "hosts": .array(
                status.hosts.map { host in
                    [
                        "host": .string(host.host), "waiting": .int(Int64(host.waiting)),
                        "running": .int(Int64(host.running)), "limit": host.limit.map { .int(Int64($0)) } ?? .null,
                        "done": .int(Int64(host.done)), "failed": .int(Int64(host.failed)),
                    ]
                }),
            "throughput": .array(
                samples.map { ["start": .int($0.start), "files": .int(Int64($0.files)), "bytes": .int($0.bytes)] }),
        ]
    }

    /// `haul.fleetDownloads(state, offset, num)`: a page of the downloads in a state (`active`, `waiting` with the
    /// paused ones, `paused`, `complete`, `error`, `removed`, or aria2's `stopped` for the three ended ones), and how
    /// many there are in all.
    private func downloads(_ arguments: Arguments) async throws(RPCError) -> JSON {
        let name = try arguments.string(0, "state")
        let states: Set<SharedDownloadState> =
            switch name {
            case "active": [.running]
            case "waiting": [.waiting, .paused]
            case "paused": [.paused]
            case "complete": [.done]
            case "error": [.failed]
            case "removed": [.cancelled]
            case "stopped": [.done, .failed, .cancelled]
            default: throw .invalidParams("haul.fleetDownloads: no state '\(name)'")
            }
        let offset = arguments.optional(1) == nil ? 0 : try arguments.int(1, "offset")
        let count = arguments.optional(2) == nil ? 50 : try arguments.int(2, "num")
        guard offset >= 0, (0...1_000).contains(count) else {
            throw .invalidParams("haul.fleetDownloads: offset must be 0 or more and num from 0 to 1000")
        }
        let (records, counts) = try await database {
            (
                try await self.queue.downloads(states, offset: Int(offset), limit: Int(count)),
                try await self.queue.counts()
            )
        }
        let total = states.reduce(0) { $0 + (counts[$1] ?? 0) }
        return ["total": .int(Int64(total)), "downloads": .array(records.map { Self.object($0, keys: nil) })]
    }

    /// `haul.changeFleet({"per-host": N})`: the connections to one host at once across the fleet (`0`: no limit).
    private func changeFleet(_ arguments: Arguments) async throws(RPCError) -> JSON {
        let options = try arguments.options(0)
        for name in options.keys where name != "per-host" {
            throw RPCError("haul.changeFleet: no option '\(name)' (per-host is the one)")
        }
        guard let text = options["per-host"]?.last else { return "OK" }
        guard let limit = Int(text), (0...10_000).contains(limit) else {
            throw RPCError("per-host must be a number from 0 (no limit) to 10000, not '\(text)'")
        }
        try await database {
            var settings = try await self.queue.hostSettings()
            settings.maxConnectionsPerHost = limit == 0 ? nil : limit
            try await self.queue.setHostSettings(settings)
        }
        return "OK"
    }

    /// Runs `operation` against the database; a failure is the call's error, in words.
    private func database<Value: Sendable>(_ operation: @escaping @Sendable () async throws -> Value)
        async throws(RPCError) -> Value
    {
        do {
            return try await operation()
        } catch let error as SharedQueueError {
            throw RPCError(error.message)
        } catch {
            throw RPCError("the shared queue: \(error)")
        }
    }

    /// The download number a GID parameter names.
    private static func id(_ arguments: Arguments, _ index: Int) throws(RPCError) -> Int64 {
        try id(try arguments.string(index, "gid"))
    }

    private static func id(_ text: String) throws(RPCError) -> Int64 {
        guard let gid = GID(hex: text), let id = Int64(exactly: gid.value) else {
            throw RPCError("GID \(text) is not found")
        }
        return id
    }

    /// aria2's status object of `record` (numbers as strings), with the fleet's own members: the worker holding or
    /// having published it, its attempts, its host.
    static func object(_ record: SharedDownloadRecord, keys: [String]?) -> JSON {
        let status =
            switch record.state {
            case .waiting: "waiting"
            case .running: "active"
            case .paused: "paused"
            case .done: "complete"
            case .failed: "error"
            case .cancelled: "removed"
            }
        let length = String(record.size ?? 0)
        let completed = record.state == .done ? length : "0"
        let gid = GID(UInt64(record.id))?.description ?? ""
        var members: [String: JSON] = [
            "gid": .string(gid), "status": .string(status), "totalLength": .string(length),
            "completedLength": .string(completed), "uploadLength": "0", "downloadSpeed": "0", "uploadSpeed": "0",
            "connections": record.state == .running ? "1" : "0", "numPieces": "0", "pieceLength": "0", "dir": "",
            "errorCode": record.state == .failed ? "1" : "0", "errorMessage": .string(record.error ?? ""),
            "files": [
                [
                    "index": "1", "path": .string(record.path), "length": .string(length),
                    "completedLength": .string(completed), "selected": "true",
                    "uris": [["uri": .string(record.url), "status": "used"]],
                ]
            ],
            "worker": .string(record.worker ?? ""), "host": .string(record.host),
            "attempt": .string(String(record.attempt)), "maxAttempts": .string(String(record.maxAttempts)),
            "pauseRequested": .bool(record.pauseRequested),
            "enqueuedAt": .double(record.enqueuedAt.timeIntervalSince1970.rounded()),
        ]
        if let finished = record.finishedAt {
            members["finishedAt"] = .double(finished.timeIntervalSince1970.rounded())
        }
        if let keys { members = members.filter { keys.contains($0.key) } }
        return .object(members)
    }
}
