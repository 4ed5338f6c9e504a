import Foundation

/// When and how often a transient failure is tried again.
///
/// The defaults follow curl's transient set and Alamofire's backoff: 3 retries (4 attempts), waiting a random
/// time up to 0.5 s × 2ⁿ (full jitter), never more than 30 s; a server's `Retry-After` (seconds or HTTP date)
/// is honoured up to 5 minutes. 4xx answers other than 408 and 429 are never retried.
public struct RetryPolicy: Sendable, Hashable {
    /// How random each wait is.
    public enum Jitter: Sendable, Hashable {
        /// Wait exactly the backoff (deterministic; for tests).
        case none
        /// Wait a uniformly random time between zero and the backoff (AWS's "full jitter").
        case full
    }

    /// Retries after the first attempt (0 = never retry).
    public var maxRetries: Int
    /// The backoff before the first retry.
    public var initialDelay: Duration
    /// The factor by which the backoff grows each retry.
    public var multiplier: Double
    /// The longest backoff.
    public var maxDelay: Duration
    /// How random the waits are.
    public var jitter: Jitter
    /// Whether to honour a server's `Retry-After`.
    public var honoursRetryAfter: Bool
    /// The longest `Retry-After` honoured; a longer one is cut to this.
    public var maxRetryAfter: Duration
    /// HTTP statuses that count as transient.
    public var retryableStatuses: Set<Int>

    /// The default policy (see the type's description).
    public static let `default` = RetryPolicy()

    /// Never retry.
    public static let none = RetryPolicy(maxRetries: 0)

    /// Creates a policy; every parameter defaults to the documented default.
    public init(
        maxRetries: Int = 3,
        initialDelay: Duration = .milliseconds(500),
        multiplier: Double = 2,
        maxDelay: Duration = .seconds(30),
        jitter: Jitter = .full,
        honoursRetryAfter: Bool = true,
        maxRetryAfter: Duration = .seconds(300),
        retryableStatuses: Set<Int> = [408, 429, 500, 502, 503, 504, 522, 524]
    ) {
        self.maxRetries = max(0, maxRetries)
        self.initialDelay = initialDelay
        self.multiplier = multiplier
        self.maxDelay = maxDelay
        self.jitter = jitter
        self.honoursRetryAfter = honoursRetryAfter
        self.maxRetryAfter = maxRetryAfter
        self.retryableStatuses = retryableStatuses
    }

    /// What follows failure number `failures` of a download (1 for the first), as the engine and the shared queue's
    /// workers both decide it: a retry after a backoff when the failure is `transient` and `failures` is within
    /// `maxRetries` (the policy's own unless a queue counts attempts itself), and a hold of the failure's host when the
    /// server asked for time (``hostHold(status:retryAfter:)``), whether or not this download is tried again.
    package func decision(
        afterFailure failures: Int, transient: Bool, status: Int?, retryAfter: Duration?, maxRetries: Int? = nil,
        random: () -> Double
    ) -> RetryDecision {
        let retries = transient && failures <= (maxRetries ?? self.maxRetries)
        return RetryDecision(
            retryDelay: retries ? delay(beforeRetry: failures, retryAfter: retryAfter, random: random) : nil,
            hostHold: hostHold(status: status, retryAfter: retryAfter))
    }

    /// How long every download from a host waits after it answered `status` with `Retry-After`: a `429` or `503`
    /// asks for time for the host, not for one download; honoured only as far as the policy honours `Retry-After`
    /// (a server cannot hold a host for days). `nil` for no hold.
    package func hostHold(status: Int?, retryAfter: Duration?) -> Duration? {
        guard honoursRetryAfter, status == 429 || status == 503, let retryAfter else { return nil }
        return min(max(retryAfter, .zero), maxRetryAfter)
    }

    /// The wait before retry number `retry` (1 for the first retry), given the server's `Retry-After`.
    package func delay(beforeRetry retry: Int, retryAfter: Duration?, random: () -> Double) -> Duration {
        if honoursRetryAfter, let retryAfter {
            return min(max(retryAfter, .zero), maxRetryAfter)
        }
        let exponent = Double(max(0, retry - 1))
        let backoffSeconds = min(initialDelay.seconds * pow(multiplier, exponent), maxDelay.seconds)
        switch jitter {
        case .none: return .seconds(backoffSeconds)
        case .full: return .seconds(backoffSeconds * random())
        }
    }
}

/// What follows a failed attempt (``RetryPolicy/decision(afterFailure:transient:status:retryAfter:maxRetries:random:)``).
package struct RetryDecision: Sendable, Hashable {
    /// The wait before the next attempt; `nil` when the download is not tried again.
    package var retryDelay: Duration?
    /// How long no download from the failure's host starts; `nil` for no hold.
    package var hostHold: Duration?
}

/// The clock the engine waits on between attempts. Inject one in tests so that backoff never sleeps for
/// real: record the requested waits, return at once, or hold until the test says so.
public protocol BackoffClock: Sendable {
    /// Waits `duration`; throws `CancellationError` if the task is cancelled meanwhile.
    func sleep(for duration: Duration) async throws
}

/// The real clock.
public struct ContinuousBackoffClock: BackoffClock {
    /// Creates the real clock.
    public init() {}

    /// Sleeps on `ContinuousClock`.
    public func sleep(for duration: Duration) async throws {
        try await ContinuousClock().sleep(for: duration)
    }
}

extension Duration {
    /// The duration in seconds, as a `Double` (also for the `haul` command's output).
    package var seconds: Double {
        let parts = components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }
}
