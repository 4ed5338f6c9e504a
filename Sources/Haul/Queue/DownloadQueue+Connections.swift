import Foundation
import HaulOperations
import Synchronization

/// Grants the extra connections of a download fetched over several (segments): whoever runs the download decides
/// how many may open. A ``DownloadQueue`` counts each against its global and per-host limits, like a download.
protocol ConnectionBroker: Sendable {
    /// Waits until one more connection to the origin of `url` may open. Returns what gives the slot back (call it
    /// once the connection is closed or back in the transport's pool), or `nil` when the calling task was cancelled
    /// first.
    func acquire(for url: URL) async -> (@Sendable () -> Void)?

    /// Moves the download's own slot to the origin of `url`, the source it goes on from or where a redirect leads (it
    /// counts against the host it fetches from): at once when that origin has a free slot, else the download gives
    /// its slot back and waits for one there, before every waiting download of its priority (it never holds one slot
    /// while it waits for another). Returns `false` when the calling task was cancelled first.
    func move(to url: URL) async -> Bool
}

extension DownloadQueue {
    /// The extra connections of one admitted download: each waits in the queue's scheduler before every waiting
    /// download of its priority (it finishes a file already begun), and counts like one once admitted.
    struct Connections: ConnectionBroker {
        let queue: DownloadQueue
        /// The download's own number in the queue.
        let id: UInt64
        let priority: Int
        /// Counts the extra connections open (``DownloadStatus/connections``).
        let control: DownloadControl

        func acquire(for url: URL) async -> (@Sendable () -> Void)? {
            let queue = self.queue
            let (id, box) = queue.mutate { state -> (UInt64, ResultBox<Bool>) in
                // Numbered apart from downloads, whose numbers stay 1, 2, 3... in the order added (a display names
                // downloads by them).
                state.nextConnectionID += 1
                let id = State.connectionIDs | state.nextConnectionID
                let box = ResultBox<Bool>()
                state.connections[id] = box
                state.scheduler.enqueue(id, host: DownloadQueue.originKey(for: url), priority: priority, ahead: true)
                queue.admit(in: &state)
                return (id, box)
            }
            let granted = await withTaskCancellationHandler {
                await box.wait()
            } onCancel: {
                queue.withdrawConnection(id)
            }
            guard granted, !Task.isCancelled else {
                if granted { queue.releaseConnection(id) }
                return nil
            }
            let control = self.control
            control.extraConnections.add(1, ordering: .relaxed)
            return {
                control.extraConnections.subtract(1, ordering: .relaxed)
                queue.releaseConnection(id)
            }
        }

        func move(to url: URL) async -> Bool {
            let queue = self.queue
            let download = id
            let host = DownloadQueue.originKey(for: url)
            let waiting = queue.mutate { state -> (UInt64, ResultBox<Bool>)? in
                guard state.entries[download] != nil else { return nil }
                let slot = state.slots[download] ?? download
                if state.scheduler.move(slot, to: host) {
                    queue.admit(in: &state)
                    return nil
                }
                // No free slot there: the one held goes back (what it lets start, starts), and the download waits for one
                // at the new origin under a number of its own, ahead of the downloads waiting there.
                state.scheduler.finish(slot)
                state.movedSlots[slot] = nil
                state.nextConnectionID += 1
                let next = State.connectionIDs | state.nextConnectionID
                let box = ResultBox<Bool>()
                state.slots[download] = next
                state.movedSlots[next] = download
                state.moves[next] = box
                state.scheduler.enqueue(next, host: host, priority: priority, ahead: true)
                queue.admit(in: &state)
                return (next, box)
            }
            guard let (slot, box) = waiting else { return !Task.isCancelled }
            let granted = await withTaskCancellationHandler {
                await box.wait()
            } onCancel: {
                queue.withdrawMove(slot)
            }
            return granted && !Task.isCancelled
        }
    }
}

extension DownloadQueue {
    /// Takes a moving download's slot that is still waiting out of the scheduler and tells its waiter (after the
    /// lock); the download then holds no slot, and ends.
    func withdrawMove(_ slot: UInt64) {
        let box = mutate { state -> ResultBox<Bool>? in
            guard state.scheduler.remove(slot) else { return nil }
            return state.moves.removeValue(forKey: slot)
        }
        box?.resolve(false)
    }

    /// Takes a connection that is still waiting out of the scheduler and tells its waiter (after the lock).
    func withdrawConnection(_ id: UInt64) {
        let box = mutate { state -> ResultBox<Bool>? in
            guard state.scheduler.remove(id) else { return nil }
            return state.connections.removeValue(forKey: id)
        }
        box?.resolve(false)
    }

    /// Gives an extra connection's slot back and admits what it lets start.
    func releaseConnection(_ id: UInt64) {
        let effects = mutate { state -> SideEffects in
            var effects = SideEffects()
            guard state.connections.removeValue(forKey: id) != nil else { return effects }
            state.runningConnections -= 1
            state.scheduler.finish(id)
            admit(in: &state)
            effects.idleWaiters = takeIdleWaiters(in: &state)
            return effects
        }
        effects.run()
    }
}
