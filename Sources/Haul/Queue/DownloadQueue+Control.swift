public import Foundation
import HaulOperations
import Synchronization

/// One download at a time: pause and resume it, move it in the waiting order, change its speed limit while it runs,
/// and read where it stands. What a download service built on the queue (`haul daemon`) drives it with.
extension DownloadQueue {
    /// Pauses one download: a waiting one keeps its place in the waiting order and is not admitted until
    /// ``resume(_:)``; a running one stops and goes back to the front of the waiting order, paused. Its partial file is
    /// kept for the resume where the engine can resume it: the downloader has a journal, and the server gave a
    /// validator for a body above 64 KiB (smaller ones are fetched again whole). A download that finishes or fails as
    /// it is paused ends as usual. Publishes ``QueueEvent/paused(_:)``.
    ///
    /// A paused download counts as waiting: ``waitUntilIdle()`` waits for it, and its handle's result comes once it
    /// has been resumed and has ended (or was cancelled).
    ///
    /// - Returns: `false` when the download is not in the queue (it ended, or was never added), or is ending after a
    ///   cancellation; `true` when it is paused now, or was already.
    @discardableResult
    public func pause(_ id: DownloadID) -> Bool { pauseTellingRunning(id) != nil }

    /// ``pause(_:)``, telling whether this pause stopped the download while it ran (`nil`: it is not in the queue, or
    /// is ending after a cancellation).
    /// Told in the same hold of the lock as the pause, so it is right even when the download starts or ends meanwhile:
    /// a service announces the pause of a running download only (as aria2 does).
    package func pauseTellingRunning(_ id: DownloadID) -> Bool? {
        let (running, effects) = mutate { state -> (Bool?, SideEffects) in
            var effects = SideEffects()
            let running = pause(id.rawValue, in: &state, effects: &effects)
            return (running, effects)
        }
        effects.run()
        return running
    }

    /// ``pause(_:)`` under the lock: `nil` when the download is not in the queue or is ending after a cancellation,
    /// `true` when it ran and is now stopping, `false` when it waited or was paused already. The caller runs `effects`
    /// (the cancellation of a running one's task) after it.
    private func pause(_ id: UInt64, in state: inout State, effects: inout SideEffects) -> Bool? {
        // A cancelled one still running has a task that is ending: pausing it would put it back in the waiting order
        // once it stops, never to end unless resumed and run again.
        guard let entry = state.entries[id], !entry.cancelled else { return nil }
        guard !entry.paused else { return false }
        let running = !state.scheduler.pause(id)
        if running {
            // Its run keeps its partial and, once stopped, goes back to waiting (``requeue``).
            entry.requeues = true
            entry.control.requestPause()
            if let task = entry.task?.cancel() { effects.cancellations.append(task) }
        }
        entry.paused = true
        if state.wants(.paused) { state.publish(.paused(DownloadID(rawValue: id))) }
        return running
    }

    /// Resumes a paused download: it waits for a slot again from its place in the waiting order (a download paused
    /// while it ran is at the front). Publishes ``QueueEvent/resumed(_:)``.
    ///
    /// - Returns: `false` when the download is not in the queue, or is ending after a cancellation; `true` when it
    ///   waits or runs now.
    @discardableResult
    public func resume(_ id: DownloadID) -> Bool {
        mutate { state in
            guard unpause(id.rawValue, in: &state) != nil else { return false }
            admit(in: &state)
            return true
        }
    }

    /// ``resume(_:)`` under the lock, but for the admission the caller makes: `nil` when the download is not in the
    /// queue or is ending after a cancellation, `false` when it was not paused.
    private func unpause(_ id: UInt64, in state: inout State) -> Bool? {
        guard let entry = state.entries[id], !entry.cancelled else { return nil }
        guard entry.paused else { return false }
        entry.paused = false
        // One still stopping goes back as waiting, not paused, once it has stopped.
        state.scheduler.unpause(id)
        if state.wants(.resumed) { state.publish(.resumed(DownloadID(rawValue: id))) }
        return true
    }

    /// Pauses every download in the queue (see ``pause(_:)``), and returns how many it paused. All are paused at once:
    /// none of those waiting starts in the slot a running one frees. Downloads added afterwards are not paused
    /// (``pause()`` holds back admission for all of them instead).
    @discardableResult
    public func pauseAll() -> Int { pauseAllTellingRunning().count }

    /// ``pauseAll()``, telling which downloads it stopped while they ran, in the same hold of the lock as the pause
    /// (see ``pauseTellingRunning(_:)``).
    package func pauseAllTellingRunning() -> (count: Int, running: [DownloadID]) {
        // In one hold of the lock: paused one at a time, a running one could stop before the rest are paused, and
        // its slot admit one of them.
        let (count, running, effects) = mutate { state -> (Int, [DownloadID], SideEffects) in
            var effects = SideEffects()
            var running: [DownloadID] = []
            let count = state.entries.keys.sorted().count { id in
                guard let wasRunning = pause(id, in: &state, effects: &effects) else { return false }
                if wasRunning { running.append(DownloadID(rawValue: id)) }
                return true
            }
            return (count, running, effects)
        }
        effects.run()
        return (count, running)
    }

    /// Resumes every paused download (see ``resume(_:)``) and returns how many. All are resumed before any is admitted:
    /// they start in their waiting order.
    @discardableResult
    public func resumeAll() -> Int {
        // Admitted once all are resumed: one at a time, the first resumed could take a slot that one before it in the
        // waiting order, resumed next, should have had.
        mutate { state in
            let count = state.entries.keys.sorted().count { unpause($0, in: &state) == true }
            admit(in: &state)
            return count
        }
    }

    /// Moves a waiting or paused download to `position` in the waiting order (0 is admitted first), among the
    /// downloads of its own priority: a position before them puts it first among them, one after them last. A
    /// download that is running, or ended, cannot move.
    ///
    /// - Returns: its new position, or `nil` when it is not waiting or paused.
    @discardableResult
    public func move(_ id: DownloadID, toPosition position: Int) -> Int? {
        locked { state in
            guard state.entries[id.rawValue] != nil else { return nil }
            let moved = state.scheduler.reposition(id.rawValue, to: position)
            if moved != nil { admit(in: &state) }
            return moved
        }
    }

    /// Sets one download's own speed limit in bytes per second (at least 1), or lifts it (`nil`), whether it waits or
    /// runs: a running download goes at the new rate from its next bytes, without a restart. The downloader's
    /// overall limit (``Downloader/Configuration/maxBytesPerSecond``) still applies.
    ///
    /// - Precondition: `limit` is `nil` or at least 1.
    /// - Returns: `false` when the download is not in the queue.
    @discardableResult
    public func setMaxBytesPerSecond(_ limit: Int64?, of id: DownloadID) -> Bool {
        precondition((limit ?? 1) >= 1, "a speed limit must be at least 1 byte per second, not \(limit ?? 0)")
        guard let control = locked({ $0.entries[id.rawValue]?.control }) else { return false }
        control.setMaxBytesPerSecond(limit)
        return true
    }

    /// Gives a download that waits (paused or not) `request` in place of its own: new settings for its run, which must
    /// keep what the queue knows it by (its URL, destination and expected size); its priority and speed limit stay the
    /// queue's (``setPriority(_:of:)``, ``setMaxBytesPerSecond(_:of:)``). The journal's record of it is left as it
    /// was. A download that runs, or ended, keeps its request.
    ///
    /// - Returns: `false` when the download is not waiting, or `request` is for another URL, destination or size.
    package func replaceWaitingRequest(of id: DownloadID, with request: DownloadRequest) -> Bool {
        let key = JournalKey(request)
        return locked { state in
            guard let entry = state.entries[id.rawValue], entry.task == nil,
                entry.request.expectedSize == request.expectedSize, JournalKey(entry.request) == key
            else { return false }
            var request = request
            request.priority = entry.request.priority
            entry.request = request
            entry.replaced = true
            return true
        }
    }

    /// Why ``moveWaitingDownload(_:to:)`` left a download where it was.
    package enum MoveRefusal: Error, Equatable {
        /// It runs, or ended.
        case notWaiting
        /// The new request is for another URL or expected size.
        case otherDownload
        /// Another download of the queue is for that URL and file.
        case destinationTaken
        /// It holds bytes of its file (a run kept them for a pause, or the journal has a partial of an earlier run),
        /// which belong to the file it was for.
        case holdsBytes
    }

    /// Gives a download that waits (paused or not) and holds no bytes `request`, for the same URL and expected size
    /// and another destination, with new settings as ``replaceWaitingRequest(of:with:)`` gives them: it starts into
    /// its new file. With ``Configuration/recordsRequests``, the journal's record of its request moves with it (one the
    /// journal has for the new file already, a partial an earlier run left there say, is kept, as an add keeps it).
    package func moveWaitingDownload(_ id: DownloadID, to request: DownloadRequest) throws(MoveRefusal) {
        let journal = downloader.configuration.journal
        guard let current = locked({ $0.entries[id.rawValue]?.request }) else { throw .notWaiting }
        let oldKey = JournalKey(current)
        let newKey = JournalKey(request)
        // A partial an earlier run left for it (the journal is read without the queue's lock).
        if let journal, case .partial = journal.record(for: oldKey)?.state { throw .holdsBytes }
        // Recorded for its new file before it is moved there: a cancellation from then on finds that record to forget
        // (a record written after the move could outlive a cancellation made in between).
        let records = recordsRequests ? journal : nil
        var recorded = false
        if let records, oldKey != newKey, records.record(for: newKey).map({ $0.state.isFailure }) ?? true {
            records.store(JournalRecord(key: newKey, path: "", state: .requested, request: request))
            recorded = true
        }
        let key = JoinKey(url: request.url, destination: request.destination)
        let refusal = locked { state -> MoveRefusal? in
            guard let entry = state.entries[id.rawValue], entry.task == nil else { return .notWaiting }
            guard entry.request.url == request.url, entry.request.expectedSize == request.expectedSize else {
                return .otherDownload
            }
            let held = entry.progress?.withLock { $0?.bytesWritten ?? 0 } ?? 0
            // Moved meanwhile, its journal's record was not the one read: refused as one that may hold bytes.
            guard !entry.keptPartialForPause, held == 0, JournalKey(entry.request) == oldKey else { return .holdsBytes }
            if let other = state.joined[key], other != id.rawValue { return .destinationTaken }
            Self.leaveJoin(entry, id: id.rawValue, in: &state)
            state.joined[key] = id.rawValue
            entry.joinKey = key
            entry.absentPath = nil
            // A cancelled download of that file still ending: this one starts once it has let the file go.
            entry.predecessor = state.ending[key]?.outcome
            var request = request
            request.priority = entry.request.priority
            entry.request = request
            entry.replaced = true
            return nil
        }
        guard let records, oldKey != newKey else {
            if let refusal { throw refusal }
            return
        }
        if let refusal {
            if recorded, case .requested = records.record(for: newKey)?.state { records.remove(newKey) }
            throw refusal
        }
        if case .requested = records.record(for: oldKey)?.state { records.remove(oldKey) }
    }

    /// The key a download's host is counted by for per-host limits: its origin, `scheme://host:port` (the port
    /// written out: `https://example.org:443`).
    public static func hostKey(for url: URL) -> String { originKey(for: url) }

    /// Sets the most downloads running at once against one host (``hostKey(for:)``), in place of
    /// ``perHostLimit``: 0 holds its downloads back (the host is paused; running ones go on), `nil` returns it to
    /// ``perHostLimit``. Downloads the new limit lets start are admitted at once.
    ///
    /// - Precondition: `limit` is `nil` or at least 0.
    public func setLimit(_ limit: Int?, forHost host: String) {
        precondition((limit ?? 0) >= 0, "a host's limit must be at least 0, not \(limit ?? 0)")
        locked { state in
            state.scheduler.setLimit(limit, forHost: host)
            admit(in: &state)
        }
    }

    /// Every host with downloads running or waiting, and every host with a limit of its own: how many run, how many
    /// wait (paused ones not counted), and its limit. Counted over the waiting downloads: for a view, not for every
    /// download.
    public func hostStatuses() -> [HostStatus] {
        let loads = locked { state in (state.scheduler.hostLoads(), state.scheduler.perHostLimit) }
        return loads.0.map { load in
            HostStatus(
                host: load.host, running: load.running, waiting: load.waiting, ownLimit: load.limit,
                limit: load.limit ?? loads.1)
        }
    }

    /// Where one download stands, or `nil` when it is not in the queue (it ended: its handle's
    /// ``DownloadHandle/status`` still tells how).
    public func status(of id: DownloadID) -> DownloadStatus? {
        locked { state in
            state.entries[id.rawValue].map { status(of: id.rawValue, $0, position: nil, in: state) }
        }
    }

    /// Whether each of `ids` still in the queue is paused (one that ended is left out), read in one hold of the lock and
    /// without the work of a whole status.
    package func pausedStates(of ids: [DownloadID]) -> [DownloadID: Bool] {
        locked { state in
            var paused: [DownloadID: Bool] = [:]
            for id in ids {
                if let entry = state.entries[id.rawValue] { paused[id] = entry.paused }
            }
            return paused
        }
    }

    /// Every download in the queue: the running ones (oldest first), then the waiting and paused ones in the waiting
    /// order, their ``DownloadStatus/position`` counting from 0.
    public func statuses() -> [DownloadStatus] {
        locked { state in runningStatuses(in: state) + waitingStatuses(0..<Int.max, in: state) }
    }

    /// The running downloads, oldest first: cheaper than ``statuses()`` when many wait.
    public func runningStatuses() -> [DownloadStatus] {
        locked { state in runningStatuses(in: state) }
    }

    /// The waiting and paused downloads at `positions` of the waiting order (0 is admitted first; positions past
    /// the end are left out): a page of ``statuses()`` without a status for every other download.
    public func waitingStatuses(_ positions: Range<Int>) -> [DownloadStatus] {
        locked { state in waitingStatuses(positions, in: state) }
    }

    /// The waiting and paused downloads at the positions `page` picks from the length of the waiting order, both read
    /// in one hold of the lock: for a page counted from the end (``waitingCount`` also counts the extra connections
    /// of split files waiting for a slot, which are not in the order).
    package func waitingStatuses(page: (_ length: Int) -> Range<Int>) -> [DownloadStatus] {
        locked { state in waitingStatuses(page(state.scheduler.waitingOrderCount), in: state) }
    }

    /// The length of the waiting order that ``waitingStatuses(_:)`` pages: the waiting and paused downloads.
    package var waitingOrderCount: Int { locked { $0.scheduler.waitingOrderCount } }

    private func runningStatuses(in state: State) -> [DownloadStatus] {
        var ids: [UInt64] = []
        for id in state.scheduler.runningIDs where state.entries[id] != nil && !state.scheduler.isWaiting(id) {
            ids.append(id)
        }
        // A download gone on from a source at another origin holds (or waits for) a slot numbered apart there
        // (``Connections/move(to:)``): it is under way all the same.
        ids += state.slots.keys.filter { state.entries[$0] != nil }
        return ids.sorted().compactMap { id in
            state.entries[id].map { status(of: id, $0, position: nil, in: state) }
        }
    }

    private func waitingStatuses(_ positions: Range<Int>, in state: State) -> [DownloadStatus] {
        let order = state.scheduler.waitingOrder()
        let page = positions.clamped(to: 0..<order.count)
        var result: [DownloadStatus] = []
        result.reserveCapacity(page.count)
        for position in page {
            guard let entry = state.entries[order[position]] else { continue }
            result.append(status(of: order[position], entry, position: position, in: state))
        }
        return result
    }

    /// `entry`'s status; its position is `known`, or counted when it waits.
    private func status(of id: UInt64, _ entry: Entry, position known: Int?, in state: State) -> DownloadStatus {
        let waiting = state.scheduler.isWaiting(id)
        let position = waiting ? known ?? state.scheduler.position(of: id) : nil
        // Admitted (its transfer may still be stopping for a pause: then it shows as paused).
        let running = !waiting && !entry.paused
        let current = entry.progress?.withLock { $0 }
        let progress = DownloadProgress(
            bytesWritten: current?.bytesWritten ?? 0, totalBytes: current?.totalBytes ?? entry.request.expectedSize,
            bytesPerSecond: running ? current?.bytesPerSecond ?? 0 : 0)
        return DownloadStatus(
            id: DownloadID(rawValue: id), request: entry.request,
            state: entry.paused ? .paused : running ? .running : .waiting, position: position, progress: progress,
            connections: running ? 1 + entry.control.extraConnections.load(ordering: .relaxed) : 0,
            maxBytesPerSecond: entry.control.maxBytesPerSecond)
    }
}
