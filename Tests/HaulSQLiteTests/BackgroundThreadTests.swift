import Foundation
import HaulOperations
import Testing

@testable import HaulSQLite

#if canImport(Glibc)
import Glibc
#endif

/// The low-priority queue the journal folds on.
@Suite("Background thread", .timeLimit(.minutes(1)))
struct BackgroundThreadTests {
    @Test("jobs run one at a time in order, on a thread of their own at the lowest priority")
    func runsInOrderAtLowPriority() {
        let queue = BackgroundThread(name: "test.background")
        let seen = Locked<(order: [Int], concurrent: Int, most: Int, niceValues: Set<Int32>)>(([], 0, 0, []))
        let first = DispatchSemaphore(value: 0)
        for index in 0..<200 {
            // The rest is queued once the thread has run the first, so that the thread surely runs some.
            if index == 1 { first.wait() }
            queue.async {
                defer { if index == 0 { first.signal() } }
                seen.withLock {
                    $0.concurrent += 1
                    $0.most = max($0.most, $0.concurrent)
                }
                #if os(Linux)
                let nice = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
                #else
                let nice: Int32 = 19
                #endif
                seen.withLock {
                    $0.order.append(index)
                    $0.niceValues.insert(nice)
                    $0.concurrent -= 1
                }
            }
        }
        queue.drain()
        queue.stop()
        let result = seen.withLock { $0 }
        #expect(result.order == Array(0..<200))
        #expect(result.most == 1)
        // drain() may have run the last ones on the caller (at its priority); the thread ran at least the first.
        #expect(result.niceValues.contains(19))
        #if os(Linux)
        #expect(getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0) == 0)  // the caller's is untouched
        #endif
    }

    @Test("drain waits for the job under way, then runs what is queued itself, without waiting for the thread")
    func drainRunsQueuedJobsOnTheCaller() {
        let queue = BackgroundThread(name: "test.background")
        let started = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let log = Locked<[String]>([])
        queue.async {
            started.signal()
            release.wait()
            log.withLock { $0.append("first") }
        }
        started.wait()  // the thread is inside the first job
        queue.async { log.withLock { $0.append("second") } }
        let drained = DispatchSemaphore(value: 0)
        let drainer = Thread {
            queue.drain()
            drained.signal()
        }
        drainer.start()
        #expect(drained.wait(timeout: .now() + .milliseconds(200)) == .timedOut)  // the first job still holds it
        release.signal()
        drained.wait()
        #expect(log.withLock { $0 } == ["first", "second"])
        queue.stop()
    }

    @Test("after stop, a job queued later runs on the caller, after the jobs queued before")
    func afterStop() {
        let queue = BackgroundThread(name: "test.background")
        let ran = Locked<[Int]>([])
        for index in 0..<10 { queue.async { ran.withLock { $0.append(index) } } }
        queue.stop()
        queue.async { ran.withLock { $0.append(10) } }
        // Queued after stop: run before async returns (so on the caller), after everything queued before it.
        #expect(ran.withLock { $0 } == Array(0...10))
    }
}
