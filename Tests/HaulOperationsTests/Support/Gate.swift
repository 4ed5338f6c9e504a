@testable import HaulOperations

/// A latch the test opens: work parked here waits (without blocking a thread) until `open()`.
final class Gate: Sendable {
    private let state = Locked<(isOpen: Bool, waiting: [@Sendable () -> Void])>((false, []))

    /// Calls `body` once the gate is open (at once if it already is).
    func whenOpen(_ body: @escaping @Sendable () -> Void) {
        let runNow = state.withLock { state -> Bool in
            if state.isOpen { return true }
            state.waiting.append(body)
            return false
        }
        if runNow { body() }
    }

    func pass() async {
        await withCheckedContinuation { continuation in whenOpen { continuation.resume() } }
    }

    func open() {
        let waiting = state.withLock { state -> [@Sendable () -> Void] in
            state.isOpen = true
            defer { state.waiting = [] }
            return state.waiting
        }
        for body in waiting { body() }
    }
}
