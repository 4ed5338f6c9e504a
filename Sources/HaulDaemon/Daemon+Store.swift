import Foundation
import Haul

/// Keeping the daemon's downloads across restarts (``DaemonStore``).
extension Daemon {
    /// The stored form of `item`: its URIs without their user and password (`withheldSecrets` says they were left
    /// out), as its options are stored without theirs.
    static func row(_ item: Item) -> DaemonStore.Row {
        var row = DaemonStore.Row(
            gid: item.gid, uris: item.uris.map(withoutUserInfo), options: item.options,
            state: item.removing ? removingState : item.handle?.status.state == .paused ? "paused" : "waiting",
            rank: item.rank,
            withheldSecrets: item.withheldSecrets)
        if let ending = item.ending {
            row.state = ending.status
            row.path = item.shownFile.isEmpty ? nil : item.shownPath
            row.length = ending.length
            row.completed = ending.completed
            row.errorCode = ending.errorCode
            row.errorMessage = ending.errorMessage
            row.stoppedOrder = item.stoppedOrder
        }
        return row
    }

    /// Writes a change a call made to the store, if there is one, before the call is answered; a failure is the
    /// call's.
    func record(_ change: (DaemonStore) throws -> Void) throws(RPCError) {
        guard let store = configuration.store else { return }
        do {
            try change(store)
        } catch {
            throw RPCError("cannot record the change: \(error)")
        }
    }

    /// The stored state of a download removed by a call while it ran, until its run has stopped.
    static let removingState = "removing"

    /// Gives `gid` its queued download's `handle`. A start or an end that came before the GID was known (the queue
    /// sends events as they happen, on the download's thread) is noted and announced now, as the queue's event would
    /// have been.
    ///
    /// The queue joins a request for the URL and destination of a download it holds; the daemon does not: as in aria2,
    /// `gid` is a download of its own, which fails at once (error 11, the same file being downloaded), and the other
    /// goes on. Returns whether `gid` has the download.
    @discardableResult
    func attach(_ handle: DownloadHandle, to gid: GID) -> Bool {
        let joined = state.withLock { state -> (other: GID, item: Item?)? in
            guard let other = state.byDownload[handle.id], other != gid else { return nil }
            let busy = DownloadError(
                .destinationBusy, message: "the same file is being downloaded by GID#\(other)", url: handle.request.url)
            return (other, Self.end(gid, with: .failure(busy), in: &state))
        }
        if let joined {
            // Only this add's share of the joined download goes.
            handle.cancel()
            if let ended = joined.item {
                Self.announceEnd(
                    of: ended, to: configuration.logger, notificationHandler, storedIn: configuration.store)
            }
            return false
        }
        let (started, ended) = state.withLock { state -> (Item?, Item?) in
            state.items[gid]?.handle = handle
            let started = state.startedEarly.remove(handle.id) != nil ? state.markStarted(gid) : nil
            if let early = state.early.removeValue(forKey: handle.id) {
                return (started, Self.end(gid, with: early, in: &state))
            }
            state.byDownload[handle.id] = gid
            return (started, nil)
        }
        if let started { Self.announceStart(of: started, to: configuration.logger, notificationHandler) }
        if let ended {
            Self.announceEnd(of: ended, to: configuration.logger, notificationHandler, storedIn: configuration.store)
        }
        return true
    }

    /// Stores the waiting order (the active downloads first) and whether each of `gids` is paused, both as the queue
    /// has them now: read and written under ``storeSync``.
    func persistOrder(syncing gids: [GID] = []) throws(RPCError) {
        state.withLock { $0.orderChanges += 1 }
        guard configuration.store != nil else { return }
        try holding(storeSync) { () throws(RPCError) in
            let statuses = queue.statuses()
            let wanted = Set(gids)
            let (ranks, states) = state.withLock { state -> ([(GID, Int)], [GID: String]) in
                var ranks: [(GID, Int)] = []
                var states: [GID: String] = [:]
                for (rank, status) in statuses.enumerated() {
                    guard let gid = state.byDownload[status.id] else { continue }
                    state.items[gid]?.rank = rank
                    ranks.append((gid, rank))
                    if wanted.contains(gid) { states[gid] = status.state == .paused ? "paused" : "waiting" }
                }
                state.nextRank = ranks.count
                return (ranks, states)
            }
            try record { try $0.update(ranks: ranks, states: states) }
        }
    }

    /// Runs `body` holding `lock` (``storeSync``, ``historyChanges``), its error kept as it is.
    func holding<Value>(_ lock: Locked<Int>, _ body: () throws(RPCError) -> Value) throws(RPCError) -> Value {
        try lock.withLock { _ -> Result<Value, RPCError> in
            do throws(RPCError) {
                return .success(try body())
            } catch {
                return .failure(error)
            }
        }.get()
    }

    /// Stores whether each of `gids` is paused, as the queue says now (under ``storeSync``); `onlyPaused` writes only
    /// those paused (the others were stored waiting, and nothing else can have changed that yet).
    func syncPaused(_ gids: [GID], onlyPaused: Bool = false) throws(RPCError) {
        guard configuration.store != nil, !gids.isEmpty else { return }
        try holding(storeSync) { () throws(RPCError) in
            let downloads = state.withLock { state in
                gids.compactMap { gid in state.items[gid]?.handle.map { (gid, $0.id) } }
            }
            let paused = queue.pausedStates(of: downloads.map(\.1))
            var states: [GID: String] = [:]
            for (gid, id) in downloads {
                guard let isPaused = paused[id], isPaused || !onlyPaused else { continue }
                states[gid] = isPaused ? "paused" : "waiting"
            }
            guard !states.isEmpty else { return }
            try record { try $0.update(ranks: [], states: states) }
        }
    }

    /// Brings back what the store holds: the stopped downloads as history, the others into the queue in their order
    /// (the active ones waiting again, the paused ones paused), resumed from their partial files by the journal.
    func restore(from store: DaemonStore) throws {
        // The newest stopped ones come back into memory; the others stay in the store, read from there when asked.
        let (count, last) = try store.stoppedCount()
        let recent = try store.stopped(
            offset: max(0, count - Self.stoppedInMemory), limit: Self.stoppedInMemory
        ).map(stoppedItem)
        state.withLock { state in
            state.storedStopped = count - recent.count
            state.stoppedCount = last
            for item in recent {
                state.keep(item)
                state.stopped.append(item.gid)
            }
        }
        for row in try store.loadUnfinished() {
            // Removed by a call whose run had not stopped when the daemon did: it ends as removed, as it would have.
            if row.state == Self.removingState {
                var item = storedItem(row)
                item.removing = true
                let removed = DownloadError(.cancelled, message: "removed", url: Self.firstURL(of: row.uris))
                state.withLock { state in
                    state.keep(item)
                    Self.end(row.gid, with: .failure(removed), in: &state)
                }
                continue
            }
            let plan: DownloadPlan
            do throws(RPCError) {
                guard !row.withheldSecrets else {
                    throw RPCError("its credentials were not kept on disk across the restart; add it again")
                }
                plan = try DownloadPlan(
                    uris: row.uris, options: row.options.mapValues { $0.components(separatedBy: "\n") },
                    defaults: [:], root: root, base: queue.downloader.configuration)
            } catch {
                let failure = DownloadError(.invalidRequest, message: error.message, url: Self.firstURL(of: row.uris))
                let item = storedItem(row)
                state.withLock { state in
                    state.keep(item)
                    Self.end(row.gid, with: .failure(failure), in: &state)
                }
                continue
            }
            var item = Item(
                gid: row.gid, uris: plan.uris.map(\.absoluteString), options: plan.options, request: plan.request)
            item.rank = row.rank
            state.withLock { state in
                state.keep(item)
                state.nextRank = max(state.nextRank, row.rank + 1)
            }
            let handle = queue.add(plan.request, paused: row.state == "paused")
            attach(handle, to: row.gid)
        }
        // Those that could not come back, or ended at once, are written as they ended: now, as a restart's first act.
        store.flush()
    }
}
