import ArgumentParser
import Synchronization
import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulNIO
import HaulOperations
import Logging

#if canImport(Darwin)
import HaulURLSession
#endif

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Which transport moves the bytes.
enum TransportChoice: String, CaseIterable, ExpressibleByArgument {
    /// Haul's own HTTP/1.1 client (HaulNIO) for http and https, AsyncHTTPClient for HTTP/2: the default.
    case nio
    case asyncHTTPClient = "async-http-client"
    #if canImport(Darwin)
    /// The system's URLSession (Apple platforms: on Linux it would bring libcurl and its libraries into every start).
    case urlSession = "urlsession"
    #endif

    /// Whether the transport trusts the system's store only and chooses the HTTP version itself.
    var isSystemStack: Bool {
        #if canImport(Darwin)
        self == .urlSession
        #else
        false
        #endif
    }

    /// The choices as `--help` lists them.
    static let names = allCases.map(\.rawValue).joined(separator: "|")
}

/// How `haul get` (and `haul demo`) run a plan.
struct RunSettings {
    var directory: URL
    var maxConcurrent = 4
    var perHost: Int?
    var retries = 3
    var connectTimeout: Duration = .seconds(10)
    var stallTimeout: Duration = .seconds(30)
    var transport = TransportChoice.nio
    /// How `https` is verified; `--insecure` prints a warning when the run starts.
    var tls = TLSSettings.default
    var httpVersion = HTTPVersionPreference.automatic
    var output = OutputMode.automatic
    var quiet = false
    var verbose = false
    /// `--sha256`: every file's digest computed and shown.
    var computesSHA256 = false
    /// Where completed and partial downloads are remembered between runs; `nil` for nowhere.
    var journal: (any Journal)?
    /// The proxies (`--proxy`, `--noproxy`, the environment).
    var proxy = ProxyConfiguration.none
    /// The netrc file's credentials, for requests without their own (a redirect to another host included).
    var credentials: (any CredentialProvider)?
    /// The cookies sent and kept (`-b`, `--cookie-jar`).
    var cookies: CookieJar?
    /// `-N`: files the journal shows completed are revalidated.
    var revalidates = false
    /// `--remote-time` (on) / `--no-remote-time`.
    var usesRemoteTime = true
    /// Off with `--no-keep-partial`.
    var keepsPartialOnFailure = true
    /// `--limit-rate`, for the whole run.
    var maxBytesPerSecond: Int64?
    /// `--rate`, `--per-host-rate`, `--wait`, `--random-wait`.
    var pacing = RequestPacing()
    /// `--max-time`.
    var timeLimit: Duration?
    /// `--speed-limit`, `--speed-time`.
    var minimumSpeed: MinimumSpeed?

    enum OutputMode {
        case automatic, json
    }
}

/// Runs planned downloads through one `DownloadQueue`, renders its events, handles SIGINT/SIGTERM, and
/// reports. Holds no download logic: everything about one download is the engine's.
enum GetRun {
    /// Runs the `count` downloads of `requests`, read as the queue has room for them; `names` is filled as they
    /// are read.
    static func run<Requests: AsyncSequence & Sendable>(
        _ requests: Requests, count: Int, names: NameBook, settings: RunSettings
    ) async -> RunReport where Requests.Element == DownloadRequest {
        let display = makeDisplay(settings, names: names, plannedFiles: count)
        let engine = makeEngine(settings)
        let ownedTransport = engine.ownedTransport
        let queue = DownloadQueue(
            downloader: Downloader(transport: engine.transport, configuration: engine.configuration),
            // Rerunning the command is how `haul get` resumes, so the queue need not record the requests.
            configuration: .init(
                maxConcurrentDownloads: settings.maxConcurrent, perHostLimit: settings.perHost, recordsRequests: false))

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
            try? await queue.download(requests, window: max(1024, 4 * settings.maxConcurrent)) { finished in
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
        display.summarize(report)
        return report
    }

    /// How a run of `settings` moves bytes: its transport, the engine's configuration, and the AsyncHTTPClient the
    /// transport started (shut down once the run is over), if any. Warns on standard error about `--insecure`.
    static func makeEngine(_ settings: RunSettings) -> Engine {
        let transport: any HTTPTransport
        let ownedTransport: AsyncHTTPClientTransport?
        switch settings.transport {
        case .nio where settings.httpVersion != .http2:
            // http and https are NIOTransport's own, and the plan holds nothing else: no fallback to start and stop.
            transport = NIOTransport()
            ownedTransport = nil
        case .nio, .asyncHTTPClient:
            let client = AsyncHTTPClientTransport(
                maximumConnectionsPerHost: max(settings.maxConcurrent, 1), connectTimeout: settings.connectTimeout)
            transport = settings.transport == .nio ? NIOTransport(fallback: client) : client
            ownedTransport = client
        #if canImport(Darwin)
        case .urlSession:
            transport = URLSessionTransport(maximumConnectionsPerHost: max(settings.maxConcurrent, 1))
            ownedTransport = nil
        #endif
        }
        var configuration = Downloader.Configuration()
        configuration.retryPolicy.maxRetries = settings.retries
        configuration.connectTimeout = settings.connectTimeout
        configuration.stallTimeout = settings.stallTimeout
        configuration.tls = settings.tls
        configuration.httpVersion = settings.httpVersion
        configuration.computesSHA256 = settings.computesSHA256
        if !settings.tls.verifiesPeer {
            Console.err(
                "haul: warning: --insecure: server certificates are not verified; anyone on the path can "
                    + "read and change what is downloaded\n")
        }
        configuration.keepsPartialOnCancel = true
        configuration.journal = settings.journal
        configuration.proxy = settings.proxy
        configuration.credentials = settings.credentials
        configuration.cookies = settings.cookies
        configuration.revalidatesCompletedFiles = settings.revalidates
        configuration.usesRemoteModificationTime = settings.usesRemoteTime
        configuration.keepsPartialOnFailure = settings.keepsPartialOnFailure
        configuration.maxBytesPerSecond = settings.maxBytesPerSecond
        configuration.pacing = settings.pacing
        configuration.timeLimit = settings.timeLimit
        configuration.minimumSpeed = settings.minimumSpeed
        if settings.verbose {
            var logger = Logger(label: "haul", factory: { StreamLogHandler.standardError(label: $0) })
            logger.logLevel = .debug
            configuration.logger = logger
        }
        return Engine(transport: transport, configuration: configuration, ownedTransport: ownedTransport)
    }

    struct Engine {
        var transport: any HTTPTransport
        var configuration: Downloader.Configuration
        var ownedTransport: AsyncHTTPClientTransport?
    }

    static func makeDisplay(_ settings: RunSettings, names: NameBook, plannedFiles: Int) -> any Display {
        if settings.output == .json { return JSONDisplay(names: names) }
        // Verbose logs go to standard error line by line; bars redrawn over them would garble both.
        if settings.quiet || settings.verbose || !Console.isInteractiveTerminal {
            return LineDisplay(quiet: settings.quiet, verbose: settings.verbose, names: names)
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

    /// Takes over SIGINT, SIGTERM and SIGHUP (counted) and SIGPIPE (ignored) for the rest of the process.
    static func install() {
        restoresCursor.store(Console.isInteractiveTerminal, ordering: .sequentiallyConsistent)
        var action = sigaction()
        #if canImport(Glibc)
        action.__sigaction_handler.sa_handler = handleInterrupt
        #else
        action.__sigaction_u.__sa_handler = handleInterrupt
        #endif
        sigemptyset(&action.sa_mask)
        action.sa_flags = SA_RESTART
        for signalNumber in [SIGINT, SIGTERM, SIGHUP] { sigaction(signalNumber, &action, nil) }
        signal(SIGPIPE, SIG_IGN)
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
    _exit(130)
}
