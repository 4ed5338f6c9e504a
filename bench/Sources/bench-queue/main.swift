// Admission cost of DownloadQueue as the waiting list grows (issue "DownloadQueue"): scheduling must stay O(1)
// per admission, so 100,000 queued downloads must admit at the same per-item cost as 1,000.
//
//   swift run -c release bench-queue
//
// 1. The scheduler alone (enqueue + admit + finish per item, width 8), one host and 16 hosts with a per-host
//    limit of 2, mixed priorities.
// 2. The whole DownloadQueue path (handle, task, engine call, completion, events) for downloads that end at
//    once without touching the network (an unsupported scheme is refused before any I/O), width 8.
// Prints ns per item at each size and the ratio of the largest to the smallest; exits 1 if it exceeds 1.5x.
import Foundation
import Haul
import HaulURLSession

func schedulerNanosPerItem(count: Int, hosts: Int, perHostLimit: Int?) -> Double {
    var scheduler = AdmissionScheduler(maxConcurrent: 8, perHostLimit: perHostLimit)
    let start = ContinuousClock.now
    for id in 0..<count { scheduler.enqueue(UInt64(id), host: "h\(id % hosts)", priority: id % 3) }
    var finished = 0
    var running: [UInt64] = []
    while finished < count {
        running.append(contentsOf: scheduler.admit())
        // Finish the oldest running one, as a queue of equal downloads would.
        let id = running.removeFirst()
        scheduler.finish(id)
        finished += 1
    }
    return Double((ContinuousClock.now - start) / .nanoseconds(1)) / Double(count)
}

func queueNanosPerItem(count: Int) async -> Double {
    var configuration = Downloader.Configuration()
    configuration.retryPolicy = .none
    let queue = DownloadQueue(
        downloader: Downloader(transport: URLSessionTransport(), configuration: configuration),
        configuration: .init(maxConcurrentDownloads: 8))
    let directory = URL(fileURLWithPath: NSTemporaryDirectory())
    let requests = (0..<count).compactMap { index in
        URL(string: "bench://h\(index % 16)/f\(index)").map {
            DownloadRequest(url: $0, destination: .directory(directory))
        }
    }
    queue.pause()
    let start = ContinuousClock.now
    queue.add(requests)
    queue.resume()
    await queue.waitUntilIdle()
    let failed = queue.progress.failedFiles
    precondition(failed == count, "expected every download refused, got \(failed) of \(count)")
    return Double((ContinuousClock.now - start) / .nanoseconds(1)) / Double(count)
}

func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

let sizes = [1_000, 10_000, 100_000]
var rows: [(String, [Double])] = []
for (label, hosts, limit) in [("scheduler, 1 host", 1, Int?.none), ("scheduler, 16 hosts, 2 per host", 16, 2)] {
    _ = schedulerNanosPerItem(count: 10_000, hosts: hosts, perHostLimit: limit)  // warm-up
    rows.append(
        (
            label,
            sizes.map { size in
                median((0..<5).map { _ in schedulerNanosPerItem(count: size, hosts: hosts, perHostLimit: limit) })
            }
        ))
}
_ = await queueNanosPerItem(count: 10_000)  // warm-up
var queueTimes: [Double] = []
for size in sizes {
    var runs: [Double] = []
    for _ in 0..<5 { runs.append(await queueNanosPerItem(count: size)) }
    queueTimes.append(median(runs))
}
rows.append(("DownloadQueue end to end", queueTimes))

print("| path | " + sizes.map { "\($0) queued: ns/item" }.joined(separator: " | ") + " | largest / smallest |")
print("|---|" + sizes.map { _ in "---|" }.joined() + "---|")
var worst = 0.0
for (label, times) in rows {
    let ratio = times[times.count - 1] / times[0]
    worst = max(worst, ratio)
    print(
        "| \(label) | " + times.map { String(format: "%.0f", $0) }.joined(separator: " | ")
            + String(format: " | %.2fx |", ratio))
}
print(
    worst <= 1.5
        ? "target O(1) per admission (<= 1.5x from 1,000 to 100,000): met" : "target O(1) per admission: MISSED")
exit(worst <= 1.5 ? 0 : 1)
