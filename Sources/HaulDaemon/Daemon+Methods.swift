import Foundation
import Haul
import HTTPTypes

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// aria2's methods over the queue.
extension Daemon {
    // MARK: - Adding

    /// `addUri(uris, options?, position?)`: the URIs are mirrors of one file.
    func addUri(_ arguments: Arguments) throws(RPCError) -> JSON {
        try addUris([arguments.params])[0].get()
    }

    /// A run of consecutive `addUri` calls (a batch, or a `system.multicall` of many), each call's parameters in
    /// order: answered as the calls one by one would be, but recorded a few hundred at a time, each group in one
    /// transaction, so that a run of thousands costs a few commits rather than one each. A group's downloads start
    /// once it is recorded, while the next is read.
    func addUris(_ calls: [[JSON]]) -> [Result<JSON, RPCError>] {
        var results: [Result<JSON, RPCError>] = []
        results.reserveCapacity(calls.count)
        // One listing of each destination directory serves the whole run, as `haul get`'s serves its list: a listing
        // per group would read the names the earlier groups' downloads just wrote (and past its budget, read them
        // only to give up, each download then looking its file up itself).
        var listing = DestinationSnapshot.Listing(budget: 4 * calls.count)
        var lastPlan: LastPlan?
        var start = 0
        while start < calls.count {
            let group = calls[start..<min(start + Self.addGroup, calls.count)]
            start = group.endIndex
            var planned: [Result<(plan: DownloadPlan, position: Int64?), RPCError>] = []
            for params in group {
                do throws(RPCError) {
                    planned.append(
                        .success(try addition(Arguments(method: "aria2.addUri", params: params), after: &lastPlan)))
                } catch {
                    planned.append(.failure(error))
                }
            }
            let added = add(planned.compactMap { try? $0.get() }, listing: &listing)
            var next = added.startIndex
            for plan in planned {
                switch plan {
                case .success:
                    results.append(added[next].map { .string($0.description) })
                    next += 1
                case .failure(let error): results.append(.failure(error))
                }
            }
        }
        return results
    }

    /// How many `addUri` calls of a run are recorded together.
    static let addGroup = 256

    /// The plan of the last `addUri` of a run, and what it was made from (see
    /// ``DownloadPlan/reused(for:options:defaults:)``).
    struct LastPlan {
        var options: [String: [String]]
        var defaults: [String: String]
        var plan: DownloadPlan
    }

    /// The plan and position of one `addUri` call; `last` is the plan of the call before it in the run (or `nil`),
    /// reused when its options are the same, and becomes this one's.
    private func addition(
        _ arguments: Arguments, after last: inout LastPlan?
    ) throws(RPCError) -> (plan: DownloadPlan, position: Int64?) {
        guard let list = arguments.optional(0)?.array, !list.isEmpty else { throw RPCError("No URI to download.") }
        let uris = try list.map { value throws(RPCError) -> String in
            guard let uri = value.string else { throw .invalidParams("aria2.addUri: each URI must be a string") }
            return uri
        }
        let options = try arguments.options(1)
        let position = arguments.optional(2) == nil ? nil : try arguments.int(2, "position")
        if let position, position < 0 { throw .invalidParams("aria2.addUri: position must be 0 or more") }
        return (try plan(uris: uris, options: options, after: &last), position)
    }

    /// The plan of a download of `uris` with `options` over the global options in force.
    func plan(uris: [String], options: [String: [String]]) throws(RPCError) -> DownloadPlan {
        var none: LastPlan?
        return try plan(uris: uris, options: options, after: &none)
    }

    /// ``plan(uris:options:)``, reusing `last` (the plan made before it in a run) when its defaults are the same and
    /// its options too but for each call's own (``DownloadPlan/reused(for:options:defaults:)``); the plan made becomes
    /// `last`.
    private func plan(
        uris: [String], options: [String: [String]], after last: inout LastPlan?
    ) throws(RPCError) -> DownloadPlan {
        let defaults = state.withLock { $0.globalOptions }
        if let last, last.defaults == defaults, DownloadPlan.sameSettings(last.options, options),
            let plan = try last.plan.reused(for: uris, options: options, defaults: defaults)
        {
            return plan
        }
        let plan = try DownloadPlan(
            uris: uris, options: options, defaults: defaults, root: root, base: queue.downloader.configuration)
        last = LastPlan(options: options, defaults: defaults, plan: plan)
        return plan
    }

    /// Adds the downloads `additions` describe, each at its position in the waiting order if it has one, as that
    /// many `addUri` calls one after another would; returns each one's GID, or why it was not added. They are
    /// recorded in the store together, before any of them can start and before this returns: an add the caller was
    /// told of survives a kill, and a failed write adds none of them. `listing` tells which destinations were absent
    /// when their directories were listed (the caller's, shared by the groups of one run, its budget a few names per
    /// addition).
    func add(
        _ additions: [(plan: DownloadPlan, position: Int64?)], listing: inout DestinationSnapshot.Listing
    ) -> [Result<GID, RPCError>] {
        var results: [Result<GID, RPCError>?] = []
        var made: Set<String> = []
        var given: Set<GID> = []
        for (plan, _) in additions {
            do throws(RPCError) {
                // The destination's directories are made now, inside the root (the plan checked every name).
                let directory = plan.directory
                if !made.contains(directory) {
                    try makeDirectories(directory)
                    made.insert(directory)
                }
                // One stopped long ago is only in the store (read before the lock is taken: no disk under it).
                if let gid = plan.gid {
                    guard try item(gid) == nil, given.insert(gid).inserted else {
                        throw RPCError("GID \(gid) is not unique.")
                    }
                }
                results.append(nil)
            } catch {
                results.append(.failure(error))
            }
        }
        // Kept in memory, in order, under one lock; none once the daemon stops (``stop()`` waits for the queue to
        // empty, which a download added after its cancellation would keep from happening).
        let kept = state.withLock { state -> [(index: Int, item: Item)]? in
            guard !state.closing else { return nil }
            var kept: [(index: Int, item: Item)] = []
            for (index, (plan, _)) in additions.enumerated() where results[index] == nil {
                var gid = plan.gid ?? GID.random()
                if plan.gid != nil {
                    guard state.items[gid] == nil else {
                        results[index] = .failure(RPCError("GID \(gid) is not unique."))
                        continue
                    }
                } else {
                    while state.items[gid] != nil { gid = GID.random() }
                }
                var item = Item(
                    gid: gid, uris: plan.uris.map(\.absoluteString), options: plan.storedOptions, request: plan.request)
                item.withheldSecrets = plan.withholdsSecrets
                item.rank = state.nextRank
                state.nextRank += 1
                state.keep(item)
                kept.append((index, item))
            }
            return kept
        }
        guard let kept else {
            let closing = RPCError("haul daemon is shutting down")
            return Self.answered(results.map { $0 ?? .failure(closing) })
        }
        // Recorded before any is answered or started.
        if let store = configuration.store, !kept.isEmpty {
            do {
                try store.save(
                    kept.map { index, item in
                        var row = Self.row(item)
                        if additions[index].plan.paused { row.state = "paused" }
                        return row
                    })
            } catch {
                state.withLock { state in for (_, item) in kept { state.items[item.gid] = nil } }
                let failure = RPCError("cannot record the download: \(error)")
                for (index, _) in kept { results[index] = .failure(failure) }
                return Self.answered(results)
            }
        }
        // Into the queue as the calls came, a stretch of them at a time (those paused alike, with no position): the
        // destinations of those that start now listed once per directory, as `haul get` does with its list, so that
        // each download does not look its file up again as it starts (a directory of more than a few names per add is
        // not listed: reading it would cost more than the look-ups it saves).
        var moved: [Int] = []
        var unpaused: [(index: Int, gid: GID)] = []
        var next = kept.startIndex
        while next < kept.endIndex {
            let paused = additions[kept[next].index].plan.paused
            var end = next + 1
            if additions[kept[next].index].position == nil {
                while end < kept.endIndex, additions[kept[end].index].position == nil,
                    additions[kept[end].index].plan.paused == paused
                {
                    end += 1
                }
            }
            let stretch = kept[next..<end]
            next = end
            // Announced before they can start (a start is announced by the queue's event).
            if !paused { for (_, item) in stretch { notify("haul.onDownloadWaiting", item.gid) } }
            let requests = stretch.map { additions[$0.index].plan.request }
            let handles = queue.add(
                requests, absentPaths: paused ? requests.map { _ in nil } : requests.map { listing.absentPath(of: $0) },
                paused: paused)
            // Stopping began after they were kept: the stop's cancellation may have come before them, so they are
            // cancelled here (stored, they come back with the next start).
            if state.withLock({ $0.closing }) { for handle in handles { handle.cancel() } }
            for ((index, item), handle) in zip(stretch, handles) {
                results[index] = .success(item.gid)
                guard attach(handle, to: item.gid) else { continue }
                if !paused { unpaused.append((index, item.gid)) }
                if let position = additions[index].position {
                    handle.move(toPosition: Int(clamping: position))
                    moved.append(index)
                }
            }
        }
        if !moved.isEmpty {
            // Each call that gave a position hears of a failure to store the order (its download is added).
            do throws(RPCError) {
                try persistOrder()
            } catch {
                for index in moved { results[index] = .failure(error) }
            }
        }
        // A pauseAll between an add into the queue and the attachment of its GID paused a download it could not name:
        // stored as the queue has it.
        if !unpaused.isEmpty {
            do throws(RPCError) {
                try syncPaused(unpaused.map(\.gid), onlyPaused: true)
            } catch {
                for (index, _) in unpaused { results[index] = .failure(error) }
            }
        }
        return Self.answered(results)
    }

    /// Each addition's result; every one has one by then (a missing one would say so rather than stop the daemon).
    private static func answered(_ results: [Result<GID, RPCError>?]) -> [Result<GID, RPCError>] {
        results.map { $0 ?? .failure(RPCError("the download was not added")) }
    }

    /// The directory a download to `destination` writes its file in.
    static func directory(of destination: Destination) -> String {
        switch destination {
        case .directory(let directory, _): directory.path
        case .file(let file): Aria2Status.directory(of: file.path)
        }
    }

    /// Makes `path` (inside the root) and the directories between, one by one: an existing one that is a symbolic link
    /// is followed only when it leads to a place inside the root, so nothing is ever made outside it. Not `creating`,
    /// only checks the directories there are.
    func makeDirectories(_ path: String, creating: Bool = true) throws(RPCError) {
        guard path != root else { return }
        guard path.hasPrefix(root + "/") else { throw RPCError("'\(path)' is outside the download root") }
        var current = root
        for component in path.dropFirst(root.count + 1).split(separator: "/") {
            current += "/" + component
            var info = stat()
            if lstat(current, &info) == 0 {
                if info.st_mode & S_IFMT == S_IFLNK {
                    guard let real = realpath(current, nil) else {
                        throw RPCError("the directory '\(relative(current))' cannot be read")
                    }
                    let resolved = String(cString: real)
                    free(real)
                    guard resolved == root || resolved.hasPrefix(root + "/") else {
                        throw RPCError("the directory '\(relative(current))' leads out of the download root")
                    }
                    continue
                }
                guard info.st_mode & S_IFMT == S_IFDIR else {
                    throw RPCError("'\(relative(current))' is there and is not a directory")
                }
                continue
            }
            guard creating else { return }
            guard mkdir(current, 0o755) == 0 || errno == EEXIST else {
                throw RPCError(
                    "cannot create the directory '\(relative(current))': \(String(cString: strerror(errno)))")
            }
        }
    }

    /// `path` as the root sees it.
    func relative(_ path: String) -> String {
        path == root ? "." : path.hasPrefix(root + "/") ? String(path.dropFirst(root.count + 1)) : path
    }

    // MARK: - Finding a download

    /// The download a GID or a unique prefix of one names.
    func gid(_ arguments: Arguments, _ index: Int = 0) throws(RPCError) -> GID {
        let text = try arguments.string(index, "gid")
        guard !text.isEmpty, text.utf8.count <= 16, text.allSatisfy(\.isHexDigit) else {
            throw RPCError("Invalid GID \(text)")
        }
        let prefix = text.lowercased()
        // A whole GID is looked up, not matched against every one; the store is asked whether it holds it only (the
        // method reads the download itself).
        var matches: Set<GID>
        if text.utf8.count == 16, let gid = GID(hex: prefix) {
            if state.withLock({ $0.items[gid] != nil }) { return gid }
            matches = []
        } else {
            matches = Set(state.withLock { $0.items.keys.filter { $0.description.hasPrefix(prefix) } })
        }
        if matches.count < 2, let store = configuration.store {
            do {
                matches.formUnion(try store.stoppedGIDs(prefix: prefix, limit: 2))
            } catch {
                throw RPCError("cannot read the download history: \(error)")
            }
        }
        guard let first = matches.first else { throw RPCError("GID \(text) is not found") }
        guard matches.count == 1 else { throw RPCError("GID \(text) is not unique") }
        return first
    }

    private func handle(of gid: GID) throws(RPCError) -> DownloadHandle {
        guard let handle = state.withLock({ $0.items[gid]?.handle }) else {
            throw RPCError("Active Download not found for GID#\(gid)")
        }
        return handle
    }

    // MARK: - Removing, pausing

    func remove(_ arguments: Arguments) throws(RPCError) -> JSON {
        let gid = try gid(arguments)
        guard state.withLock({ $0.items[gid]?.handle }) != nil else {
            throw RPCError("Active Download not found for GID#\(gid)")
        }
        // Stored before it is answered: its end is written only once its run has stopped, which a kill or a shutdown
        // may come before, and a removed download must not come back with a restart.
        try record { try $0.update(ranks: [], states: [gid: Daemon.removingState]) }
        let handle = try state.withLock { state -> Result<DownloadHandle, RPCError> in
            guard let handle = state.items[gid]?.handle else {
                return .failure(RPCError("Active Download not found for GID#\(gid)"))
            }
            state.items[gid]?.removing = true
            state.touch(gid)
            return .success(handle)
        }.get()
        handle.cancel()
        return .string(gid.description)
    }

    func pause(_ arguments: Arguments) throws(RPCError) -> JSON {
        let gid = try gid(arguments)
        let handle = try handle(of: gid)
        // Whether it ran is told by the pause itself: read before, it would miss a start in between.
        guard let wasRunning = queue.pauseTellingRunning(handle.id) else {
            throw RPCError("GID#\(gid) cannot be paused now")
        }
        state.withLock { $0.touch(gid) }
        // A running one goes to the front of the waiting order; as in aria2, only its pause is announced.
        if wasRunning {
            notify("aria2.onDownloadPause", gid)
            try persistOrder(syncing: [gid])
        } else {
            try syncPaused([gid])
        }
        return .string(gid.description)
    }

    /// Pauses or resumes every download; returns "OK".
    func pauseAll(_ paused: Bool) throws(RPCError) -> JSON {
        // Those it stops while they run are told by the pause itself (as in ``pause(_:)``).
        var running: [DownloadID] = []
        if paused {
            running = queue.pauseAllTellingRunning().running
        } else {
            queue.resumeAll()
        }
        let (gids, announced) = state.withLock { state in
            let gids = Array(state.byDownload.values)
            for gid in gids { state.touch(gid) }
            return (gids, running.compactMap { state.byDownload[$0] })
        }
        if paused { for gid in announced { notify("aria2.onDownloadPause", gid) } }
        // Stored as the queue has each now: a download added meanwhile, after the queue's pause, is not paused.
        try persistOrder(syncing: gids)
        return "OK"
    }

    func unpause(_ arguments: Arguments) throws(RPCError) -> JSON {
        let gid = try gid(arguments)
        let handle = try handle(of: gid)
        guard handle.status.state == .paused else { throw RPCError("GID#\(gid) cannot be unpaused now") }
        // Announced (haul.onDownloadWaiting) by the queue's event as it is resumed, before it can start again.
        guard handle.resume() else { throw RPCError("GID#\(gid) cannot be unpaused now") }
        state.withLock { $0.touch(gid) }
        try syncPaused([gid])
        return .string(gid.description)
    }

    func changePosition(_ arguments: Arguments) throws(RPCError) -> JSON {
        let gid = try gid(arguments)
        let offset = try arguments.int(1, "pos")
        let how = try arguments.string(2, "how")
        let handle = try handle(of: gid)
        guard let current = handle.status.position else {
            throw RPCError("GID#\(gid) not found in the waiting queue.")
        }
        let waiting = queue.waitingOrderCount
        let target: Int64
        switch how {
        case "POS_SET": target = offset
        // Saturating: a client's offset may be as large as an Int64 goes.
        case "POS_CUR": target = Self.saturatingSum(Int64(current), offset)
        case "POS_END": target = Self.saturatingSum(Int64(waiting - 1), offset)
        default: throw .invalidParams("aria2.changePosition: how must be POS_SET, POS_CUR or POS_END, not \(how)")
        }
        guard let moved = handle.move(toPosition: Int(clamping: max(0, target))) else {
            throw RPCError("GID#\(gid) not found in the waiting queue.")
        }
        try persistOrder()
        return .int(Int64(moved))
    }

    // MARK: - Status

    func tellStatus(_ arguments: Arguments) throws(RPCError) -> JSON {
        let gid = try gid(arguments)
        let keys = try arguments.strings(1, "keys")
        guard let item = try item(gid) else { throw RPCError("GID \(gid) is not found") }
        return Aria2Status.object(item, status: item.handle?.status, keys: keys)
    }

    func tellActive(_ arguments: Arguments) throws(RPCError) -> JSON {
        let keys = try arguments.strings(0, "keys")
        // A download stopping for a pause is still active, as in aria2, until its run has stopped.
        return listed(queue.runningStatuses(), keys: keys)
    }

    /// `tellWaiting(offset, num, keys?)` and `tellStopped`: aria2's pages, a negative offset counting from the end
    /// with the page reversed.
    func tellList(_ arguments: Arguments, stopped: Bool) throws(RPCError) -> JSON {
        let offset = try arguments.int(0, "offset")
        let count = try arguments.int(1, "num")
        guard count >= 0 else { throw .invalidParams("\(arguments.method): num must be 0 or more") }
        let keys = try arguments.strings(2, "keys")
        if stopped {
            let (total, version) = state.withLock { ($0.stoppedTotal, $0.stoppedVersion) }
            if let page = stoppedPage.withLock({ $0 }), page.version == version, page.offset == offset,
                page.count == count, page.keys == keys
            {
                return page.answer
            }
            // Only the page's items are taken: the history has no cap.
            let items = try stoppedItems(Self.page(total, offset: offset, count: count))
            let ordered = offset < 0 ? items.reversed() : items
            let answer = Aria2Status.list(ordered.lazy.map { ($0, nil) }, keys: keys)
            // Kept with the version it was made from: a download that stopped meanwhile makes it out of date.
            stoppedPage.withLock {
                $0 = StoppedPage(offset: offset, count: count, keys: keys, version: version, answer: answer)
            }
            return answer
        }
        // Only the page's statuses are made: clients ask for 1,000 of many thousands every second.
        let statuses = queue.waitingStatuses { Self.page($0, offset: offset, count: count) }
        return listed(offset < 0 ? statuses.reversed() : statuses, keys: keys)
    }

    /// The indices of aria2's page of `count` items from `offset` in a list of `size` (its `getPaginationRange`).
    static func page(_ size: Int, offset: Int64, count: Int64) -> Range<Int> {
        guard count > 0 else { return 0..<0 }
        var offset = offset
        var count = count
        let size = Int64(size)
        if offset < 0 {
            let fromEnd = offset + size
            guard fromEnd >= 0 else { return 0..<0 }
            offset = fromEnd - (count - 1)
            if offset < 0 {
                offset = 0
                count = fromEnd + 1
            }
        } else if size <= offset {
            return 0..<0
        }
        // Counted against what is left: a client's count may be as large as an Int64 goes.
        return Int(offset)..<Int(offset + min(count, size - offset))
    }

    /// `left + right`, held at the ends of `Int64` instead of trapping.
    static func saturatingSum(_ left: Int64, _ right: Int64) -> Int64 {
        let (sum, overflow) = left.addingReportingOverflow(right)
        return overflow ? (right > 0 ? .max : .min) : sum
    }

    /// The status objects of the queue's downloads the daemon knows.
    private func listed(_ statuses: [DownloadStatus], keys: [String]?) -> JSON {
        let items = state.withLock { state in
            statuses.map { status in state.byDownload[status.id].flatMap { state.items[$0] } }
        }
        return Aria2Status.list(
            zip(items, statuses).lazy.compactMap { item, status in item.map { ($0, status) } }, keys: keys)
    }

    func getUris(_ arguments: Arguments) throws(RPCError) -> JSON {
        let gid = try gid(arguments)
        guard let item = try item(gid) else { throw RPCError("GID \(gid) is not found") }
        var output: [UInt8] = []
        Aria2Status.writeURIs(item.uris, to: &output)
        return .encoded(EncodedJSON(output))
    }

    func getFiles(_ arguments: Arguments) throws(RPCError) -> JSON {
        let gid = try gid(arguments)
        guard let item = try item(gid) else { throw RPCError("GID \(gid) is not found") }
        return Aria2Status.object(item, status: item.handle?.status, keys: ["files"]).object?["files"] ?? []
    }

    /// `changeUri(gid, fileIndex, delUris, addUris[, position])`: a waiting download's mirrors, changed as aria2
    /// changes them: each of `delUris` removed once (as given, or as getUris shows it), then `addUris` put at
    /// `position` (0 first; at the end without one). Its first URI, which it is known by, stays. Answers how many were
    /// removed and added.
    func changeUri(_ arguments: Arguments) throws(RPCError) -> JSON {
        let gid = try gid(arguments)
        let file = try arguments.int(1, "fileIndex")
        guard file == 1 else {
            throw RPCError("The parameter fileIndex is out of bound: \(file) (a download has one file)")
        }
        guard let deleted = try arguments.strings(2, "delUris") else {
            throw .badParameter("aria2.changeUri: parameter 3 (delUris) must be an array of strings")
        }
        guard let added = try arguments.strings(3, "addUris") else {
            throw .badParameter("aria2.changeUri: parameter 4 (addUris) must be an array of strings")
        }
        let position = try arguments.optional(4).map { _ throws(RPCError) in try arguments.int(4, "position") }
        if let position, position < 0 { throw RPCError("Position must be greater than or equal to 0.") }
        let handle = try handle(of: gid)
        return try holding(downloadChanges) { () throws(RPCError) in
            try changeUris(of: gid, handle: handle, removing: deleted, adding: added, at: position)
        }
    }

    /// ``changeUri(_:)``'s change, under ``downloadChanges``.
    private func changeUris(
        of gid: GID, handle: DownloadHandle, removing deleted: [String], adding added: [String], at position: Int64?
    ) throws(RPCError) -> JSON {
        guard let item = state.withLock({ $0.items[gid] }) else { throw RPCError("GID \(gid) is not found") }
        var uris = item.uris
        var removed = 0
        for uri in deleted {
            // As given, or as getUris shows it: without its user info, or with its password hidden.
            guard
                let index = uris.firstIndex(where: {
                    $0 == uri || Self.withoutUserInfo($0) == uri || URL(string: $0)?.redactedString == uri
                })
            else { continue }
            uris.remove(at: index)
            removed += 1
        }
        uris.insert(contentsOf: added, at: position.map { Int(clamping: min($0, Int64(uris.count))) } ?? uris.count)
        guard removed > 0 || !added.isEmpty else { return [0, 0] }
        guard uris.first == item.uris.first else {
            throw RPCError("the first URI of \(gid) cannot change in haul daemon: remove the download and add it again")
        }
        try replan(
            handle, uris: uris, options: DownloadPlan.replannable(item.options),
            refusal: "the URIs of \(gid) cannot change while it runs in haul daemon; pause it first")
        // A mirror's user and password are not stored either: a restart cannot use it as it was added.
        let stored = uris.map(Self.withoutUserInfo)
        let withheld = item.withheldSecrets || stored != uris
        let changed = state.withLock { state -> Bool in
            guard state.items[gid] != nil else { return false }
            state.items[gid]?.uris = uris
            state.items[gid]?.withheldSecrets = withheld
            state.touch(gid)
            return true
        }
        if changed { try record { try $0.updateURIs(of: gid, to: stored, withheldSecrets: withheld) } }
        return [.int(Int64(removed)), .int(Int64(added.count))]
    }

    /// `getServers(gid)`: the source an active download is fetched from.
    func getServers(_ arguments: Arguments) throws(RPCError) -> JSON {
        let gid = try gid(arguments)
        let handle = try handle(of: gid)
        let status = handle.status
        guard status.state == .running else { throw RPCError("No active download for GID#\(gid)") }
        let uri = JSON.string(status.request.url.redactedString)
        let server: JSON = [
            "uri": uri, "currentUri": uri, "downloadSpeed": .string(String(Int64(status.progress.bytesPerSecond))),
        ]
        return [["index": "1", "servers": [server]]]
    }

    // MARK: - Options

    func getOption(_ arguments: Arguments) throws(RPCError) -> JSON {
        let gid = try gid(arguments)
        guard let item = try item(gid) else { throw RPCError("GID \(gid) is not found") }
        var options = Aria2Status.shown(item.options)
        // The request it runs, or once it has ended the one its options plan.
        let base = queue.downloader.configuration
        let status = item.handle?.status
        let request =
            status?.request
            ?? (try? DownloadPlan(
                uris: item.uris, options: DownloadPlan.replannable(item.options), defaults: [:], root: root,
                base: base))?.request
        // The options given show as given; the others as in force.
        if let request {
            options.merge(DownloadPlan.inForce(request, base: base).mapValues(JSON.string)) { given, _ in given }
        }
        // The limit changes while it runs (changeOption).
        if let status { options["max-download-limit"] = .string(String(status.maxBytesPerSecond ?? 0)) }
        return .object(options)
    }

    /// The options a waiting download's settings may change to with `changeOption`, beside its speed limit (which
    /// changes also while it runs). Its credentials, proxy and header lines stay as it was added; its directory and
    /// name change only while it holds no bytes.
    static let changeableWhileWaiting: Set<String> = [
        "dir", "out", "split", "max-connection-per-server", "min-split-size", "lowest-speed-limit", "max-tries",
        "retry-wait", "timeout", "connect-timeout", "user-agent", "referer", "allow-overwrite", "auto-file-renaming",
        "checksum", "conditional-get", "remote-time", "check-certificate",
    ]

    /// `changeOption(gid, options)`: the speed limit changes at once, also while the download runs; the settings of
    /// ``changeableWhileWaiting`` (and aria2's options Haul has no use for, shown back) while it waits. Every option is
    /// checked before any applies.
    func changeOption(_ arguments: Arguments) throws(RPCError) -> JSON {
        let gid = try gid(arguments)
        let options = try arguments.options(1)
        let handle = try handle(of: gid)
        var settings: [String: [String]] = [:]
        for (name, values) in options.sorted(by: { $0.key < $1.key }) where name != "max-download-limit" {
            guard Aria2Options.known.contains(name) else { throw RPCError("No such option: \(name)") }
            guard Self.changeableWhileWaiting.contains(name) || DownloadPlan.isInert(name) else {
                throw RPCError(
                    "option \(name) cannot be changed once a download is added in haul daemon: remove it and add it again"
                )
            }
            settings[name] = values
        }
        let limit = try options["max-download-limit"]?.last.map { value throws(RPCError) in
            (value, try DownloadPlan.byteCount(value, option: "max-download-limit"))
        }
        // One change of a download at a time: each plans from the options the one before left.
        try holding(downloadChanges) { () throws(RPCError) in
            let status = handle.status
            let before = (
                request: status.request, limit: status.maxBytesPerSecond, item: state.withLock { $0.items[gid] }
            )
            var changed: [String: String] = [:]
            if !settings.isEmpty {
                try changeSettings(of: gid, handle: handle, to: settings)
                changed = settings.mapValues { $0.joined(separator: "\n") }
            }
            if let (value, bytes) = limit {
                handle.setMaxBytesPerSecond(bytes == 0 ? nil : bytes)
                changed["max-download-limit"] = value
            }
            guard !changed.isEmpty else { return }
            let item = state.withLock { state -> Item? in
                state.items[gid]?.options.merge(changed) { _, new in new }
                state.touch(gid)
                return state.items[gid]
            }
            guard item != nil else { return }
            do throws(RPCError) {
                // Its options only: a whole row written from this copy would undo a removal or an end stored meanwhile.
                try record { try $0.updateOptions(of: gid, setting: changed) }
            } catch {
                // Not kept, so undone: what runs and shows is what the next start brings back.
                if before.request.destination != handle.status.request.destination {
                    try? queue.moveWaitingDownload(handle.id, to: before.request)
                } else {
                    _ = queue.replaceWaitingRequest(of: handle.id, with: before.request)
                }
                if limit != nil { handle.setMaxBytesPerSecond(before.limit) }
                state.withLock { state in
                    guard let kept = before.item, var item = state.items[gid] else { return }
                    item.options = kept.options
                    (item.shownDirectory, item.shownFile) = (kept.shownDirectory, kept.shownFile)
                    state.items[gid] = item
                }
                throw error
            }
        }
        return "OK"
    }

    /// Gives the waiting download `gid` the settings its options with `settings` plan (under ``downloadChanges``);
    /// with `dir` or `out` among them, it moves to its new file.
    private func changeSettings(
        of gid: GID, handle: DownloadHandle, to settings: [String: [String]]
    ) throws(RPCError) {
        guard let item = state.withLock({ $0.items[gid] }) else { throw RPCError("GID \(gid) is not found") }
        let moves = settings["dir"] != nil || settings["out"] != nil
        let request = try replan(
            handle, uris: item.uris,
            options: DownloadPlan.replannable(item.options).merging(settings) { _, new in new },
            moving: moves ? gid : nil,
            refusal: "the settings of \(gid) cannot change while it runs in haul daemon (its max-download-limit can); "
                + "pause it first")
        guard moves else { return }
        let (directory, path) = Aria2Status.destination(of: request)
        state.withLock { state in
            guard var moved = state.items[gid] else { return }
            moved.shownDirectory = state.intern(directory)
            moved.shownFile = ""
            moved.show(path)
            state.items[gid] = moved
        }
    }

    /// Gives the waiting download of `handle` the settings and mirrors a plan of `uris` with `options` has, and when
    /// `moving` (its GID) its destination; its credentials, proxy and header lines stay its own (see
    /// ``DownloadPlan/request(_:withSettingsOf:)``). A download that runs is refused with `refusal`. Returns the
    /// request it now has.
    @discardableResult
    private func replan(
        _ handle: DownloadHandle, uris: [String], options: [String: [String]], moving gid: GID? = nil,
        refusal: @autoclosure () -> String
    ) throws(RPCError) -> DownloadRequest {
        let plan = try DownloadPlan(
            uris: uris, options: options, defaults: [:], root: root, base: queue.downloader.configuration)
        let status = handle.status
        let current = status.request
        var request = DownloadPlan.request(current, withSettingsOf: plan.request)
        guard let gid else {
            guard queue.replaceWaitingRequest(of: handle.id, with: request) else { throw RPCError(refusal()) }
            return request
        }
        request.destination = plan.request.destination
        let directory = Self.directory(of: request.destination)
        try makeDirectories(directory, creating: false)
        let path = Aria2Status.destination(of: request).path
        let taken = state.withLock { state in
            state.items.values.contains { $0.gid != gid && $0.ending == nil && !$0.removing && $0.shownPath == path }
        }
        guard !taken else { throw RPCError("another download already goes to \(relative(path))") }
        // What the queue would refuse is refused before any directory is made; the directories are there before the
        // download can start into them.
        guard status.state == .waiting || status.state == .paused else { throw RPCError(refusal()) }
        guard status.progress.bytesWritten == 0 else { throw Self.holdsBytes }
        try makeDirectories(directory)
        do {
            try queue.moveWaitingDownload(handle.id, to: request)
        } catch {
            switch error {
            case .notWaiting, .otherDownload: throw RPCError(refusal())
            case .destinationTaken: throw RPCError("another download already goes to \(relative(path))")
            case .holdsBytes: throw Self.holdsBytes
            }
        }
        return request
    }

    /// The refusal of a move of a download that holds bytes of its file.
    private static let holdsBytes = RPCError(
        "dir and out cannot change once a download holds bytes of its file in haul daemon: remove it and add it again")

    func getGlobalOption() -> JSON {
        let defaults = state.withLock { $0.globalOptions }
        var options = Aria2Status.shown(defaults)
        // What a download added now with no options of its own would run with.
        let base = queue.downloader.configuration
        if let request = try? DownloadPlan(
            uris: ["http://localhost/"], options: [:], defaults: defaults, root: root, base: base
        ).request {
            options.merge(DownloadPlan.inForce(request, base: base).mapValues(JSON.string)) { given, _ in given }
        }
        options["dir"] = .string(root)
        options["max-concurrent-downloads"] = .string(String(queue.maxConcurrentDownloads))
        options["max-overall-download-limit"] = .string(String(queue.downloader.maxBytesPerSecond ?? 0))
        return .object(options)
    }

    /// `changeGlobalOption(options)`: `max-concurrent-downloads` and `max-overall-download-limit` at once, also for
    /// the downloads running; the download options as defaults of the downloads added from now on. Every option is
    /// checked before any applies, and the change is kept (its secrets left out) before it is answered: the next
    /// start applies it again.
    func changeGlobalOption(_ arguments: Arguments) throws(RPCError) -> JSON {
        let change = try globalChange(arguments.options(0))
        // An option whose new value cannot be kept at all (a header of secrets only) is forgotten: the value it
        // replaced must not come back with the next start.
        let kept = DownloadPlan.withoutCredentials(change.given)
        try record { try $0.saveGlobalOptions(kept, removing: Set(change.given.keys).subtracting(kept.keys)) }
        apply(change)
        return "OK"
    }

    /// A change of global options, checked.
    struct GlobalChange {
        var concurrency: Int?
        /// The overall limit: `.some(nil)` lifts it.
        var overallLimit: Int64??
        /// Download options, as defaults of the downloads added from now on.
        var defaults: [String: String] = [:]
        /// Every option as given (a cumulative one's values joined by newlines).
        var given: [String: String] = [:]
    }

    /// Checks `options` as global options: a bad one is refused, naming it, before anything changes.
    func globalChange(_ options: [String: [String]]) throws(RPCError) -> GlobalChange {
        var change = GlobalChange()
        for (name, values) in options.sorted(by: { $0.key < $1.key }) {
            guard let value = values.last else { continue }
            change.given[name] = values.joined(separator: "\n")
            switch name {
            case "max-concurrent-downloads":
                guard let number = Int(value), number >= 1 else {
                    throw RPCError("max-concurrent-downloads must be a number of 1 or more, not '\(value)'")
                }
                change.concurrency = number
            case "max-overall-download-limit":
                let bytes = try DownloadPlan.byteCount(value, option: name)
                change.overallLimit = .some(bytes == 0 ? nil : bytes)
            case "dir":
                throw RPCError("the download root is set when the daemon starts; give dir to each download instead")
            default:
                change.defaults[name] = change.given[name]
            }
        }
        // The defaults are checked together over those in force, as a download's options would be, so a bad one is
        // refused now, not at the next add.
        if !change.defaults.isEmpty {
            let current = state.withLock { $0.globalOptions }
            _ = try DownloadPlan(
                uris: ["http://localhost/"], options: change.defaults.mapValues { $0.components(separatedBy: "\n") },
                defaults: current, root: root, base: queue.downloader.configuration)
        }
        return change
    }

    /// Applies a checked change of global options.
    func apply(_ change: GlobalChange) {
        if let concurrency = change.concurrency { queue.maxConcurrentDownloads = concurrency }
        if let limit = change.overallLimit { queue.downloader.setMaxBytesPerSecond(limit) }
        state.withLock { $0.globalOptions.merge(change.defaults) { _, new in new } }
    }

    // MARK: - Global

    /// Downloads by state, counted without walking the history: `active`, `waiting` (paused ones included) and
    /// `stopped` (the metrics' queue depth).
    public func depth() -> [(state: String, count: Int)] {
        let running = queue.progress.runningFiles
        let (pending, stopped) = state.withLock { state in (state.byDownload.count, state.stoppedTotal) }
        let active = min(running, pending)
        return [("active", active), ("waiting", pending - active), ("stopped", stopped)]
    }

    /// Every client polls it every second: counted from the queue's batch (its running downloads only) and the
    /// daemon's own items, without a status for each waiting download.
    func getGlobalStat() -> JSON {
        let batch = queue.progress
        let (pending, stopped) = state.withLock { state in
            // The downloads in the queue: counted without walking a history of any length.
            (state.byDownload.count, state.stoppedTotal)
        }
        let active = min(batch.runningFiles, pending)
        return [
            "downloadSpeed": .string(String(Int64(batch.bytesPerSecond))), "uploadSpeed": "0",
            "numActive": .string(String(active)), "numWaiting": .string(String(pending - active)),
            "numStopped": .string(String(stopped)), "numStoppedTotal": .string(String(stopped)),
        ]
    }

    func removeDownloadResult(_ arguments: Arguments) throws(RPCError) -> JSON {
        try holding(historyChanges) { () throws(RPCError) in try removeResult(arguments) }
    }

    /// ``removeDownloadResult(_:)`` under ``historyChanges``.
    private func removeResult(_ arguments: Arguments) throws(RPCError) -> JSON {
        let gid = try gid(arguments)
        guard try item(gid)?.ending != nil else { throw RPCError("Could not remove download result of GID#\(gid)") }
        // Gone from the store first: a download that is neither in memory nor stored is not counted.
        try record { try $0.save([], removing: [gid]) }
        state.withLock { state in
            state.trails[gid] = nil
            if state.items.removeValue(forKey: gid) != nil {
                state.stopped.removeAll { $0 == gid }
            } else {
                state.storedStopped -= 1
            }
            state.stoppedVersion += 1
            state.touch(gid)
        }
        return "OK"
    }

    func purgeDownloadResult() throws(RPCError) -> JSON {
        try holding(historyChanges) { () throws(RPCError) in try purgeResults() }
    }

    /// ``purgeDownloadResult()`` under ``historyChanges``.
    private func purgeResults() throws(RPCError) -> JSON {
        // The results there are now go, in the store too; one that ends from now on stays in both.
        let last = state.withLock { state in
            for gid in state.stopped {
                state.items[gid] = nil
                state.trails[gid] = nil
                state.touch(gid)
            }
            // Those only in the store are not named one by one: a subscription reads its lists again.
            if state.storedStopped > 0 { state.resyncSubscriptions() }
            state.stopped = []
            state.storedStopped = 0
            state.stoppedVersion += 1
            return state.stoppedCount
        }
        try record { try $0.purgeStopped(upTo: last) }
        return "OK"
    }
}
