import Foundation
import Haul
import HaulOperations

/// `--json`: one JSON object per line on standard output — `start`, `progress` (throttled like the
/// events), `throttle`, `revalidate`, `segment` (a connection of a segmented download: `change` is `start`, `finish`,
/// `fail` or `drop`, with `connection`, `from`, `to` and `url`), `retry`, `drop` (a source failed for good: `url`,
/// `reason`, and `next`, the source asked next), `finish` (`source`: the request's URL or the mirror that served the
/// file), `fail` and a last `summary` — for scripts to read line by line.
final class JSONDisplay: Display {
    private let names: NameBook
    private let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    /// The fields of every line; absent ones are left out.
    private struct Line: Encodable {
        var event: String
        var id: UInt64?
        var name: String?
        var url: String?
        var source: String?
        var next: String?
        var attempt: Int?
        var resumeFrom: Int64?
        var bytes: Int64?
        var total: Int64?
        var bytesPerSecond: Double?
        var delaySeconds: Double?
        var path: String?
        var size: Int64?
        var sha256: String?
        var skipped: Bool?
        var notModified: Bool?
        var keptExisting: Bool?
        var modified: Bool?
        var reason: String?
        var change: String?
        var connection: Int?
        var from: Int64?
        var to: Int64?
        var code: String?
        var status: Int?
        var error: String?
        // summary
        var files: Int?
        var downloaded: Int?
        var alreadyComplete: Int?
        var leftAsFound: Int?
        var unchanged: Int?
        var failed: Int?
        var notFinished: Int?
        var bytesTransferred: Int64?
        var seconds: Double?
        var interrupted: Bool?
        var exitCode: Int32?
    }

    init(names: NameBook) {
        self.names = names
    }

    /// Everything about one download's transfer: not `queued` (names come from the ``NameBook``), the batch's
    /// progress, or pauses (`haul get` makes none).
    var interest: Set<QueueEvent.Kind> {
        QueueEvent.Kind.all.subtracting([.queued, .batchProgress, .paused, .resumed])
    }

    func handle(_ event: QueueEvent) {
        switch event {
        case .queued, .batchProgress, .paused, .resumed:
            break
        case .download(let id, let event):
            let name = names.name(of: id)
            if event.isTerminal { names.remove(id) }
            var line = Line(event: "", id: id.number, name: name)
            switch event {
            case .started(let attempt, let resumingAt):
                line.event = "start"
                line.attempt = attempt
                line.resumeFrom = resumingAt
            case .progress(let progress):
                line.event = "progress"
                line.bytes = progress.bytesWritten
                line.total = progress.totalBytes
                line.bytesPerSecond = (progress.bytesPerSecond * 10).rounded() / 10
            case .retrying(let attempt, let delay, let error):
                line.event = "retry"
                line.attempt = attempt
                line.delaySeconds = delay.seconds
                line.error = error.message
                line.code = error.code.description
                line.status = error.status
            case .throttled(let reason, let delay):
                line.event = "throttle"
                line.reason = reason.rawValue
                line.delaySeconds = delay.seconds
            case .segment(let segment):
                line.event = "segment"
                line.connection = segment.connection
                line.from = segment.range.lowerBound
                line.to = segment.range.upperBound
                line.url = segment.url.redactedString
                switch segment.change {
                case .started: line.change = "start"
                case .finished: line.change = "finish"
                case .failed(let error):
                    line.change = "fail"
                    line.error = error.message
                    line.code = error.code.description
                    line.status = error.status
                case .sourceDropped(let reason):
                    line.change = "drop"
                    line.reason = reason
                }
            case .sourceDropped(let url, let reason, let next):
                line.event = "drop"
                line.url = url.redactedString
                line.reason = reason
                line.next = next.redactedString
            case .revalidated(let modified):
                line.event = "revalidate"
                line.modified = modified
            case .finished(let result):
                line.event = "finish"
                line.url = result.finalURL.redactedString
                line.source = result.source.redactedString
                line.path = result.fileURL.path
                line.size = result.size
                line.sha256 = result.sha256
                line.attempt = result.attempts
                line.skipped = result.skipped
                if result.notModified { line.notModified = true }
                if result.keptExisting { line.keptExisting = true }
            case .failed(let error):
                line.event = "fail"
                line.url = error.url?.redactedString
                line.code = error.code.description
                line.status = error.status
                line.error = error.message
            case .redirected:
                return
            }
            emit(line)
        }
    }

    func close() {}

    func summarize(_ report: RunReport) {
        var line = Line(event: "summary")
        line.files = report.total
        line.downloaded = report.downloaded
        line.alreadyComplete = report.skipped
        line.leftAsFound = report.keptExisting
        line.unchanged = report.unchanged
        line.failed = report.failures.count
        line.notFinished = report.cancelled
        line.bytesTransferred = report.bytesTransferred
        line.size = report.bytesOnDisk
        line.seconds = (report.elapsed.seconds * 1000).rounded() / 1000
        line.interrupted = report.interrupted
        line.exitCode = report.exitCode
        emit(line)
    }

    private func emit(_ line: Line) {
        guard let data = try? encoder.encode(line) else { return }
        Console.jsonLine(String(decoding: data, as: UTF8.self))
    }

    /// `json` with the C1 controls, DEL and the line and paragraph separators (which the encoder leaves raw, JSON
    /// allowing them) escaped, as `--log-format json` escapes them: a reason phrase's U+009B is a CSI to a terminal
    /// showing the line, and U+2028 ends a line for some readers. Outside strings JSON has none of them.
    static func escapingC1(_ json: String) -> String {
        guard json.unicodeScalars.contains(where: Format.isRawInJSONButNotPrintable) else { return json }
        var out = String.UnicodeScalarView()
        for scalar in json.unicodeScalars {
            if Format.isRawInJSONButNotPrintable(scalar) {
                out.append(contentsOf: String(format: "\\u%04x", scalar.value).unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }
}
