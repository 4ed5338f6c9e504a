import Dispatch
import Foundation
import HaulOperations
import HaulTestSupport

/// An AsyncOperation whose work is held at a gate and recorded by a meter; it finishes from another queue,
/// as network completions do.
final class GatedOperation: AsyncOperation, @unchecked Sendable {
    // unchecked Sendable: immutable lets of Sendable types only.
    let id: Int
    let meter: InFlightMeter
    let gate: Gate<Void>
    let executed = Locked(false)

    init(id: Int, meter: InFlightMeter, gate: Gate<Void>) {
        self.id = id
        self.meter = meter
        self.gate = gate
        super.init(name: "gated-\(id)")
    }

    override func execute() {
        executed.withLock { $0 = true }
        meter.enter(id)
        gate.whenOpen { [self] _ in
            DispatchQueue.global().async { [self] in
                meter.leave()
                finish()
            }
        }
    }
}

/// A concurrent dispatch queue to use as an OperationQueue's `underlyingQueue`, so a test can wait with a
/// barrier until every start the queue dispatched has run: over-admission cannot hide in a timing window.
func makeObservableQueue(width: Int) -> (OperationQueue, DispatchQueue) {
    let dispatch = DispatchQueue(label: "test.underlying", attributes: .concurrent)
    let queue = OperationQueue()
    queue.underlyingQueue = dispatch
    queue.maxConcurrentOperationCount = width
    return (queue, dispatch)
}

struct TestFailure: Error, Equatable {
    let message: String
}
