import Foundation
import Haul

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One rendering of a run's events: live bars on a terminal, plain lines otherwise, or NDJSON. The queue's
/// events arrive in order on one task; ``tick()`` comes from another, so implementations lock their state.
protocol Display: Sendable {
    /// The kinds of events it draws: the run subscribes to these only.
    var interest: Set<QueueEvent.Kind> { get }
    /// Takes one event of the queue.
    func handle(_ event: QueueEvent)
    /// Called about 10 times a second, so a display can redraw speeds and times even when no byte moves.
    func tick()
    /// Ends the display (clears the bars, shows the cursor); called once, before the summary.
    func close()
    /// Writes the end-of-run summary.
    func summarize(_ report: RunReport)
}

extension Display {
    var interest: Set<QueueEvent.Kind> { QueueEvent.Kind.all }
    func tick() {}
}

/// Writes whole strings to standard output or standard error, unbuffered (a frame of the display is one write,
/// so it never tears; a line reaches a pipe at once).
enum Console {
    /// Writes text to standard output, made safe to print (see ``Format/printable(_:)``).
    static func out(_ text: String) { write(1, Format.printable(text)) }
    /// Writes text to standard error, made safe to print.
    static func err(_ text: String) { write(2, Format.printable(text)) }
    /// Writes `output` as it is: the display's own escape sequences, and JSON (which escapes control characters).
    /// Text from outside in it must have been made printable already.
    static func raw(_ output: String) { write(1, output) }
    /// Writes `json` as one line to standard output, the C1 controls and line separators in its strings escaped
    /// (``JSONDisplay/escapingC1(_:)``): the `--json` output of every command.
    static func jsonLine(_ json: String) { raw(JSONDisplay.escapingC1(json) + "\n") }
    /// Writes `output` as it is to standard error: a JSON log line.
    static func rawErr(_ output: String) { write(2, output) }

    private static func write(_ descriptor: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { buffer -> Int in
                guard let base = buffer.baseAddress else { return 0 }
                #if canImport(Glibc)
                return Glibc.write(descriptor, base + offset, buffer.count - offset)
                #else
                return Darwin.write(descriptor, base + offset, buffer.count - offset)
                #endif
            }
            if written < 0 {
                if errno == EINTR { continue }
                // Nobody reads standard output any more: the run stops, as curl and wget do.
                if errno == EPIPE && descriptor == 1 { Interruption.outputClosed() }
                return
            }
            offset += written
        }
    }

    /// Whether standard output is a terminal that understands cursor movement.
    static var isInteractiveTerminal: Bool {
        guard isatty(1) == 1 else { return false }
        let term = ProcessInfo.processInfo.environment["TERM"] ?? ""
        return !term.isEmpty && term != "dumb"
    }

    /// Columns and rows of the terminal on standard output (80 x 24 when it cannot tell).
    static var terminalSize: (columns: Int, rows: Int) {
        var size = winsize()
        if ioctl(1, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 {
            return (Int(size.ws_col), max(Int(size.ws_row), 3))
        }
        let environment = ProcessInfo.processInfo.environment
        return (environment["COLUMNS"].flatMap(Int.init) ?? 80, environment["LINES"].flatMap(Int.init) ?? 24)
    }
}

/// How a run ended, for the summary and the exit code.
struct RunReport: Sendable {
    struct Failure: Sendable {
        var name: String
        var error: DownloadError
    }

    /// Counts and sums, not the results themselves: a summary needs no more.
    var downloaded = 0
    var skipped = 0
    /// Files the server confirmed unchanged (`304`, with `-N`).
    var unchanged = 0
    /// Files skipped because one was already there (`--on-conflict skip`), not known to be this download's.
    var keptExisting = 0
    var failures: [Failure] = []
    var cancelled = 0
    var interrupted = false
    /// Whether what the run wrote after its downloads (the cookie jar) failed.
    var finishingFailed = false
    var elapsed: Duration = .zero
    var bytesTransferred: Int64 = 0
    var bytesOnDisk: Int64 = 0

    var total: Int { downloaded + skipped + keptExisting + unchanged + failures.count + cancelled }

    /// Counts a successful download (or one skipped as already complete, or left as it was found).
    mutating func add(_ result: DownloadResult) {
        if result.notModified {
            unchanged += 1
        } else if result.keptExisting {
            keptExisting += 1
        } else if result.skipped {
            skipped += 1
        } else {
            downloaded += 1
            bytesTransferred += result.bytesTransferred
        }
        bytesOnDisk += result.size
    }

    /// 0 all succeeded; 1 at least one failed; 130 interrupted; 141 standard output closed.
    var exitCode: Int32 {
        if Interruption.stoppedByClosedOutput { return 141 }
        if interrupted { return 130 }
        // A download not finished in a run nobody stopped (an entry left out: its list changed in place) failed too.
        return failures.isEmpty && cancelled == 0 && !finishingFailed ? 0 : 1
    }

    var averageSpeed: Double {
        elapsed.seconds > 0 ? Double(bytesTransferred) / elapsed.seconds : 0
    }

    /// The human summary: counts, bytes, time, average speed, then each failure with its reason.
    var text: String {
        var parts = ["\(downloaded) downloaded"]
        if skipped > 0 { parts.append("\(skipped) already complete") }
        if keptExisting > 0 { parts.append("\(keptExisting) left as found") }
        if unchanged > 0 { parts.append("\(unchanged) unchanged on the server") }
        if !failures.isEmpty { parts.append("\(failures.count) failed") }
        if cancelled > 0 { parts.append("\(cancelled) not finished") }
        var text = interrupted ? "Interrupted: " : "Done: "
        text += parts.joined(separator: ", ") + " of \(total) files; "
        text += "\(Format.bytes(bytesTransferred)) in \(Format.elapsed(elapsed)) (\(Format.speed(averageSpeed)))\n"
        for failure in failures {
            text += "  failed: \(failure.name): \(failure.error.message)"
            if let url = failure.error.url { text += " (\(url.redactedString))" }
            text += "\n"
        }
        if interrupted {
            text += "Run the same command again to finish: completed files are kept, partial ones resume.\n"
        }
        return text
    }
}

/// The name a download is shown by: the planned file name, else the URL's last component.
func displayName(of request: DownloadRequest) -> String {
    // The planned file's name, without building its URL: in a directory, it is the URL's name.
    if case .file(let file) = request.destination { return file.lastPathComponent }
    return DownloadRequest.fileName(for: request.url) ?? request.url.redactedString
}
