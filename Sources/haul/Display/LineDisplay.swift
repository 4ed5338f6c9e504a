import Foundation
import Haul
import HaulOperations

/// Not a terminal (a pipe, a log file, CI): one plain line per start, retry, finish and failure, no escape
/// codes. Failures go to standard error; with `quiet` nothing else is written.
final class LineDisplay: Display {
    private struct State {
        var names: [DownloadID: String] = [:]
        var started: [DownloadID: ContinuousClock.Instant] = [:]
    }

    private let state = Locked(State())
    private let quiet: Bool

    init(quiet: Bool) {
        self.quiet = quiet
    }

    func handle(_ event: QueueEvent) {
        guard case .download(let id, let event) = event else {
            if case .queued(let id, let request) = event {
                state.withLock { $0.names[id] = displayName(of: request) }
            }
            return
        }
        let (name, started) = state.withLock { state in
            if case .started(1, _) = event { state.started[id] = .now }
            return (state.names[id] ?? id.description, state.started[id])
        }
        switch event {
        case .started(let attempt, let resumingAt):
            guard attempt == 1, !quiet else { return }
            let resuming = resumingAt > 0 ? " (resuming at \(Format.bytes(resumingAt)))" : ""
            Console.out("start  \(name)\(resuming)\n")
        case .retrying(let attempt, let delay, let error):
            guard !quiet else { return }
            Console.out("retry  \(name): \(error.message); attempt \(attempt) in \(Format.elapsed(delay))\n")
        case .finished(let result):
            guard !quiet else { return }
            if result.skipped {
                Console.out("skip   \(name): already complete\n")
            } else {
                let time = started.map { " in \(Format.elapsed(.now - $0))" } ?? ""
                Console.out("done   \(result.fileURL.lastPathComponent)  \(Format.bytes(result.size))\(time)\n")
            }
        case .failed(let error):
            guard !error.isCancellation else { return }
            Console.err("fail   \(name): \(error.message)\n")
        case .progress, .redirected:
            break
        }
    }

    func close() {}

    func summarize(_ report: RunReport) {
        if !quiet { Console.out(report.text) }
    }
}
