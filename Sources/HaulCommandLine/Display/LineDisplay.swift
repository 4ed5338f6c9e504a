import Foundation
import Haul
import HaulOperations

/// Not a terminal (a pipe, a log file, CI): one plain line per start, retry, dropped source, finish and failure, no
/// escape codes. Failures go to standard error; with `quiet` nothing else is written.
final class LineDisplay: Display {
    private let started = Locked([DownloadID: ContinuousClock.Instant]())
    /// Downloads that dropped a source: their `done` line names the one that served the file.
    private let switched = Locked(Set<DownloadID>())
    private let quiet: Bool
    /// With `-v`: a failure's line is followed by the transport library's own error.
    private let verbose: Bool
    /// The downloads' names, so no `.queued` event is needed for one.
    private let names: NameBook

    init(quiet: Bool, verbose: Bool = false, names: NameBook) {
        self.quiet = quiet
        self.verbose = verbose
        self.names = names
    }

    /// The lines it writes: only failures when quiet; waits for a request's turn and segments only when verbose. No
    /// progress: it draws none.
    var interest: Set<QueueEvent.Kind> {
        if quiet { return [.failed] }
        let kinds: Set<QueueEvent.Kind> = [.started, .retrying, .sourceDropped, .revalidated, .finished, .failed]
        return verbose ? kinds.union([.throttled, .segment]) : kinds
    }

    func handle(_ event: QueueEvent) {
        guard case .download(let id, let event) = event else { return }
        let name = names.name(of: id)
        if event.isTerminal { names.remove(id) }
        let started = started.withLock { started in
            if case .started(1, _) = event { started[id] = .now }
            return event.isTerminal ? started.removeValue(forKey: id) : started[id]
        }
        switch event {
        case .started(let attempt, let resumingAt):
            guard attempt == 1, !quiet else { return }
            let resuming = resumingAt > 0 ? " (resuming at \(Format.bytes(resumingAt)))" : ""
            Console.out("start  \(name)\(resuming)\n")
        case .retrying(let attempt, let delay, let error):
            guard !quiet else { return }
            Console.out("retry  \(name): \(error.message); attempt \(attempt) in \(Format.elapsed(delay))\n")
        case .sourceDropped(let url, let reason, let next):
            guard !quiet else { return }
            switched.withLock { _ = $0.insert(id) }
            Console.out(
                Format.printable("drop   \(name): \(Format.sourceDropped(url: url, reason: reason, next: next))") + "\n"
            )
        case .revalidated(let modified):
            guard modified, !quiet else { return }
            Console.out("update \(name): the server has a new copy\n")
        case .throttled(let reason, let delay):
            guard verbose else { return }
            Console.out("wait   \(name): \(Format.elapsed(delay)) (\(Format.throttleReason(reason)))\n")
        case .segment(let segment):
            guard verbose else { return }
            Console.out(Format.printable("segment \(name): \(Format.segment(segment))") + "\n")
        case .finished(let result):
            // A file that came from a source after another was dropped says which.
            let switched = switched.withLock { $0.remove(id) } != nil
            guard !quiet else { return }
            if result.notModified {
                Console.out("skip   \(name): unchanged on the server (304)\n")
            } else if result.keptExisting {
                Console.out("skip   \(name): exists, left as it is (--on-conflict skip)\n")
            } else if result.skipped {
                Console.out("skip   \(name): already complete\n")
            } else {
                let time = started.map { " in \(Format.elapsed(.now - $0))" } ?? ""
                let digest = result.sha256.map { "  sha256=\($0)" } ?? ""
                let source = switched ? Format.printable("  from \(result.source.redactedString)") : ""
                Console.out(
                    "done   \(result.fileURL.lastPathComponent)  \(Format.bytes(result.size))\(time)\(digest)\(source)\n"
                )
            }
        case .failed(let error):
            switched.withLock { _ = $0.remove(id) }
            guard !error.isCancellation else { return }
            Console.err("fail   \(name): \(error.message)\n")
            if verbose, let underlying = error.underlying {
                Console.err(Format.printable("       \(underlying)") + "\n")
            }
        case .progress, .redirected:
            break
        }
    }

    func close() {}

    func summarize(_ report: RunReport) {
        if !quiet { Console.out(report.text) }
    }
}
