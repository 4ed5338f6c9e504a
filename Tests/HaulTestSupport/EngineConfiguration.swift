import Haul
import HaulOperations

/// Test configuration: no jitter, no real backoff sleeps.
package func testConfiguration(clock: any BackoffClock = RecordingClock(), retries: Int = 3) -> Downloader.Configuration {
    var configuration = Downloader.Configuration()
    configuration.retryPolicy = RetryPolicy(maxRetries: retries, jitter: .none)
    configuration.backoffClock = clock
    configuration.progressInterval = .milliseconds(1)
    return configuration
}

/// A backoff clock that never sleeps: it records what it was asked to wait.
package final class RecordingClock: BackoffClock {
    private let waits = Locked<[Duration]>([])
    package init() {}
    package var recorded: [Duration] { waits.withLock { $0 } }
    package func sleep(for duration: Duration) async throws {
        waits.withLock { $0.append(duration) }
        try Task.checkCancellation()
    }
}
