// Throughput of AsyncOperation through an OperationQueue against plain BlockOperation, in one run.
// Each AsyncOperation finishes from another dispatch queue, as network completions do; a BlockOperation
// finishes when its empty block returns. Target (issue "Foundation"): AsyncOperation >= 0.8x BlockOperation.
//
//   swift run -c release bench-operations [count] [repetitions]
import Dispatch
import Foundation
import HaulOperations

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
let count = arguments.first ?? 100_000
let repetitions = arguments.dropFirst().first ?? 5
let finisher = DispatchQueue(label: "bench.finisher", attributes: .concurrent)

final class TrivialOperation: AsyncOperation, @unchecked Sendable {
    // unchecked Sendable: no state of its own.
    override func execute() {
        finisher.async { self.finish() }
    }
}

/// Seconds to push `count` operations made by `make` through a queue of `width`.
func measure(width: Int, make: () -> Operation) -> Double {
    let queue = OperationQueue()
    queue.maxConcurrentOperationCount = width
    let operations = (0..<count).map { _ in make() }
    let start = DispatchTime.now()
    queue.addOperations(operations, waitUntilFinished: true)
    return Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
}

func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

print("\(count) operations per run, \(repetitions) runs each, alternating; median ops/s")
print("width | BlockOperation ops/s | AsyncOperation ops/s | ratio (target >= 0.80)")
var allMet = true
for width in [1, 8] {
    _ = measure(width: width) { BlockOperation {} }  // warm-up
    _ = measure(width: width) { TrivialOperation() }
    var block: [Double] = []
    var async: [Double] = []
    for _ in 0..<repetitions {
        block.append(Double(count) / measure(width: width) { BlockOperation {} })
        async.append(Double(count) / measure(width: width) { TrivialOperation() })
    }
    let ratio = median(async) / median(block)
    allMet = allMet && ratio >= 0.8
    print(
        String(
            format: "%5d | %20.0f | %20.0f | %.2fx %@", width, median(block), median(async), ratio,
            ratio >= 0.8 ? "met" : "MISSED"))
}
exit(allMet ? 0 : 1)
