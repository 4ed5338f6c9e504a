import Foundation
import Haul

/// The stopped downloads: the newest ``stoppedInMemory`` (up to a quarter more) in memory, answered as aria2 answers
/// its own, every one in the store (when there is one), where older pages, a search and a GID of long ago are read
/// from. The history has no cap and its memory does not grow with it.
extension Daemon {
    /// How many stopped downloads are kept in memory besides the store: what clients poll every second
    /// (`tellStopped(-1, 1000)`, aria2's own `max-download-result`).
    static let stoppedInMemory = 1000

    /// The download `gid`, from memory or, once stopped long enough ago, from the store.
    func item(_ gid: GID) throws(RPCError) -> Item? {
        if let item = state.withLock({ $0.items[gid] }) { return item }
        guard let store = configuration.store else { return nil }
        do {
            return try store.stopped(gid).map(stoppedItem)
        } catch {
            throw RPCError("cannot read the download's history: \(error)")
        }
    }

    /// A download as the store holds it (its request is not kept: its file is shown in the root until a path is
    /// known).
    func storedItem(_ row: DaemonStore.Row) -> Item {
        var item = Item(
            gid: row.gid, uris: row.uris, options: row.options,
            request: DownloadRequest(
                url: Self.firstURL(of: row.uris), destination: .directory(URL(fileURLWithPath: root))))
        item.rank = row.rank
        item.withheldSecrets = row.withheldSecrets
        return item
    }

    /// The URL of the first of `uris` (the root of the file system for one that is not a URL).
    static func firstURL(of uris: [String]) -> URL {
        uris.first.flatMap { URL(string: $0) } ?? URL(fileURLWithPath: "/")
    }

    /// A stopped download as the store holds it.
    func stoppedItem(_ row: DaemonStore.Row) -> Item {
        var item = storedItem(row)
        item.ending = Ending(
            status: row.state, length: row.length, completed: row.completed, errorCode: row.errorCode,
            errorMessage: row.errorMessage)
        item.stoppedOrder = row.stoppedOrder
        if let path = row.path {
            item.shownDirectory = Aria2Status.directory(of: path)
            item.show(path)
        }
        return item
    }

    /// The stopped downloads at `indices` of all of them, oldest first: those in memory from there, older ones from
    /// the store.
    func stoppedItems(_ indices: Range<Int>) throws(RPCError) -> [Item] {
        let (stored, memory) = state.withLock { state -> (Int, [Item]) in
            let first = max(indices.lowerBound, state.storedStopped)
            let inMemory = first < indices.upperBound ? first..<indices.upperBound : first..<first
            return (
                state.storedStopped,
                inMemory.compactMap { state.items[state.stopped[$0 - state.storedStopped]] }
            )
        }
        guard indices.lowerBound < stored, let store = configuration.store else { return memory }
        do {
            let rows = try store.stopped(
                offset: indices.lowerBound, limit: min(indices.upperBound, stored) - indices.lowerBound)
            return rows.map(stoppedItem) + memory
        } catch {
            throw RPCError("cannot read the download history: \(error)")
        }
    }
}

extension Daemon.State {
    /// How many stopped downloads there are, in memory and in the store only.
    var stoppedTotal: Int { storedStopped + stopped.count }

    /// Leaves the oldest stopped downloads to the store, past ``Daemon/stoppedInMemory`` (when there is a store), once
    /// a quarter more have stopped: moving the newest thousand down in the list at every end cost a burst of small
    /// files a microsecond each.
    mutating func leaveOldStoppedToStore() {
        guard store != nil, stopped.count > Daemon.stoppedInMemory + Daemon.stoppedInMemory / 4 else { return }
        let old = stopped.count - Daemon.stoppedInMemory
        for gid in stopped[..<old] {
            items[gid] = nil
            trails[gid] = nil
        }
        stopped.removeFirst(old)
        storedStopped += old
    }
}
