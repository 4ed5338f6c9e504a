import Foundation
import Haul
import HaulTestSupport

/// One request, then waits (until cancelled) for more, saying when it is asked for more.
struct OneThenWait: AsyncSequence, Sendable {
    let request: DownloadRequest
    let askedForMore: Gate<Void>

    struct AsyncIterator: AsyncIteratorProtocol {
        let sequence: OneThenWait
        var sent = false

        mutating func next() async throws -> DownloadRequest? {
            if !sent {
                sent = true
                return sequence.request
            }
            sequence.askedForMore.open()
            try? await Task.sleep(for: .seconds(3600))
            return nil
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(sequence: self) }
}

/// Whether `task` ends within `limit` (awaiting a task's result ignores cancellation: it is awaited apart).
func ends(_ task: Task<Void, any Error>, within limit: Duration) async -> Bool {
    let done = Gate<Void>()
    Task {
        _ = await task.result
        done.open()
    }
    let deadline = ContinuousClock.now + limit
    while done.value == nil, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(10)) }
    return done.value != nil
}
