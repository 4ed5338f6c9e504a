import NIOCore

/// Runs Swift tasks on one event loop (a download's task on the loop its connection lives on).
///
/// Why: a download's work alternates between the event loop (sending, receiving) and its task (writing,
/// publishing). On Swift's global executor every alternation is a switch between threads, and for a 4 KiB file
/// those switches and the wake-ups behind them (an eventfd write to wake the loop, a futex to wake a pool thread)
/// cost more than the download's own work. On the loop itself a resumed task runs right after the read that
/// resumed it, on the same thread.
final class LoopExecutor: TaskExecutor {
    let loop: any EventLoop

    init(_ loop: any EventLoop) {
        self.loop = loop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
