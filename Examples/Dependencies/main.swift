// "How do I make one operation not start until the previous one finishes?" — without serialising
// everything: op2 and op3 wait for op1, and then run side by side on a queue of width 4.
import Foundation
import HaulOperations

let queue = OperationQueue()
queue.maxConcurrentOperationCount = 4  // the seeds' advice for network work: at most 4 or 5 at once

let clock = ContinuousClock()
let start = clock.now
@Sendable func elapsed() -> String {
    let ms = Int((clock.now - start) / .milliseconds(1))
    return String(format: "%4d ms", ms)
}

let op1 = AsyncBlockOperation(name: "op1: sign in") { () async throws -> String in
    try await Task.sleep(for: .milliseconds(50))
    print("\(elapsed())  op1 finished")
    return "token-123"
}
let op2 = AsyncBlockOperation(name: "op2: fetch profile", consuming: op1) { token in
    print("\(elapsed())  op2 started with \(token)")
    try await Task.sleep(for: .milliseconds(50))
    return "profile"
}
let op3 = AsyncBlockOperation(name: "op3: fetch settings", consuming: op1) { token in
    print("\(elapsed())  op3 started with \(token)")
    try await Task.sleep(for: .milliseconds(50))
    return "settings"
}
// Added in reverse on purpose: only the dependencies decide the order.
queue.addOperations([op3, op2, op1])
let results = try await (op2.value, op3.value)
print("op2 -> \(results.0), op3 -> \(results.1)")
let ordered = op1.isFinished && (try? op1.result?.get()) == "token-123"
print(ordered ? "OK: op2 and op3 ran after op1" : "FAILED")
exit(ordered ? 0 : 1)
