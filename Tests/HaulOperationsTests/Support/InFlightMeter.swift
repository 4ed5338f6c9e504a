@testable import HaulOperations

/// Counts work in flight and remembers the highest count and the order of starts, so concurrency tests can
/// measure instead of sleeping. `waitUntilStarted(_:)` suspends until that many starts have happened.
final class InFlightMeter: Sendable {
    private struct State {
        var current = 0
        var highest = 0
        var started: [Int] = []
        var finished = 0
        var waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = Locked(State())

    func enter(_ id: Int) {
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.current += 1
            state.highest = max(state.highest, state.current)
            state.started.append(id)
            let count = state.started.count
            let ready = state.waiters.filter { $0.count <= count }.map(\.continuation)
            state.waiters.removeAll { $0.count <= count }
            return ready
        }
        for continuation in ready { continuation.resume() }
    }

    func leave() {
        state.withLock {
            $0.current -= 1
            $0.finished += 1
        }
    }

    func waitUntilStarted(_ count: Int) async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.started.count >= count { return true }
                state.waiters.append((count, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }

    var current: Int { state.withLock { $0.current } }
    var highest: Int { state.withLock { $0.highest } }
    var startOrder: [Int] { state.withLock { $0.started } }
    var finishedCount: Int { state.withLock { $0.finished } }
}
