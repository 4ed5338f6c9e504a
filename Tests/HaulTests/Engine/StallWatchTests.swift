import Foundation
import HaulOperations
import HaulTestSupport
import Testing

@testable import Haul

/// The one ticking watch of a downloader's attempts, on activity clocks no transfer touches.
@Suite("Stall watch", .timeLimit(.minutes(1)))
struct StallWatchTests {
    /// Watches `clock` with `limits` on a watch whose stall timeout is 100 ms; the reasons it stopped for.
    private static func watch(
        _ clock: ActivityClock, limits: StallWatch.Limits = .init()
    ) -> (StallWatch, Int, Locked<[StallWatch.Reason]>) {
        let watch = StallWatch(timeout: .milliseconds(100))
        let reasons = Locked<[StallWatch.Reason]>([])
        let token = watch.watch(clock, limits: limits) { reason in reasons.withLock { $0.append(reason) } }
        return (watch, token, reasons)
    }

    @Test("an idle clock is stopped as stalled, once")
    func stalls() async throws {
        let clock = ActivityClock()
        let (watch, token, reasons) = Self.watch(clock)
        defer { watch.stop(token) }
        try await eventually("stopped") { !reasons.withLock { $0 }.isEmpty }
        try await Task.sleep(for: .milliseconds(300))
        #expect(reasons.withLock { $0 } == [.stalled])
    }

    @Test("a clock whose stalls are watched per connection is never stopped as stalled, until that ends")
    func stallsWatchedElsewhere() async throws {
        let clock = ActivityClock()
        clock.setStallsWatchedElsewhere(true)
        let (watch, token, reasons) = Self.watch(clock)
        defer { watch.stop(token) }
        // Idle for five stall timeouts and more.
        try await Task.sleep(for: .milliseconds(600))
        #expect(reasons.withLock { $0 }.isEmpty)
        let back = ContinuousClock.now
        clock.setStallsWatchedElsewhere(false)
        try await eventually("stopped") { !reasons.withLock { $0 }.isEmpty }
        #expect(reasons.withLock { $0 } == [.stalled])
        // Counted from the moment it was set back, not from the clock's last activity.
        #expect(ContinuousClock.now - back >= .milliseconds(100))
    }

    @Test("the time limit still stops a clock whose stalls are watched per connection")
    func deadlineStillApplies() async throws {
        let clock = ActivityClock()
        clock.setStallsWatchedElsewhere(true)
        let (watch, token, reasons) = Self.watch(
            clock, limits: StallWatch.Limits(deadline: .now + .milliseconds(200)))
        defer { watch.stop(token) }
        try await eventually("stopped") { !reasons.withLock { $0 }.isEmpty }
        #expect(reasons.withLock { $0 } == [.timedOut])
    }
}
