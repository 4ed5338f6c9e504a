import Foundation
import HaulOperations

/// Writes the changes of concurrent callers together: the first caller with no write under way writes what is
/// queued at once; callers arriving while a write runs queue their changes for the next one and wait. A burst of
/// small downloads finishing together pays one transaction per group, and a lone download waits for no timer.
///
/// Every caller returns once its changes are written (or their write failed, which `write` reports itself). Changes
/// are written in the order callers queued them, and one caller's changes always go in one write.
///
/// Who writes next: when a write ends with changes queued, one waiting caller of a later batch is woken to write
/// them, a blocked thread rather than a suspended task when there is one: a thread that is blocked in ``write(_:)``
/// may be one the suspended task needs to run on, and that task must never be the one everyone waits for. Anyone who
/// arrives while no write runs writes at once, whoever was woken.
final class GroupCommit<Change: Sendable>: Sendable {
    private let machine = Locked(Machine<Wake>())
    /// Writes one batch (in one transaction), reporting its own errors. Called by one caller at a time, never with
    /// the lock held.
    private let writeBatch: @Sendable ([Change]) -> Void

    init(write: @escaping @Sendable ([Change]) -> Void) {
        writeBatch = write
    }

    /// Queues `changes` and returns once they are written, suspending while another caller writes.
    func commit(_ changes: [Change]) async {
        let batch = machine.withLock { $0.queue(changes) }
        while !writeOrDone(batch) {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let waiting = machine.withLock { $0.wait(batch, .task(continuation), blocksThread: false) }
                if !waiting { continuation.resume() }
            }
        }
    }

    /// Queues `changes` and returns once they are written, blocking the calling thread while another caller writes.
    func write(_ changes: [Change]) {
        let batch = machine.withLock { $0.queue(changes) }
        while !writeOrDone(batch) {
            let signal = ThreadSignal()
            if machine.withLock({ $0.wait(batch, .thread(signal), blocksThread: true) }) { signal.wait() }
        }
    }

    /// Whether `batch` is written, writing what is queued first when no write is under way; `false` when the caller
    /// waits for another caller's write.
    private func writeOrDone(_ batch: UInt64) -> Bool {
        while true {
            switch machine.withLock({ $0.next(for: batch) }) {
            case .done: return true
            case .write(let taken, let number): run(taken, number)
            case .wait: return false
            }
        }
    }

    /// Writes a batch taken from the queue, then wakes (outside the lock) the callers it served and the one who
    /// writes next.
    private func run(_ changes: [Change], _ number: UInt64) {
        writeBatch(changes)
        for waiter in machine.withLock({ $0.written(number) }) {
            switch waiter {
            case .task(let continuation): continuation.resume()
            case .thread(let signal): signal.signal()
            }
        }
    }

    /// How a waiting caller is woken.
    enum Wake: Sendable {
        case task(CheckedContinuation<Void, Never>)
        case thread(ThreadSignal)
    }

    /// How many callers wait (for tests).
    var waiting: Int { machine.withLock { $0.waiting } }

    /// The bookkeeping, without I/O: which batch a caller's changes are in, whether a write runs, who waits and how
    /// it is woken (`Waker`). Batches are numbered from 1; the queued changes form the batch numbered `gathering`.
    struct Machine<Waker> {
        /// Changes queued for the next write.
        private(set) var queued: [Change] = []
        /// The number of the batch being gathered in ``queued``.
        private(set) var gathering: UInt64 = 1
        /// Every batch up to this one is written.
        private(set) var written: UInt64 = 0
        /// Whether a caller is writing a batch.
        private(set) var writing = false
        private var waiters: [Waiter] = []

        private struct Waiter {
            var batch: UInt64
            var waker: Waker
            var blocksThread: Bool
        }

        /// What a caller does now.
        enum Next {
            /// Its changes are written.
            case done
            /// It writes these changes, batch `number`, now (and calls ``written(_:)`` after).
            case write([Change], number: UInt64)
            /// Another caller is writing: it waits to be woken, then asks again.
            case wait
        }

        /// Queues `changes`; the number of the batch they are in.
        mutating func queue(_ changes: [Change]) -> UInt64 {
            queued += changes
            return gathering
        }

        /// What the caller whose changes are in `batch` does now.
        mutating func next(for batch: UInt64) -> Next {
            if batch <= written { return .done }
            if writing { return .wait }
            writing = true
            defer {
                queued = []
                gathering += 1
            }
            return .write(queued, number: gathering)
        }

        /// Registers a waiter for `batch`, woken by `waker`; `blocksThread` when it is a blocked thread. `false` if
        /// it need not wait (the state changed since ``next(for:)`` answered ``Next/wait``): it asks again at once.
        mutating func wait(_ batch: UInt64, _ waker: Waker, blocksThread: Bool) -> Bool {
            guard batch > written, writing else { return false }
            waiters.append(Waiter(batch: batch, waker: waker, blocksThread: blocksThread))
            return true
        }

        /// Batch `number` is written: the waiters it served, and, if changes are queued, one waiter of a later batch
        /// to write them (a thread before a task).
        mutating func written(_ number: UInt64) -> [Waker] {
            written = number
            writing = false
            var woken: [Waker] = []
            var later: [Waiter] = []
            for waiter in waiters {
                if waiter.batch <= number { woken.append(waiter.waker) } else { later.append(waiter) }
            }
            if !later.isEmpty {
                woken.append(later.remove(at: later.firstIndex(where: \.blocksThread) ?? 0).waker)
            }
            waiters = later
            return woken
        }

        /// How many callers wait (for tests).
        var waiting: Int { waiters.count }
    }
}

extension GroupCommit.Machine.Next: Equatable where Change: Equatable {}

/// One blocked thread's wake-up: ``signal()`` before or after ``wait()`` both let it go on.
final class ThreadSignal: @unchecked Sendable {  // `signalled` is guarded by `condition`
    private let condition = NSCondition()
    private var signalled = false

    func wait() {
        condition.lock()
        defer { condition.unlock() }
        while !signalled { condition.wait() }
    }

    func signal() {
        condition.lock()
        defer { condition.unlock() }
        signalled = true
        condition.signal()
    }
}
