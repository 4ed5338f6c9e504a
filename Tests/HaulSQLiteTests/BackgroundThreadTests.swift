import Foundation
import HaulOperations
import HaulTestSupport
import Testing

@testable import HaulSQLite

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The low-priority queue the journal folds on.
@Suite("Background thread", .timeLimit(.minutes(1)))
struct BackgroundThreadTests {
    @Test("jobs run one at a time in order, on a thread of their own at the lowest priority")
    func runsInOrderAtLowPriority() async throws {
        // The waits block a thread of its own, not one of the few that run every test's tasks.
        let (result, callerNice) = try await onOwnThread {
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
                    let nice = Self.niceValue()
                    seen.withLock {
                        $0.order.append(index)
                        $0.niceValues.insert(nice)
                        $0.concurrent -= 1
                    }
                }
            }
            queue.drain()
            queue.stop()
            return (seen.withLock { $0 }, Self.niceValue())
        }
        #expect(result.order == Array(0..<200))
        #expect(result.most == 1)
        // drain() may have run the last ones on the caller (at its priority); the thread ran at least the first.
        #expect(result.niceValues.contains(19))
        #if os(Linux)
        #expect(callerNice == 0)  // the caller's is untouched
        #endif
    }

    /// The calling thread's nice value (19 where there is none to read).
    static func niceValue() -> Int32 {
        #if os(Linux)
        getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
        #else
        19
        #endif
    }

    @Test("drain waits for the job under way, then runs what is queued itself, without waiting for the thread")
    func drainRunsQueuedJobsOnTheCaller() async throws {
        let (waitedOut, log) = try await onOwnThread {
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
            let waitedOut = drained.wait(timeout: .now() + .milliseconds(200)) == .timedOut
            release.signal()
            drained.wait()
            queue.stop()
            return (waitedOut, log.withLock { $0 })
        }
        #expect(waitedOut)  // the first job still held it
        #expect(log == ["first", "second"])
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
