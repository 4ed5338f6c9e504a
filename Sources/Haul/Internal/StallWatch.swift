import HaulOperations

/// Watches every running attempt of one downloader for stalls with one ticking task.
///
/// An attempt registers its activity clock and what to do on a stall; one task checks them all at a fixed interval,
/// and ends when none is left. A watchdog task per attempt would cost a task group, a second task and a timer armed
/// and cancelled per attempt (bench/compare, s3).
final class StallWatch: Sendable {
    private struct Watched {
        let clock: ActivityClock
        let onStall: @Sendable () -> Void
    }

    private struct State {
        var watched: [Int: Watched] = [:]
        var nextToken = 0
        var ticking = false
    }

    private let state = Locked(State())
    /// Idle this long is a stall.
    let timeout: Duration
    private let interval: Duration

    init(timeout: Duration) {
        self.timeout = timeout
        interval = min(timeout / 4, .seconds(1))
    }

    /// Watches `clock` until ``stop(_:)`` is called with the returned token; `onStall` runs once (on the watch's
    /// task) if the clock stays idle for ``timeout``, and the clock is no longer watched after that.
    func watch(_ clock: ActivityClock, onStall: @escaping @Sendable () -> Void) -> Int {
        let (token, start) = state.withLock { state in
            let token = state.nextToken
            state.nextToken += 1
            state.watched[token] = Watched(clock: clock, onStall: onStall)
            defer { state.ticking = true }
            return (token, !state.ticking)
        }
        // Detached: the watch outlives the attempt that started it and belongs to no download.
        if start { Task.detached { await self.tick() } }
        return token
    }

    /// Stops watching the clock registered under `token`.
    func stop(_ token: Int) {
        _ = state.withLock { $0.watched.removeValue(forKey: token) }
    }

    private func tick() async {
        while true {
            try? await Task.sleep(for: interval)
            let stalled = state.withLock { state -> [Watched]? in
                if state.watched.isEmpty {
                    state.ticking = false
                    return nil
                }
                let idle = state.watched.filter { $0.value.clock.idle >= timeout }
                for token in idle.keys { state.watched.removeValue(forKey: token) }
                return Array(idle.values)
            }
            guard let stalled else { return }
            for watched in stalled { watched.onStall() }
        }
    }
}
