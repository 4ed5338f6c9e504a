import HaulOperations
import Synchronization

/// A bandwidth limit that several downloads can share: a token bucket that fills at the rate and holds at most a
/// twentieth of a second of it, so a burst after a pause is short. Taking more than the bucket holds is allowed; the
/// taker then waits until the debt is paid, and the next taker waits behind it, which keeps the sum of all takers at
/// the rate however the bytes arrive (a 64 KiB chunk on a 1 KiB/s limit waits 64 s).
///
/// The rate can change while downloads take from it (``setRate(_:now:)``), and can be none: a download's own limit,
/// which its queue may set, lift or change while it runs, is always one of these.
final class TokenBucket: Sendable {
    private struct State {
        var rate: Double?
        var tokens: Double
        var updated: ContinuousClock.Instant

        var capacity: Double { max(1, (rate ?? 0) / 20) }
    }

    private let state: Locked<State>
    /// Whether there is a rate: read without the lock for every chunk received.
    private let limited: Atomic<Bool>
    /// Counts the rate's changes: a taker waiting out a debt looks again when it has changed.
    private let changes = Atomic<UInt64>(0)

    /// A bucket filling at `bytesPerSecond` (at least 1), or without a limit (`nil`).
    init(bytesPerSecond: Int64?, now: ContinuousClock.Instant = .now) {
        let rate = bytesPerSecond.map { Double(max(1, $0)) }
        state = Locked(State(rate: rate, tokens: 0, updated: now))
        limited = Atomic(rate != nil)
    }

    /// Whether it limits anything.
    var isLimited: Bool { limited.load(ordering: .relaxed) }

    /// The rate, or `nil` for none.
    var bytesPerSecond: Int64? { state.withLock { $0.rate.map { Int64($0) } } }

    /// Changes the rate (`nil`: no limit) from now on. A debt already taken is kept (its taker is waiting for it),
    /// less what the old rate paid of it until now: only the rest is paid at the new rate, so a limit set again (even
    /// to the same rate) never starts a wait over.
    func setRate(_ bytesPerSecond: Int64?, now: ContinuousClock.Instant = .now) {
        let rate = bytesPerSecond.map { Double(max(1, $0)) }
        state.withLock { state in
            let elapsed = now - state.updated
            if let old = state.rate, elapsed > .zero {
                state.tokens = min(state.capacity, state.tokens + elapsed.seconds * old)
            }
            state.rate = rate
            state.tokens = rate == nil ? 0 : min(state.tokens, state.capacity)
            state.updated = max(state.updated, now)
        }
        limited.store(rate != nil, ordering: .relaxed)
        changes.add(1, ordering: .releasing)
    }

    /// How many times the rate has changed.
    var version: UInt64 { changes.load(ordering: .acquiring) }

    /// How long the debt taken so far lasts from `now` at the current rate (zero without one).
    func remainingDelay(now: ContinuousClock.Instant = .now) -> Duration {
        take(0, now: now)
    }

    /// Takes `count` bytes' worth of tokens; returns how long the caller must wait before going on (zero when the
    /// bucket had them, or there is no limit).
    func take(_ count: Int, now: ContinuousClock.Instant = .now) -> Duration {
        let (tokens, rate) = state.withLock { state -> (Double, Double?) in
            guard let rate = state.rate else { return (0, nil) }
            let elapsed = now - state.updated
            if elapsed > .zero {
                state.tokens = min(state.capacity, state.tokens + elapsed.seconds * rate)
                state.updated = now
            }
            state.tokens -= Double(count)
            return (state.tokens, rate)
        }
        guard let rate, tokens < 0 else { return .zero }
        return .nanoseconds(Int64((-tokens / rate * 1e9).rounded(.up)))
    }
}

/// A bandwidth limit that may be set, changed or lifted while downloads take from it: a download's own, or all of
/// a downloader's. Its bucket is made when it first has a rate, so a limit never set costs one atomic load per chunk.
final class BandwidthLimit: Sendable {
    private let bucket = AtomicLazyReference<TokenBucket>()
    /// The rate below 1 it was made with, or 1 when it was not (or has been set since): see ``refusedRate``.
    private let refused: Atomic<Int64>

    /// A limit of `bytesPerSecond`, or none yet (`nil`).
    init(bytesPerSecond: Int64?) {
        refused = Atomic(min(1, bytesPerSecond ?? 1))
        if let bytesPerSecond { _ = bucket.storeIfNil(TokenBucket(bytesPerSecond: bytesPerSecond)) }
    }

    /// The rate below 1 byte per second it was made with, until a rate is set: a configuration's mistake (0 is not
    /// "no limit") that would run every download at 1 byte a second, so downloads under it are refused instead.
    var refusedRate: Int64? {
        let rate = refused.load(ordering: .relaxed)
        return rate < 1 ? rate : nil
    }

    /// The bucket, once the limit has had a rate (it may have none now).
    var current: TokenBucket? { bucket.load() }

    /// Sets the rate in bytes per second, or lifts it (`nil`).
    func set(_ bytesPerSecond: Int64?) {
        refused.store(1, ordering: .relaxed)
        if bytesPerSecond == nil, bucket.load() == nil { return }
        bucket.storeIfNil(TokenBucket(bytesPerSecond: nil)).setRate(bytesPerSecond)
    }

    /// The rate in bytes per second, if there is one.
    var bytesPerSecond: Int64? { bucket.load()?.bytesPerSecond }
}

/// Spaces the requests of one downloader (``RequestPacing``) and holds the hosts that asked for time with
/// `Retry-After`. A request takes its turn only when it may start now ("claims" it); one that must wait is told how
/// long, and asks again when it wakes. Turns are spaced from the moments requests really start, so a task that wakes
/// late does not bunch up with the next one.
final class RequestPacer: Sendable {
    private struct Host {
        /// The earliest start of the next request, and why.
        var next: ContinuousClock.Instant
        var nextReason: ThrottleReason
        /// Until when the host asked to be left alone.
        var heldUntil: ContinuousClock.Instant?
    }

    private struct State {
        var nextAny: ContinuousClock.Instant?
        var hosts: [String: Host] = [:]
    }

    private let pacing: RequestPacing
    private let random: @Sendable () -> Double
    private let state = Locked(State())
    /// Whether there is anything to look up: pacing is set, or a host asked for time. Most downloaders never space
    /// a request; they then take no lock per request.
    private let active: Atomic<Bool>
    /// Hosts remembered before the ones whose time has passed are forgotten.
    private static let hostsKept = 4096

    init(pacing: RequestPacing, random: @escaping @Sendable () -> Double) {
        self.pacing = pacing
        self.random = random
        active = Atomic(pacing.spacesRequests)
    }

    /// Whether any request may have to wait: pacing is set, or a host asked for time. Read before the host key is
    /// made: most downloaders pace nothing.
    var isActive: Bool { active.load(ordering: .relaxed) }

    /// Claims the start of a request to `host` now, and returns `nil`; or, when it may not start yet, claims
    /// nothing and returns how long to wait before asking again, and why.
    func claim(host: String, now: ContinuousClock.Instant = .now) -> (delay: Duration, reason: ThrottleReason)? {
        guard active.load(ordering: .relaxed) else { return nil }
        return state.withLock { state -> (Duration, ThrottleReason)? in
            var start = now
            var reason: ThrottleReason?
            if let next = state.nextAny, next > start { (start, reason) = (next, .requestRate) }
            let known = state.hosts[host]
            if let held = known?.heldUntil, held > start { (start, reason) = (held, .retryAfter) }
            if let known, known.next > start { (start, reason) = (known.next, known.nextReason) }
            if let reason { return (start - now, reason) }
            if let rate = pacing.rate { state.nextAny = now + rate.interval }
            let hostRate = pacing.perHostRate?.interval ?? .zero
            var wait = pacing.perHostWait
            if pacing.randomizesWait { wait = wait * (0.5 + random()) }
            if hostRate > .zero || wait > .zero {
                if state.hosts.count >= Self.hostsKept, known == nil { Self.forgetPast(&state, now: now) }
                state.hosts[host] = Host(
                    next: now + max(hostRate, wait), nextReason: wait > hostRate ? .hostWait : .requestRate,
                    heldUntil: known?.heldUntil)
            }
            return nil
        }
    }

    /// Holds `host` for `duration`: no request to it starts before then, from any download.
    func hold(host: String, for duration: Duration, now: ContinuousClock.Instant = .now) {
        let until = now + duration
        state.withLock { state in
            var known = state.hosts[host] ?? Host(next: now, nextReason: .requestRate)
            known.heldUntil = max(known.heldUntil ?? until, until)
            state.hosts[host] = known
        }
        active.store(true, ordering: .relaxed)
    }

    private static func forgetPast(_ state: inout State, now: ContinuousClock.Instant) {
        state.hosts = state.hosts.filter { $0.value.next > now || ($0.value.heldUntil ?? now) > now }
    }
}
