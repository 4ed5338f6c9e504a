import Foundation
import HaulOperations

/// Grants the extra connections of a download fetched over several (segments): whoever runs the download decides
/// how many may open. A ``DownloadQueue`` counts each against its global and per-host limits, like a download.
protocol ConnectionBroker: Sendable {
    /// Waits until one more connection to the origin of `url` may open. Returns what gives the slot back (call it
    /// once the connection is closed or back in the transport's pool), or `nil` when the calling task was cancelled
    /// first.
    func acquire(for url: URL) async -> (@Sendable () -> Void)?
}

extension DownloadQueue {
    /// The extra connections of one admitted download: each waits in the queue's scheduler before every waiting
    /// download of its priority (it finishes a file already begun), and counts like one once admitted.
    struct Connections: ConnectionBroker {
        let queue: DownloadQueue
        let priority: Int

        func acquire(for url: URL) async -> (@Sendable () -> Void)? {
            let queue = self.queue
            let (id, box) = queue.mutate { state -> (UInt64, ResultBox<Bool>) in
                // Numbered apart from downloads, whose numbers stay 1, 2, 3... in the order added (a display names
                // downloads by them).
                state.nextConnectionID += 1
                let id = State.connectionIDs | state.nextConnectionID
                let box = ResultBox<Bool>()
                state.connections[id] = box
                state.scheduler.enqueue(id, host: DownloadQueue.hostKey(for: url), priority: priority, ahead: true)
                queue.startAdmitted(in: &state)
                return (id, box)
            }
            let granted = await withTaskCancellationHandler {
                await box.wait()
            } onCancel: {
                queue.withdrawConnection(id)
            }
            let release: @Sendable () -> Void = { queue.releaseConnection(id) }
            guard granted, !Task.isCancelled else {
                if granted { release() }
                return nil
            }
            return release
        }
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
            startAdmitted(in: &state)
            effects.idleWaiters = takeIdleWaiters(in: &state)
            return effects
        }
        effects.run()
    }
}
