import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulOperations
import HaulTestServer
import Testing

/// The transports every engine test runs against.
enum TransportKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case asyncHTTPClient
    case urlSession

    var testDescription: String { rawValue }

    func makeTransport() -> any HTTPTransport {
        switch self {
        case .asyncHTTPClient: AsyncHTTPClientTransport.shared
        case .urlSession: URLSessionTransport()
        }
    }
}

/// A fresh directory under the system temporary directory, removed when the test is done with it.
final class TemporaryDirectory: Sendable {
    let url: URL
    var path: String { url.path }

    init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("haul-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit {
        try? FileManager.default.removeItem(at: url)
    }

    /// Every entry, hidden ones included, sorted.
    func contents() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
    }

    func file(_ name: String) -> URL { url.appendingPathComponent(name) }
}

/// A backoff clock that never sleeps: it records what it was asked to wait.
final class RecordingClock: BackoffClock {
    private let waits = Locked<[Duration]>([])
    var recorded: [Duration] { waits.withLock { $0 } }
    func sleep(for duration: Duration) async throws {
        waits.withLock { $0.append(duration) }
        try Task.checkCancellation()
    }
}

/// A backoff clock whose sleeps last until the task is cancelled; `entered` opens when a sleep begins.
final class BlockingClock: BackoffClock {
    let entered = Signal()
    func sleep(for duration: Duration) async throws {
        entered.fire()
        try await Task.sleep(for: .seconds(3600))
    }
}

/// A one-time signal a test can await.
final class Signal: Sendable {
    private let state = Locked<(fired: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func fire() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.fired = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    func wait() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.fired { return true }
                state.waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }
}

/// Collects a download's events.
final class EventLog: Sendable {
    private let events = Locked<[DownloadEvent]>([])
    var all: [DownloadEvent] { events.withLock { $0 } }
    func record(_ event: DownloadEvent) { events.withLock { $0.append(event) } }

    var redirects: Int { all.filter { if case .redirected = $0 { true } else { false } }.count }
    var retries: Int { all.filter { if case .retrying = $0 { true } else { false } }.count }
    var lastProgress: DownloadProgress? {
        all.compactMap { if case .progress(let progress) = $0 { progress } else { nil } }.last
    }
}

/// Test configuration: no jitter, no real backoff sleeps.
func testConfiguration(clock: any BackoffClock = RecordingClock(), retries: Int = 3) -> Downloader.Configuration {
    var configuration = Downloader.Configuration()
    configuration.retryPolicy = RetryPolicy(maxRetries: retries, jitter: .none)
    configuration.backoffClock = clock
    configuration.progressInterval = .milliseconds(1)
    return configuration
}

/// Waits (polling, bounded) until `condition` holds: for effects that have no event to await, such as a
/// server noticing a closed connection. Fails the test if it never does.
func eventually(
    _ what: String, within limit: Duration = .seconds(10), _ condition: () -> Bool,
    sourceLocation: SourceLocation = #_sourceLocation
) async throws {
    let deadline = ContinuousClock.now + limit
    while !condition() {
        if ContinuousClock.now > deadline {
            Issue.record("never happened: \(what)", sourceLocation: sourceLocation)
            return
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}

func contentsOf(_ url: URL) -> [UInt8]? {
    (try? Data(contentsOf: url)).map { [UInt8]($0) }
}
