package import Haul
import HaulOperations

/// Test configuration: no jitter, no real backoff sleeps.
package func testConfiguration(clock: any BackoffClock = RecordingClock(), retries: Int = 3) -> Downloader.Configuration
{
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

/// A backoff clock whose sleeps wait until the test opens ``release``, cancelled or not (then the sleep throws): a
/// run held in its wait before a retry, for as long as the test needs; ``entered`` opens when a sleep begins.
package final class GatedClock: BackoffClock {
    package let entered = Gate<Void>()
    package let release = Gate<Void>()
    package init() {}
    package func sleep(for duration: Duration) async throws {
        entered.open()
        await release.wait()
        try Task.checkCancellation()
    }
}

/// Collects a download's events.
package final class EventLog: Sendable {
    package init() {}
    private let events = Locked<[DownloadEvent]>([])
    package var all: [DownloadEvent] { events.withLock { $0 } }
    package func record(_ event: DownloadEvent) { events.withLock { $0.append(event) } }

    package var redirects: Int { all.filter { if case .redirected = $0 { true } else { false } }.count }
    package var retries: Int { all.filter { if case .retrying = $0 { true } else { false } }.count }
    package var lastProgress: DownloadProgress? {
        all.compactMap { if case .progress(let progress) = $0 { progress } else { nil } }.last
    }
}
