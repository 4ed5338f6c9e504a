import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulNIO
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// The transports every engine test runs against.
enum TransportKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case asyncHTTPClient
    case urlSession
    case nio

    var testDescription: String { rawValue }

    func makeTransport() -> any HTTPTransport {
        switch self {
        case .asyncHTTPClient: AsyncHTTPClientTransport.shared
        case .urlSession: URLSessionTransport()
        case .nio: NIOTransport()
        }
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
