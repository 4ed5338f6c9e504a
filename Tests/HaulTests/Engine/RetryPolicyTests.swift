import Foundation
import Testing

@testable import Haul

/// The retry rule both the engine and the shared queue's workers take their decisions from. No server, no clock.
@Suite("Retry policy decisions (no I/O)")
struct RetryPolicyTests {
    static let policy = RetryPolicy(
        maxRetries: 2, initialDelay: .milliseconds(100), multiplier: 2, maxDelay: .seconds(1), jitter: .none,
        maxRetryAfter: .seconds(5))

    @Test("a transient failure is retried after the backoff while retries are left, then not")
    func backoff() {
        let first = Self.policy.decision(
            afterFailure: 1, transient: true, status: 500, retryAfter: nil, random: { 1 })
        #expect(first == RetryDecision(retryDelay: .milliseconds(100), hostHold: nil))
        let second = Self.policy.decision(
            afterFailure: 2, transient: true, status: 500, retryAfter: nil, random: { 1 })
        #expect(second.retryDelay == .milliseconds(200))
        let third = Self.policy.decision(
            afterFailure: 3, transient: true, status: 500, retryAfter: nil, random: { 1 })
        #expect(third == RetryDecision(retryDelay: nil, hostHold: nil))
        let permanent = Self.policy.decision(
            afterFailure: 1, transient: false, status: 404, retryAfter: nil, random: { 1 })
        #expect(permanent.retryDelay == nil)
    }

    @Test("a queue's own count of attempts replaces the policy's retries")
    func queueCountsAttempts() {
        let retried = Self.policy.decision(
            afterFailure: 4, transient: true, status: 503, retryAfter: nil, maxRetries: 4, random: { 1 })
        #expect(retried.retryDelay == .seconds(0.8))
        let spent = Self.policy.decision(
            afterFailure: 5, transient: true, status: 503, retryAfter: nil, maxRetries: 4, random: { 1 })
        #expect(spent.retryDelay == nil)
    }

    @Test(
        "Retry-After on a 429 or 503 holds the host for min(Retry-After, maxRetryAfter), whether or not it is retried",
        arguments: [429, 503])
    func hostHold(status: Int) {
        let short = Self.policy.decision(
            afterFailure: 1, transient: true, status: status, retryAfter: .seconds(2), random: { 1 })
        #expect(short == RetryDecision(retryDelay: .seconds(2), hostHold: .seconds(2)))
        let long = Self.policy.decision(
            afterFailure: 1, transient: true, status: status, retryAfter: .seconds(3600), random: { 1 })
        #expect(long == RetryDecision(retryDelay: .seconds(5), hostHold: .seconds(5)))
        let lastAttempt = Self.policy.decision(
            afterFailure: 3, transient: true, status: status, retryAfter: .seconds(2), random: { 1 })
        #expect(lastAttempt == RetryDecision(retryDelay: nil, hostHold: .seconds(2)))
    }

    @Test("Retry-After on another status, or from a policy that does not honour it, holds no host")
    func noHostHold() {
        let otherStatus = Self.policy.decision(
            afterFailure: 1, transient: true, status: 500, retryAfter: .seconds(2), random: { 1 })
        #expect(otherStatus.hostHold == nil)
        var ignoring = Self.policy
        ignoring.honoursRetryAfter = false
        let ignored = ignoring.decision(
            afterFailure: 1, transient: true, status: 503, retryAfter: .seconds(2), random: { 1 })
        // The backoff, not the server's wait.
        #expect(ignored == RetryDecision(retryDelay: .milliseconds(100), hostHold: nil))
        #expect(ignoring.hostHold(status: 429, retryAfter: .seconds(2)) == nil)
    }

    @Test("a Retry-After in the past holds for nothing")
    func pastRetryAfter() {
        #expect(Self.policy.hostHold(status: 503, retryAfter: .seconds(-3)) == .zero)
    }
}
