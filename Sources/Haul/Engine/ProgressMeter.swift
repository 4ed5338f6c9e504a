/// Decides when a progress event is due (at most one per interval) and keeps a smoothed speed.
struct ProgressMeter {
    private let interval: Duration
    private var lastEmit: ContinuousClock.Instant
    private var windowStart: ContinuousClock.Instant
    private var windowBytes: Int64 = 0
    private(set) var bytesPerSecond: Double = 0

    init(interval: Duration, now: ContinuousClock.Instant = .now) {
        self.interval = interval
        lastEmit = now
        windowStart = now
    }

    /// Records `count` new bytes; returns `true` when a progress event should be sent now.
    mutating func record(_ count: Int, now: ContinuousClock.Instant) -> Bool {
        windowBytes += Int64(count)
        let window = now - windowStart
        if window >= .milliseconds(250) {
            let instant = Double(windowBytes) / window.seconds
            // Exponential smoothing over roughly a second: steady enough to draw, quick to follow changes.
            bytesPerSecond = bytesPerSecond == 0 ? instant : bytesPerSecond * 0.75 + instant * 0.25
            windowStart = now
            windowBytes = 0
        }
        guard now - lastEmit >= interval else { return false }
        lastEmit = now
        return true
    }
}
