/// Holds the answers to wrong secrets back one after another, across everything that shares it (every connection of
/// a server): each wrong guess is answered `delay` after the one before it, so a guesser gets one answer per `delay`
/// however it spreads its guesses over calls, requests and connections. A right secret is never held back; under a
/// flood of guesses only the answers to wrong ones wait.
package final class GuessThrottle: Sendable {
    /// When the last answer held back goes out.
    private let last = Locked<ContinuousClock.Instant?>(nil)

    /// A throttle with nothing held back yet.
    package init() {}

    /// How long to hold back the answer to `guesses` wrong guesses (at least 1): `delay` for each, after the answers
    /// held back before it.
    package func hold(_ guesses: Int, each delay: Duration) -> Duration {
        let now = ContinuousClock.now
        return last.withLock { last in
            let release = max(now, last ?? now) + delay * max(guesses, 1)
            last = release
            return release - now
        }
    }
}
