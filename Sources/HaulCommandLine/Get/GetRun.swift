import ArgumentParser
import Synchronization
import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Runs planned downloads through one `DownloadQueue`, renders its events, handles SIGINT/SIGTERM, and
/// reports. Holds no download logic: everything about one download is the engine's.
enum GetRun {
    /// Runs the `count` downloads of `requests`, read as the queue has room for them, on `engine` through a queue
    /// of `configuration`, drawn as `output` asks; `names` is filled as they are read.
    static func run<Requests: AsyncSequence & Sendable>(
        _ requests: Requests, count: Int, names: NameBook, engine: Engine,
        queue configuration: DownloadQueue.Configuration,
        output: OutputOptions, finishing: () -> Bool = { true }
    ) async -> RunReport where Requests.Element == DownloadRequest {
        let display = makeDisplay(output, names: names, plannedFiles: count)
        let ownedTransport = engine.ownedTransport
        let queue = DownloadQueue(
            downloader: Downloader(transport: engine.transport, configuration: engine.configuration),
            configuration: configuration)

        let started = ContinuousClock.now
        // Subscribed before adding, so no event is missed; only the kinds the display draws (events nobody reads
        // cost more than a third of the CPU of a batch of small files). The stream ends after the queue is idle.
        let events = queue.events(including: display.interest)
        let consumer = Task {
            for await event in events { display.handle(event) }
        }
        let ticker = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(100))
                display.tick()
            }
        }
        // Results are counted as they come, and nothing else of a finished download is kept. A display forgets the
        // name of a download whose end it draws; those it does not draw are forgotten here.
        let displayForgetsSuccesses = display.interest.contains(.finished)
        let counted = Locked(RunReport())
        let results = Task {
            // Thrown only when a signal cancelled the run: every download read has ended (partials kept) by then.
            // The window keeps every slot busy at any -j, and lets other hosts go ahead of one held to --per-host.
            try? await queue.download(requests, window: max(1024, 4 * configuration.maxConcurrentDownloads)) {
                finished in
                switch finished.result {
                case .success(let result):
                    counted.withLock { $0.add(result) }
                    if !displayForgetsSuccesses { names.remove(finished.id) }
                case .failure(let error) where error.isCancellation:
                    counted.withLock { $0.cancelled += 1 }
                case .failure(let error):
                    let failure = RunReport.Failure(name: displayName(of: finished.request), error: error)
                    counted.withLock { $0.failures.append(failure) }
                }
            }
        }
        let interruption = Interruption { results.cancel() }
        await results.value
        var report = counted.withLock { $0 }
        await queue.waitUntilIdle()
        queue.finishEvents()  // every event of the run is buffered by now: the consumer draws them and ends
        await consumer.value
        ticker.cancel()
        interruption.stop()
        display.close()
        try? await ownedTransport?.shutdown()

        report.interrupted = interruption.happened
        report.elapsed = .now - started
        report.cancelled += count - report.total
        // What the run still has to write (the cookie jar) counts in the summary's exit status.
        report.finishingFailed = !finishing()
        display.summarize(report)
        return report
    }

    /// The display `output` asks for: NDJSON, plain lines, or bars on an interactive terminal.
    static func makeDisplay(_ output: OutputOptions, names: NameBook, plannedFiles: Int) -> any Display {
        if output.json { return JSONDisplay(names: names) }
        // Verbose logs go to standard error line by line; bars redrawn over them would garble both.
        if output.quiet || output.verbose || !Console.isInteractiveTerminal {
            return LineDisplay(quiet: output.quiet, verbose: output.verbose, names: names)
        }
        return TerminalDisplay(names: names, plannedFiles: plannedFiles)
    }
}

/// SIGINT, SIGTERM and SIGHUP during a run, and standard output closing under it (a reader such as `head` that
/// has seen enough): the first cancels the downloads (partials are kept for the next run) and the run ends with
/// exit status 130 (141 when standard output closed); a second signal exits at once.
///
/// ``install()`` puts a plain `sigaction` handler in place as the command starts, before the input is read: a signal
/// before the downloads start exits 130 at once (nothing to stop or keep yet), and one during them is counted. The
/// handler only counts (and, to exit, restores the cursor and `_exit`s: both async-signal-safe). A task polls the
/// count once the downloads run.
/// SIGPIPE is ignored: a closed standard output shows as `EPIPE` on a write (see ``Console``) and stops the run the
/// same way, every time, instead of killing the process at whichever write comes first.
final class Interruption: Sendable {
    private let poller: Task<Void, Never>

    /// Takes over SIGINT, SIGTERM and SIGHUP (counted) and SIGPIPE (ignored) for the rest of the process. A signal
    /// before anything runs ends the process with `earlyExitStatus`: 130, as a shell reports an interrupted command,
    /// or a service's status for a stop by a signal (`haul daemon`'s 0).
    ///
    /// SIGHUP the process was started ignoring stays ignored: that is what `nohup` asks for, so that a run outlives
    /// the terminal it was started from (as wget and the shell's own commands do).
    static func install(earlyExitStatus: Int32 = 130) {
        earlyExit.store(earlyExitStatus, ordering: .sequentiallyConsistent)
        restoresCursor.store(Console.isInteractiveTerminal, ordering: .sequentiallyConsistent)
        var action = sigaction()
        #if canImport(Glibc)
        action.__sigaction_handler.sa_handler = handleInterrupt
        #else
        action.__sigaction_u.__sa_handler = handleInterrupt
        #endif
        sigemptyset(&action.sa_mask)
        action.sa_flags = SA_RESTART
        for signalNumber in [SIGINT, SIGTERM, SIGHUP] where signalNumber != SIGHUP || !isIgnored(SIGHUP) {
            sigaction(signalNumber, &action, nil)
        }
        signal(SIGPIPE, SIG_IGN)
    }

    /// Whether `signalNumber` is ignored now.
    private static func isIgnored(_ signalNumber: Int32) -> Bool {
        var current = sigaction()
        guard sigaction(signalNumber, nil, &current) == 0 else { return false }
        #if canImport(Glibc)
        let handler = current.__sigaction_handler.sa_handler
        #else
        let handler = current.__sigaction_u.__sa_handler
        #endif
        return unsafeBitCast(handler, to: Int.self) == unsafeBitCast(SIG_IGN, to: Int.self)
    }

    /// Stops the run as a signal would (standard output closed).
    static func outputClosed() {
        closedOutput.store(true, ordering: .sequentiallyConsistent)
        interruptCount.add(1, ordering: .sequentiallyConsistent)
    }

    /// Whether the run was stopped because standard output closed.
    static var stoppedByClosedOutput: Bool { closedOutput.load(ordering: .sequentiallyConsistent) }

    /// Calls `onInterrupt` once a signal has come (at once if one came before). From here on a signal is counted:
    /// before, while the input is read and planned and nothing has been downloaded, it ends the process at once.
    init(onInterrupt: @escaping @Sendable () -> Void) {
        downloading.store(true, ordering: .sequentiallyConsistent)
        poller = Task {
            while !Task.isCancelled {
                if interruptCount.load(ordering: .sequentiallyConsistent) > 0 {
                    onInterrupt()
                    return
                }
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    /// Whether a signal came.
    var happened: Bool { interruptCount.load(ordering: .sequentiallyConsistent) > 0 }

    func stop() {
        poller.cancel()
    }
}

private let interruptCount = Atomic<Int>(0)
private let restoresCursor = Atomic<Bool>(false)
private let earlyExit = Atomic<Int32>(130)
private let closedOutput = Atomic<Bool>(false)

private let downloading = Atomic<Bool>(false)

private func handleInterrupt(_ signal: Int32) {
    let (_, count) = interruptCount.add(1, ordering: .sequentiallyConsistent)
    // Before the downloads start there is nothing to stop or keep; a read of the input may be blocked (a pipe, a
    // FIFO), where a counted signal would go unnoticed.
    guard count >= 2 || !downloading.load(ordering: .sequentiallyConsistent) else { return }
    if restoresCursor.load(ordering: .sequentiallyConsistent) {
        let show: StaticString = "\u{1B}[?25h\n"
        _ = write(1, show.utf8Start, show.utf8CodeUnitCount)
    }
    _exit(earlyExit.load(ordering: .sequentiallyConsistent))
}
