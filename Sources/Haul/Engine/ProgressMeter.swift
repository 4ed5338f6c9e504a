/// Decides when a progress event is due (at most one per interval) and keeps a smoothed speed.
struct ProgressMeter {
    private let interval: Duration
    private var lastEmit: ContinuousClock.Instant
    private var windowStart: ContinuousClock.Instant
    private var windowBytes: Int64 = 0
    /// Whether bytes were recorded since the last event was sent.
    private var unreported = false
    private(set) var bytesPerSecond: Double = 0

    init(interval: Duration, now: ContinuousClock.Instant = .now) {
        self.interval = interval
        lastEmit = now
        windowStart = now
    }

    /// Records `count` new bytes; returns `true` when a progress event should be sent now: an interval after the
    /// last, or at once when `first` (the first bytes of a body that does not end with them, so that a body that
    /// comes in a burst and then stalls is not shown as nothing received).
    mutating func record(_ count: Int, now: ContinuousClock.Instant, first: Bool = false) -> Bool {
        windowBytes += Int64(count)
        let window = now - windowStart
        if window >= .milliseconds(250) {
            let instant = Double(windowBytes) / window.seconds
            // Exponential smoothing over roughly a second: steady enough to draw, quick to follow changes.
            bytesPerSecond = bytesPerSecond == 0 ? instant : bytesPerSecond * 0.75 + instant * 0.25
            windowStart = now
            windowBytes = 0
        }
        guard first || now - lastEmit >= interval else {
            unreported = true
            return false
        }
        lastEmit = now
        unreported = false
        return true
    }

    /// Returns `true` when bytes were recorded that no event has told yet, counting the event as sent now: asked
    /// before a wait longer than the interval (a speed limit's), so the bytes already written do not go unseen for
    /// all of it.
    mutating func reportBeforeWaiting(now: ContinuousClock.Instant) -> Bool {
        guard unreported else { return false }
        lastEmit = now
        unreported = false
        return true
    }
}
