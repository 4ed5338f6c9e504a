import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A serial queue of work on a thread of its own that runs at the lowest CPU priority (nice 19 on Linux,
/// background quality of service elsewhere): the journal's folds into SQLite, which can wait, take the time the
/// downloads leave idle instead of a share of the cores they are busy on: a batch of small downloads keeps the
/// cores busy, and a fold at normal priority would push the downloads' own work aside (bench/journal).
///
/// A low-priority thread can be held up for long while the machine is busy, so whoever must wait for the queue
/// (``drain()``) does not wait for it: it runs what is queued itself, after the job under way.
final class BackgroundThread: @unchecked Sendable {  // every variable is guarded by `condition`
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    /// Whether a job is being run (by the thread or by ``drain()``).
    private var running = false
    private var started = false
    private var stopping = false
    private let name: String

    /// A queue whose thread, once started, is named `name`.
    init(name: String) {
        self.name = name
    }

    /// Queues `job`; starts the thread on the first. After ``stop()``, runs it on the caller's thread (after
    /// everything queued).
    func async(_ job: @escaping @Sendable () -> Void) {
        condition.lock()
        defer { condition.unlock() }
        jobs.append(job)
        if stopping {
            condition.unlock()
            drain()
            condition.lock()
            return
        }
        if !started {
            started = true
            let thread = Thread { [self] in work() }
            thread.name = name
            thread.qualityOfService = .background
            thread.start()
        }
        condition.broadcast()
    }

    /// Returns once everything queued before has run: waits for the job under way, then runs the queued ones on
    /// the caller's thread, in order.
    func drain() {
        condition.lock()
        defer { condition.unlock() }
        while true {
            while running { condition.wait() }
            guard !jobs.isEmpty else { return }
            run(jobs.removeFirst())
        }
    }

    /// Lets the thread end once the jobs queued so far have run (it keeps the queue alive until then).
    func stop() {
        condition.lock()
        defer { condition.unlock() }
        stopping = true
        condition.broadcast()
    }

    private func work() {
        #if os(Linux)
        // The calling thread's nice value (per thread on Linux); raising it needs no privilege.
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)
        #endif
        condition.lock()
        defer { condition.unlock() }
        while true {
            while (jobs.isEmpty || running) && !(stopping && jobs.isEmpty) { condition.wait() }
            if jobs.isEmpty { return }  // stopping
            run(jobs.removeFirst())
        }
    }

    /// Runs `job` without the lock (called with it held).
    private func run(_ job: @Sendable () -> Void) {
        running = true
        condition.unlock()
        job()
        condition.lock()
        running = false
        condition.broadcast()
    }
}
