// "Tell me when all of them are done": a completion operation after a group, a "k / n done" line, and
// the group's failure policy — here, stop the batch at the first failure.
import Foundation
import HaulOperations

let queue = OperationQueue()
queue.maxConcurrentOperationCount = 2

let jobs = (1...6).map { number in
    AsyncBlockOperation(name: "file-\(number)") { () async throws -> Int in
        try await Task.sleep(for: .milliseconds(20 * number))
        return number
    }
}
let group = OperationGroup(jobs)
group.onMemberFinished = { done, total in print("\(done) / \(total) files done") }
let completion = group.completionOperation { print("completion operation: all \(jobs.count) finished") }
queue.addOperations(jobs + [completion])
try await [completion].allFinished()

// The same with a failure and .cancelOthers: the rest of the batch is cancelled.
struct NotFound: Error {}
let batch = (1...4).map { number in
    AsyncBlockOperation(name: "item-\(number)") { () async throws -> Int in
        if number == 2 { throw NotFound() }
        try await Task.sleep(for: .seconds(60))  // would take a minute; cancelled instead
        return number
    }
}
let stopping = OperationGroup(batch, failurePolicy: .cancelOthers)
queue.addOperations(batch)
try await stopping.finished()
let cancelled = batch.filter(\.isCancelled).count
print("first failure: \(stopping.firstFailure.map { "\($0)" } ?? "none"); cancelled the other \(cancelled)")

let ok = completion.isFinished && group.finishedCount == 6 && cancelled == 3
print(ok ? "OK" : "FAILED")
exit(ok ? 0 : 1)
