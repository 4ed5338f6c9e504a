import Haul

/// `haul.subscribe`: what changed, pushed to a WebSocket client at most every N ms, instead of full lists polled.
extension Daemon {
    /// The most downloads one push describes; beyond it the push says `resync` and the client reads its lists again
    /// (after a `pauseAll` of thousands, say), so that one push never costs more than a page.
    static let pushLimit = 1000
    /// The most changes kept for subscriptions: one that falls further behind is told to `resync`.
    static let changeLogLimit = 1 << 16

    /// What one subscription has been told.
    final class Subscription: Sendable {
        let keys: [String]?
        let seen = Locked(Seen())

        struct Seen {
            /// The place in the change log it has read up to.
            var logIndex = 0
            var orderChanges = 0
            /// The running downloads as last pushed.
            var running: [GID: Running] = [:]
        }

        /// A running download as the lists show it: a push is due when it differs.
        struct Running: Equatable {
            var paused: Bool
            var written: Int64
            var total: Int64
            var speed: Int64
            var connections: Int
        }

        init(keys: [String]?) { self.keys = keys }
    }

    /// `haul.subscribe({interval, keys}?)`: from now on the WebSocket session the call came on is sent
    /// `haul.onChange` at most every `interval` ms (1,000 by default, 100 to 60,000) when something changed:
    /// `{"changed": [status objects with keys], "removed": [GIDs no longer listed], "orderChanged": Bool,
    /// "resync": Bool, "stat": getGlobalStat}`. A second call replaces the first; `haul.unsubscribe` ends it.
    func subscribe(_ arguments: Arguments, session: RPCSession?) throws(RPCError) -> JSON {
        guard let session else { throw RPCError("\(arguments.method) needs a WebSocket session (ws://.../jsonrpc)") }
        let options = try arguments.options(0)
        for name in options.keys where name != "interval" && name != "keys" {
            throw .invalidParams("\(arguments.method): no such option: \(name)")
        }
        var interval = 1000
        if let value = options["interval"]?.last {
            guard let number = Int(value), (100...60_000).contains(number) else {
                throw .invalidParams("\(arguments.method): interval must be 100 to 60000 ms, not \(value)")
            }
            interval = number
        }
        let keys = options["keys"]
        let subscription = Subscription(keys: keys)
        // Read from where the log is now: what happened before, the client reads from the lists.
        state.withLock { state in
            state.logsChanges = true
            subscription.seen.withLock {
                $0.logIndex = state.changeLogStart + state.changeLog.count
                $0.orderChanges = state.orderChanges
            }
        }
        session.every(.milliseconds(interval)) { [self] in changes(for: subscription) }
        return "OK"
    }

    /// `haul.unsubscribe()`: ends the session's subscription.
    func unsubscribe(session: RPCSession?) throws(RPCError) -> JSON {
        guard let session else { throw RPCError("haul.unsubscribe needs a WebSocket session") }
        session.stopPushing()
        return "OK"
    }

    /// The `haul.onChange` notification of what changed since `subscription` was last told, or `nil` when nothing
    /// did.
    func changes(for subscription: Subscription) -> JSON? {
        let statuses = queue.runningStatuses()
        var seen = subscription.seen.withLock { $0 }
        var resync = false
        let (changed, removed, orderChanged) = state.withLock { state -> ([(Item, DownloadStatus?)], [GID], Bool) in
            var gids: Set<GID> = []
            if seen.logIndex < state.changeLogStart {
                resync = true
            } else {
                gids.formUnion(state.changeLog[(seen.logIndex - state.changeLogStart)...])
            }
            seen.logIndex = state.changeLogStart + state.changeLog.count
            let orderChanged = seen.orderChanges != state.orderChanges
            seen.orderChanges = state.orderChanges
            var running: [GID: Subscription.Running] = [:]
            var runningStatus: [GID: DownloadStatus] = [:]
            for status in statuses {
                guard let gid = state.byDownload[status.id] else { continue }
                let now = Subscription.Running(
                    paused: status.state == .paused, written: status.progress.bytesWritten,
                    total: status.progress.totalBytes ?? 0, speed: Int64(status.progress.bytesPerSecond),
                    connections: status.connections)
                running[gid] = now
                runningStatus[gid] = status
                if seen.running[gid] != now { gids.insert(gid) }
            }
            // One that left the running ones without a change of its own (requeued to try again) is shown too.
            for gid in seen.running.keys where running[gid] == nil { gids.insert(gid) }
            seen.running = running
            guard !resync, gids.count <= Self.pushLimit else {
                resync = true
                return ([], [], orderChanged)
            }
            var changed: [(Item, DownloadStatus?)] = []
            var removed: [GID] = []
            for gid in gids.sorted() {
                guard let item = state.items[gid] else {
                    removed.append(gid)
                    continue
                }
                changed.append((item, item.ending == nil ? runningStatus[gid] : nil))
            }
            return (changed, removed, orderChanged)
        }
        subscription.seen.withLock { $0 = seen }
        guard resync || orderChanged || !changed.isEmpty || !removed.isEmpty else { return nil }
        // Endings are pushed, and counted in the push's stat, once stored, as they are answered (call(_:_:session:)).
        defer { configuration.store?.flush() }
        // A waiting or paused one's status is the queue's (read outside the daemon's lock).
        let entries = changed.map { item, status in
            (item, status ?? (item.ending == nil ? item.handle?.status : nil))
        }
        return [
            "jsonrpc": "2.0", "method": "haul.onChange",
            "params": [
                [
                    "changed": Aria2Status.list(entries, keys: subscription.keys),
                    "removed": .array(removed.map { .string($0.description) }), "orderChanged": .bool(orderChanged),
                    "resync": .bool(resync), "stat": getGlobalStat(),
                ]
            ],
        ]
    }
}

extension Daemon.State {
    /// Tells every subscription to read its lists again (`resync`), for a change that names more downloads than the
    /// daemon keeps in memory: the log starts past every subscription's place.
    mutating func resyncSubscriptions() {
        guard logsChanges else { return }
        changeLogStart += changeLog.count + 1
        changeLog = []
    }

    /// Notes that `gid` changed, for the subscriptions (nothing is kept until there is one).
    mutating func touch(_ gid: GID) {
        guard logsChanges else { return }
        changeLog.append(gid)
        if changeLog.count > Daemon.changeLogLimit {
            let dropped = changeLog.count / 2
            changeLog.removeFirst(dropped)
            changeLogStart += dropped
        }
    }
}
