import HaulOperations

/// Watches every running attempt of one downloader with one ticking task: for stalls, for a transfer slower than
/// its minimum speed, and for a download past its time limit.
///
/// An attempt registers its activity clock and what to do when it must stop; one task checks them all at a fixed
/// interval, and ends when none is left. A watchdog task per attempt would cost a task group, a second task and a timer armed
/// and cancelled per attempt (bench/compare, s3).
final class StallWatch: Sendable {
    /// Why a watched attempt is stopped.
    enum Reason: Sendable {
        case stalled, tooSlow, timedOut
    }

    /// What an attempt is held to besides the stall timeout.
    struct Limits: Sendable {
        var minimumSpeed: MinimumSpeed?
        var deadline: ContinuousClock.Instant?
        /// The attempt's own stall timeout, in place of the watch's (a download's ``DownloadRequest/stallTimeout``).
        var stallTimeout: Duration?
    }

    private struct Watched {
        let clock: ActivityClock
        let limits: Limits
        let onStop: @Sendable (Reason) -> Void
        /// Where the window of the minimum speed starts: a time and the clock's byte count then (set at the first
        /// look, not per attempt watched: most have no minimum speed).
        var window: (start: ContinuousClock.Instant, bytes: Int64)?

        /// Why the attempt must stop at `now`, if it must; moves the speed window on.
        mutating func reason(now: ContinuousClock.Instant, timeout: Duration) -> Reason? {
            if let deadline = limits.deadline, now >= deadline { return .timedOut }
            let (last, bytes, stallsWatchedElsewhere) = clock.reading
            if !stallsWatchedElsewhere, now - last >= limits.stallTimeout ?? timeout { return .stalled }
            guard let minimum = limits.minimumSpeed else { return nil }
            // A wait the download itself chose (a bandwidth limit) is not slowness: the window starts after it.
            guard let window, last <= now else {
                window = (max(last, now), bytes)
                return nil
            }
            let elapsed = now - window.start
            if Double(bytes - window.bytes) >= Double(minimum.bytesPerSecond) * elapsed.seconds {
                self.window = (now, bytes)
                return nil
            }
            return elapsed >= minimum.duration ? .tooSlow : nil
        }
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
        interval = min(timeout / 4, .milliseconds(250))
    }

    /// Watches `clock` until ``stop(_:)`` is called with the returned token; `onStop` runs once (on the watch's
    /// task) if the clock stays idle for ``timeout`` or breaks one of `limits`, and the clock is no longer watched
    /// after that.
    func watch(
        _ clock: ActivityClock, limits: Limits = Limits(), onStop: @escaping @Sendable (Reason) -> Void
    ) -> Int {
        let (token, start) = state.withLock { state in
            let token = state.nextToken
            state.nextToken += 1
            state.watched[token] = Watched(clock: clock, limits: limits, onStop: onStop)
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
            let now = ContinuousClock.now
            let stopped = state.withLock { state -> [(Watched, Reason)]? in
                if state.watched.isEmpty {
                    state.ticking = false
                    return nil
                }
                var stopped: [(Watched, Reason)] = []
                for token in state.watched.keys {
                    guard let reason = state.watched[token]?.reason(now: now, timeout: timeout) else { continue }
                    if let watched = state.watched.removeValue(forKey: token) { stopped.append((watched, reason)) }
                }
                return stopped
            }
            guard let stopped else { return }
            for (watched, reason) in stopped { watched.onStop(reason) }
        }
    }
}
