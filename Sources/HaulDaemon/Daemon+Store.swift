import Foundation
import Haul

/// Keeping the daemon's downloads across restarts (``DaemonStore``).
extension Daemon {
    /// The stored form of `item`.
    static func row(_ item: Item) -> DaemonStore.Row {
        var row = DaemonStore.Row(
            gid: item.gid, uris: item.uris.map(\.absoluteString), options: item.options,
            state: item.handle?.status.state == .paused ? "paused" : "waiting", rank: item.rank,
            withheldSecrets: item.withheldSecrets)
        if let ending = item.ending {
            row.state = ending.status
            row.path = ending.path
            row.length = ending.length
            row.completed = ending.completed
            row.errorCode = ending.errorCode
            row.errorMessage = ending.errorMessage
            row.stoppedOrder = item.stoppedOrder
        }
        return row
    }

    static func persist(_ items: [Item], in store: DaemonStore, onError: @Sendable (String) -> Void) {
        do {
            try store.save(items.map(row))
        } catch {
            onError("cannot record \(items.map(\.gid.description).joined(separator: ", ")): \(error)")
        }
    }

    /// Stores the waiting order (the active downloads first) and, for `paused`, whether each is paused.
    func persistOrder(paused: [GID: Bool] = [:]) throws(RPCError) {
        guard let store = configuration.store else { return }
        let statuses = queue.statuses()
        let ranks = state.withLock { state -> [(GID, Int)] in
            var ranks: [(GID, Int)] = []
            for (rank, status) in statuses.enumerated() {
                guard let gid = state.byDownload[status.id] else { continue }
                state.items[gid]?.rank = rank
                ranks.append((gid, rank))
            }
            state.nextRank = ranks.count
            return ranks
        }
        do {
            try store.update(ranks: ranks, states: paused.mapValues { $0 ? "paused" : "waiting" })
        } catch {
            throw RPCError("cannot record the change: \(error)")
        }
    }

    /// Brings back what the store holds: the stopped downloads as history, the others into the queue in their order
    /// (the active ones waiting again, the paused ones paused), resumed from their partial files by the journal.
    func restore(from store: DaemonStore) throws {
        let rows = try store.load()
        var ended: [Item] = []
        for row in rows {
            let uris = row.uris.compactMap { URL(string: $0) }
            var item: Item
            if row.stoppedOrder != nil {
                item = Item(
                    gid: row.gid, uris: uris, options: row.options,
                    request: DownloadRequest(
                        url: uris.first ?? URL(fileURLWithPath: "/"),
                        destination: .directory(URL(fileURLWithPath: root))))
                item.ending = Ending(
                    status: row.state, path: row.path, length: row.length, completed: row.completed,
                    errorCode: row.errorCode, errorMessage: row.errorMessage)
                item.stoppedOrder = row.stoppedOrder
                state.withLock { state in
                    state.items[row.gid] = item
                    state.stopped.append(row.gid)
                    state.stoppedCount = max(state.stoppedCount, row.stoppedOrder ?? 0)
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
                    defaults: [:], root: root)
            } catch {
                item = Item(
                    gid: row.gid, uris: uris, options: row.options,
                    request: DownloadRequest(
                        url: uris.first ?? URL(fileURLWithPath: "/"),
                        destination: .directory(URL(fileURLWithPath: root))))
                item.withheldSecrets = row.withheldSecrets
                item.rank = row.rank
                let failure = DownloadError(.invalidRequest, message: error.message, url: item.request.url)
                state.withLock { state in
                    state.items[row.gid] = item
                    if let item = Self.end(row.gid, with: .failure(failure), in: &state) { ended.append(item) }
                }
                continue
            }
            item = Item(gid: row.gid, uris: plan.uris, options: plan.options, request: plan.request)
            item.rank = row.rank
            let handle = queue.add(plan.request)
            if row.state == "paused" { handle.pause() }
            item.handle = handle
            let finished = state.withLock { state -> Item? in
                state.items[row.gid] = item
                state.nextRank = max(state.nextRank, row.rank + 1)
                if let early = state.early.removeValue(forKey: handle.id) {
                    return Self.end(row.gid, with: early, in: &state)
                }
                state.byDownload[handle.id] = row.gid
                return nil
            }
            if let finished { ended.append(finished) }
        }
        if !ended.isEmpty { try store.save(ended.map(Self.row)) }
    }
}
