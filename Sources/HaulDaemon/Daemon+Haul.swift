import Foundation
import Haul

/// Haul's own methods beside aria2's (listed in `getVersion`'s `enabledFeatures`): per-host limits and pausing a
/// host, and the whole history, paged and searched on the daemon.
extension Daemon {
    // MARK: - Hosts

    /// The host an argument names: an origin (`https://example.org`) or any URL of it, as the queue counts hosts.
    func host(_ arguments: Arguments, _ index: Int = 0) throws(RPCError) -> String {
        let text = try arguments.string(index, "host")
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme),
            url.host?.isEmpty == false
        else { throw RPCError("'\(text)' is not a host such as https://example.org") }
        return DownloadQueue.hostKey(for: url)
    }

    /// `haul.getHosts()`: each host with downloads running or waiting, or with a setting of its own: `host`,
    /// `numActive`, `numWaiting`, `maxConnections` (its limit, empty for none), `ownLimit` (`true` when it has one of
    /// its own), `paused`, `downloadSpeed` (its running downloads' bytes per second) and `oldestWait` (the seconds its
    /// longest-waiting download has waited since it was added, `0` with none waiting).
    func getHosts() -> JSON {
        let settings = state.withLock { $0.hosts }
        let perHost = queue.perHostLimit
        var speeds: [String: Double] = [:]
        for status in queue.runningStatuses() where status.state == .running {
            speeds[DownloadQueue.hostKey(for: status.request.url), default: 0] += status.progress.bytesPerSecond
        }
        let waiting = queue.waitingStatuses(0..<queue.waitingCount).filter { $0.state == .waiting }
        let now = ContinuousClock.now
        let oldest = state.withLock { state in
            var oldest: [String: ContinuousClock.Instant] = [:]
            for status in waiting {
                guard let added = state.byDownload[status.id].flatMap({ state.items[$0] })?.addedAt else { continue }
                let host = DownloadQueue.hostKey(for: status.request.url)
                oldest[host] = min(oldest[host] ?? added, added)
            }
            return oldest
        }
        return .array(
            queue.hostStatuses().map { status in
                let own = settings[status.host]
                // A paused host shows the limit it goes back to.
                let limit = own?.limit ?? perHost
                let waited = oldest[status.host].map { (now - $0).components.seconds } ?? 0
                return [
                    "host": .string(status.host), "numActive": .string(String(status.running)),
                    "numWaiting": .string(String(status.waiting)),
                    "maxConnections": .string(limit.map(String.init) ?? ""),
                    "ownLimit": own?.limit == nil ? "false" : "true", "paused": own?.paused == true ? "true" : "false",
                    "downloadSpeed": .string(String(Int64(speeds[status.host] ?? 0))),
                    "oldestWait": .string(String(waited)),
                ]
            })
    }

    /// `haul.changeHostOption(host, {"max-connections": N})`: the most downloads running at once against the host,
    /// in place of `--per-host` (an empty value returns it to that). Takes effect at once; kept across restarts.
    func changeHostOption(_ arguments: Arguments) throws(RPCError) -> JSON {
        let host = try host(arguments)
        let options = try arguments.options(1)
        for name in options.keys where name != "max-connections" {
            throw RPCError("No such host option: \(name) (haul.changeHostOption takes max-connections)")
        }
        guard let value = options["max-connections"]?.last else { return "OK" }
        var limit: Int?
        if !value.isEmpty {
            guard let number = Int(value), number >= 1 else {
                throw RPCError("max-connections must be a number of 1 or more, or empty for none, not '\(value)'")
            }
            limit = number
        }
        try changeHost(host) { $0.limit = limit }
        return "OK"
    }

    /// `haul.pauseHost(host)` and `haul.unpauseHost(host)`: the host's waiting downloads are held back (running
    /// ones go on), or let go again under its limit. Kept across restarts.
    func pauseHost(_ arguments: Arguments, _ paused: Bool) throws(RPCError) -> JSON {
        let host = try host(arguments)
        try changeHost(host) { $0.paused = paused }
        return "OK"
    }

    /// Changes the settings of `host`: stored before they apply (and before the call is answered). One change at a
    /// time: two calls at once (a limit and a pause of one host) each start from what the other left.
    private func changeHost(_ host: String, _ change: (inout HostSettings) -> Void) throws(RPCError) {
        try hostChanges.withLock { changes -> Result<Void, RPCError> in
            var settings = state.withLock { $0.hosts[host] } ?? HostSettings()
            change(&settings)
            do throws(RPCError) {
                try record { try $0.saveHost(host, limit: settings.limit, paused: settings.paused) }
            } catch {
                return .failure(error)
            }
            apply(settings, to: host)
            changes += 1
            return .success(())
        }.get()
    }

    /// Gives the queue what `settings` say of `host`.
    func apply(_ settings: HostSettings, to host: String) {
        state.withLock { $0.hosts[host] = settings.isDefault ? nil : settings }
        queue.setLimit(settings.paused ? 0 : settings.limit, forHost: host)
    }

    // MARK: - History

    /// `haul.tellHistory(offset, num, filter?, keys?)`: the stopped downloads, newest first, without aria2's cap;
    /// `filter` may hold `query` (found in the file's name or any of its URIs, case ignored), `status` (a list of
    /// `complete`, `error`, `removed`) and `sort` (`newest`, the default, `oldest`, `path` or `size`; a leading `-`
    /// reverses `path` and `size`). Answers `{"total": N, "downloads": [...]}`, `total` counting every match.
    func tellHistory(_ arguments: Arguments) throws(RPCError) -> JSON {
        let (offset, count, query, statuses, sort) = try listing(
            arguments, statuses: ["complete", "error", "removed"], sorts: ["newest", "oldest", "path", "size"])
        let keys = try arguments.strings(3, "keys")
        var order = DaemonStore.HistoryOrder.newest
        switch sort?.key {
        case "oldest": order = .init(key: .stopped, descending: false)
        case "path": order = .init(key: .path, descending: sort?.descending ?? false)
        case "size": order = .init(key: .size, descending: sort?.descending ?? false)
        default: break
        }
        let (total, page) = try history(offset: offset, count: count, statuses: statuses, query: query, order: order)
        return [
            "total": .string(String(total)),
            "downloads": Aria2Status.list(page.lazy.map { ($0, nil) }, keys: keys),
        ]
    }

    /// `haul.tellQueue(offset, num, filter?, keys?)`: the downloads not stopped, running ones first and then the
    /// waiting order, as `tellActive` and `tellWaiting` list them but in one list that can be searched: `filter` may
    /// hold `query` (as ``tellHistory(_:)``'s), `status` (a list of `active`, `waiting`, `paused`) and `sort`
    /// (`position`, the default, `name`, `size` or `progress`; a leading `-` reverses it). Answers
    /// `{"total": N, "downloads": [...]}`, `total` counting every match.
    func tellQueue(_ arguments: Arguments) throws(RPCError) -> JSON {
        let (offset, count, query, statuses, sort) = try listing(
            arguments, statuses: ["active", "waiting", "paused"], sorts: ["position", "name", "size", "progress"])
        let keys = try arguments.strings(3, "keys")
        let all = queue.runningStatuses() + queue.waitingStatuses(0..<queue.waitingCount)
        var matches = state.withLock { state -> [(Item, DownloadStatus)] in
            var matches: [(Item, DownloadStatus)] = []
            // The two lists are read one after the other: one that started between them shows once.
            var seen = Set<GID>()
            for status in all {
                guard let gid = state.byDownload[status.id], seen.insert(gid).inserted, let item = state.items[gid]
                else { continue }
                if let statuses, !statuses.contains(Aria2Status.name(of: status)) { continue }
                if !query.isEmpty, !Self.matches(item.shownPath, item.options, item.uris, query) { continue }
                matches.append((item, status))
            }
            return matches
        }
        if let sort, sort.key != "position" {
            matches = Self.stablySorted(matches, descending: sort.descending) { Self.sortKey(sort.key, $0) }
        } else if sort?.descending == true {
            matches.reverse()
        }
        let page = matches.dropFirst(offset).prefix(count)
        return [
            "total": .string(String(matches.count)),
            "downloads": Aria2Status.list(page.lazy.map { ($0.0, $0.1) }, keys: keys),
        ]
    }

    /// `items` ordered by `key`, each item's key made once, ascending or `descending`; ties keep their order (the
    /// queue's, or the newest first), so that a page is always the same page.
    private static func stablySorted<Element, Key: Comparable>(
        _ items: [Element], descending: Bool, by key: (Element) -> Key
    ) -> [Element] {
        let keyed = items.enumerated().map { (index: $0.offset, key: key($0.element), item: $0.element) }
        return keyed.sorted { left, right in
            if left.key != right.key { return descending ? left.key > right.key : left.key < right.key }
            return left.index < right.index
        }.map(\.item)
    }

    /// What a listing's sort key compares for one download.
    private enum SortKey: Comparable {
        case text(String)
        case number(Double)
    }

    private static func sortKey(_ key: String, _ match: (Item, DownloadStatus)) -> SortKey {
        let (item, status) = match
        switch key {
        case "name":
            // Before the response names it: its `out`, or the last part of its URL's path.
            let name =
                item.shownFile.isEmpty
                ? item.options["out"] ?? item.uris.first.flatMap(URL.init(string:))?.lastPathComponent ?? ""
                : (item.shownPath as NSString).lastPathComponent
            return .text(name.lowercased())
        case "size": return .number(Double(status.progress.totalBytes ?? -1))
        default: return .number(status.progress.fractionCompleted ?? 0)
        }
    }

    /// A listing's parameters: offset and count, then the filter's query (lowercased), statuses (checked against
    /// `statuses`) and sort (checked against `sorts`, a leading `-` for the reverse order).
    private func listing(_ arguments: Arguments, statuses known: Set<String>, sorts: Set<String>) throws(RPCError) -> (
        offset: Int, count: Int, query: String, statuses: Set<String>?, sort: (key: String, descending: Bool)?
    ) {
        let method = arguments.method
        let offset = try arguments.int(0, "offset")
        let count = try arguments.int(1, "num")
        guard offset >= 0, count >= 0 else { throw .invalidParams("\(method): offset and num must be 0 or more") }
        let filter = try arguments.options(2)
        for name in filter.keys where !["query", "status", "sort"].contains(name) {
            throw .invalidParams("\(method): the filter takes query, status and sort, not \(name)")
        }
        let statuses = filter["status"].map(Set.init)
        if let statuses, !statuses.isSubset(of: known) {
            throw .invalidParams("\(method): status must be one of \(known.sorted().joined(separator: ", "))")
        }
        var sort: (key: String, descending: Bool)?
        if let value = filter["sort"]?.last {
            let key = value.hasPrefix("-") ? String(value.dropFirst()) : value
            guard sorts.contains(key) else {
                throw .invalidParams(
                    "\(method): sort must be one of \(sorts.sorted().joined(separator: ", ")) (- before it to reverse), not \(value)"
                )
            }
            sort = (key, value.hasPrefix("-"))
        }
        return (Int(offset), Int(count), filter["query"]?.last?.lowercased() ?? "", statuses, sort)
    }

    /// The stopped downloads that match, in `order`: how many, and the page from `offset`.
    private func history(
        offset: Int, count: Int, statuses: Set<String>?, query: String, order: DaemonStore.HistoryOrder
    ) throws(RPCError) -> (Int, [Item]) {
        guard let store = configuration.store else {
            return state.withLock { state in
                var matches: [Item] = []
                for gid in state.stopped.reversed() {
                    guard let item = state.items[gid], let ending = item.ending else { continue }
                    if let statuses, !statuses.contains(ending.status) { continue }
                    if !query.isEmpty, !Self.matches(item.shownPath, item.options, item.uris, query) { continue }
                    matches.append(item)
                }
                switch order.key {
                case .stopped: if !order.descending { matches.reverse() }
                case .path:
                    matches = Self.stablySorted(matches, descending: order.descending) { $0.shownPath.lowercased() }
                case .size:
                    matches = Self.stablySorted(matches, descending: order.descending) { $0.ending?.length ?? 0 }
                }
                return (matches.count, Array(matches.dropFirst(offset).prefix(count)))
            }
        }
        if statuses == nil, query.isEmpty, order.key == .stopped {
            // The page counted from the end for the newest first, from the start for the oldest.
            let total = state.withLock { $0.stoppedTotal }
            // A client's count may be as large as an Int goes: counted against what is left, it cannot overflow.
            let start = min(offset, total)
            if !order.descending { return (total, try stoppedItems(start..<start + min(count, total - start))) }
            let end = max(0, total - offset)
            let items = try stoppedItems(max(0, end - count)..<end)
            return (total, items.reversed())
        }
        // Every stopped download is stored as it stops: the search reads the store, narrowed there first.
        do {
            let (total, page) = try store.history(
                states: statuses, holding: query, order: order, offset: offset, limit: count
            ) {
                Self.matches($0.path ?? "", $0.options, $0.uris, query)
            }
            return (total, page.map(stoppedItem))
        } catch {
            throw RPCError("cannot read the download history: \(error)")
        }
    }

    /// Whether `query` (lowercased) is in the name of the file at `path` (its `out` option while it has none) or
    /// in one of its URIs.
    private static func matches(_ path: String, _ options: [String: String], _ uris: [String], _ query: String) -> Bool
    {
        let name = path.isEmpty ? options["out"] ?? "" : (path as NSString).lastPathComponent
        if name.lowercased().contains(query) { return true }
        return uris.contains { $0.lowercased().contains(query) }
    }
}

/// What a user set for one host.
struct HostSettings: Sendable, Hashable {
    /// Its own limit, in place of `--per-host`.
    var limit: Int?
    /// Whether its downloads are held back.
    var paused = false

    var isDefault: Bool { limit == nil && !paused }
}
