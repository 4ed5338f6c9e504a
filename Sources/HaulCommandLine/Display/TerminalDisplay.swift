import Haul
import HaulOperations

/// Live bars on a terminal: one line per running download (name, bar, bytes, speed, time left) and a total
/// line (files k/n, bytes, speed, time left), redrawn at most 10 times a second, fitted to the terminal's width
/// (read at every frame, so resizing works), erased by ``close()``. Failures and retries are printed above the
/// bars and stay.
final class TerminalDisplay: Display {
    private struct Row {
        var name: String
        var progress = DownloadProgress(bytesWritten: 0, totalBytes: nil, bytesPerSecond: 0)
        var note: String?
    }

    private struct State {
        var rows: [DownloadID: Row] = [:]
        /// Running downloads in the order they started.
        var order: [DownloadID] = []
        var batch = BatchProgress()
        /// Downloads ended, counted from their events (see `whole(_:_:)`), and the bytes of those finished.
        var finished = 0
        var failed = 0
        var cancelled = 0
        var finishedBytes: Int64 = 0
        /// Lines to print above the bars at the next frame.
        var messages: [String] = []
        /// How many bar lines the last frame drew (the cursor sits below them).
        var drawnLines = 0
        var lastFrame: ContinuousClock.Instant?
        var dirty = false
        var closed = false
    }

    static let frameInterval: Duration = .milliseconds(100)

    private let state = Locked(State())
    private let names: NameBook
    /// The downloads of the whole run: the queue holds only a window of a long list, and its batch counts what was
    /// added since it was last idle.
    private let plannedFiles: Int
    private let started = ContinuousClock.now
    private let size: @Sendable () -> (columns: Int, rows: Int)

    init(
        names: NameBook, plannedFiles: Int = 0,
        size: @escaping @Sendable () -> (columns: Int, rows: Int) = { Console.terminalSize }
    ) {
        self.names = names
        self.plannedFiles = plannedFiles
        self.size = size
        Console.raw("\u{1B}[?25l")  // hide the cursor while bars are drawn
    }

    /// Everything but `queued` (names come from the ``NameBook``) and pauses (`haul get` makes none).
    var interest: Set<QueueEvent.Kind> { QueueEvent.Kind.all.subtracting([.queued, .paused, .resumed]) }

    func handle(_ event: QueueEvent) {
        state.withLock { state in
            apply(event, to: &state)
            state.dirty = true
            drawIfDue(&state)
        }
    }

    func tick() {
        state.withLock { state in
            // Speeds and times change even when no event comes (a stalled download): redraw twice a second.
            if let last = state.lastFrame, ContinuousClock.now - last >= .milliseconds(500) { state.dirty = true }
            drawIfDue(&state)
        }
    }

    func close() {
        state.withLock { state in
            guard !state.closed else { return }
            state.closed = true
            var frame = erase(state.drawnLines)
            for message in state.messages { frame += message + "\n" }
            state.messages = []
            state.drawnLines = 0
            Console.raw(frame + "\u{1B}[?25h")
        }
    }

    func summarize(_ report: RunReport) {
        Console.out(report.text)
    }

    private func apply(_ event: QueueEvent, to state: inout State) {
        switch event {
        case .queued, .paused, .resumed:
            break
        case .batchProgress(let batch):
            state.batch = batch
        case .download(let id, let event):
            let name = Format.printable(names.name(of: id))
            if event.isTerminal { names.remove(id) }
            switch event {
            case .started(_, let resumingAt):
                if state.rows[id] == nil {
                    state.order.append(id)
                    state.rows[id] = Row(name: name)
                }
                state.rows[id]?.progress.bytesWritten = resumingAt
                state.rows[id]?.note = nil
            case .progress(let progress):
                state.rows[id]?.progress = progress
                state.rows[id]?.note = nil
            case .retrying(let attempt, _, let error):
                state.rows[id]?.note = "retry \(attempt)"
                state.messages.append(Format.printable("retry  \(name): \(error.message)"))
            case .finished, .failed:
                switch event {
                case .finished(let result):
                    state.finished += 1
                    state.finishedBytes += result.size
                case .failed(let error) where error.isCancellation: state.cancelled += 1
                default: state.failed += 1
                }
                state.rows[id] = nil
                state.order.removeAll { $0 == id }
                if case .failed(let error) = event, !error.isCancellation {
                    state.messages.append(Format.printable("fail   \(name): \(error.message)"))
                }
            case .revalidated(let modified):
                state.rows[id]?.note = modified ? "new copy" : "unchanged"
            case .throttled(let reason, let delay):
                state.rows[id]?.note = "wait \(Format.elapsed(delay)): \(Format.throttleReason(reason))"
            case .sourceDropped(let url, let reason, let next):
                state.messages.append(
                    Format.printable("drop   \(name): \(Format.sourceDropped(url: url, reason: reason, next: next))"))
            case .segment(let segment):
                if case .sourceDropped = segment.change {
                    state.messages.append(Format.printable("drop   \(name): \(Format.segment(segment))"))
                }
            case .redirected:
                break
            }
        }
    }

    private func drawIfDue(_ state: inout State) {
        guard !state.closed, state.dirty else { return }
        let now = ContinuousClock.now
        if let last = state.lastFrame, now - last < Self.frameInterval { return }
        let (columns, rows) = size()
        // One column short of the edge: writing the last column makes some terminals wrap early.
        let width = max(columns - 1, 10)
        var frame = erase(state.drawnLines)
        for message in state.messages { frame += Format.fit(message, columns: width) + "\n" }
        state.messages = []
        let room = max(rows - 2, 1)
        let shown = state.order.count > room ? room - 1 : state.order.count
        let visible = state.order.prefix(shown).compactMap { state.rows[$0] }
        let batch = whole(state.batch, state)
        let totalLabel = Self.totalLabel(batch)
        // One label column for the whole frame, so the bars line up.
        let labelColumns = min(
            max((visible.map { Format.width($0.name) } + [Format.width(totalLabel), 12]).max() ?? 12, 12),
            max(width / 4, 10))
        var lines = visible.map { Self.line(for: $0, labelColumns: labelColumns, width: width) }
        if shown < state.order.count {
            lines.append(Format.fit("  … and \(state.order.count - shown) more running", columns: width))
        }
        lines.append(Self.totalLine(batch, label: totalLabel, labelColumns: labelColumns, width: width))
        for line in lines { frame += line + "\n" }
        state.drawnLines = lines.count
        state.lastFrame = now
        state.dirty = false
        Console.raw(frame)
    }

    /// Moves the cursor up to the first bar line and clears from there down.
    private func erase(_ lines: Int) -> String {
        lines > 0 ? "\u{1B}[\(lines)A\r\u{1B}[J" : "\r\u{1B}[J"
    }

    private static func line(for row: Row, labelColumns: Int, width: Int) -> String {
        let progress = row.progress
        return compose(
            label: row.name, labelColumns: labelColumns, fraction: progress.fractionCompleted,
            bytes: bytesText(progress.bytesWritten, of: progress.totalBytes),
            speed: Format.speed(progress.bytesPerSecond),
            tail: row.note ?? Format.clock(progress.estimatedTimeRemaining), width: width)
    }

    /// The batch as the whole run. The queue's batch counts what was added since it was last idle, which for a long
    /// list is a window of it (and a list read as downloads end may find the queue idle for a moment), so the files
    /// are counted here, from their ends, against the run's total; where the queue's batch covers a part of the run
    /// only, the bytes are counted here too, and the time left follows the pace of the files so far.
    private func whole(_ batch: BatchProgress, _ state: State) -> BatchProgress {
        var whole = batch
        whole.totalFiles = max(plannedFiles, batch.totalFiles)
        (whole.finishedFiles, whole.failedFiles, whole.cancelledFiles) = (state.finished, state.failed, state.cancelled)
        guard batch.totalFiles < plannedFiles || batch.completedFiles != whole.completedFiles else { return whole }
        whole.bytesWritten = state.finishedBytes + state.rows.values.reduce(0) { $0 + $1.progress.bytesWritten }
        whole.totalBytes = nil
        let completed = whole.completedFiles
        whole.estimatedTimeRemaining =
            completed > 0
            ? (ContinuousClock.now - started) * (Double(whole.totalFiles - completed) / Double(completed)) : nil
        return whole
    }

    static func totalLabel(_ batch: BatchProgress) -> String {
        var label = "All \(batch.completedFiles)/\(batch.totalFiles)"
        if batch.failedFiles > 0 { label += " (\(batch.failedFiles) failed)" }
        return label
    }

    static func totalLine(_ batch: BatchProgress, label: String, labelColumns: Int, width: Int) -> String {
        let fraction =
            batch.fractionCompleted
            ?? (batch.totalFiles > 0 ? Double(batch.completedFiles) / Double(batch.totalFiles) : nil)
        return compose(
            label: label, labelColumns: labelColumns, fraction: fraction,
            bytes: bytesText(batch.bytesWritten, of: batch.totalBytes), speed: Format.speed(batch.bytesPerSecond),
            tail: "ETA " + Format.clock(batch.estimatedTimeRemaining), width: width)
    }

    /// `2.35/6.00 MiB`, `699 KiB/3.00 MiB`, or `2.35 MiB` when the total is unknown.
    static func bytesText(_ written: Int64, of total: Int64?) -> String {
        guard let total else { return Format.bytes(written) }
        let (done, all) = (Format.bytes(written), Format.bytes(total))
        let unit = all.split(separator: " ").last.map(String.init) ?? ""
        if done.hasSuffix(" " + unit) { return "\(done.dropLast(unit.count + 1))/\(all)" }
        return "\(done)/\(all)"
    }

    /// `label  [#####-----]  bytes  speed  tail`, never wider than `width`. Below 80 columns the gaps shrink to one
    /// space; the bar shrinks down to 5 columns and then goes; last, the line is cut at the edge.
    static func compose(
        label: String, labelColumns: Int, fraction: Double?, bytes: String, speed: String, tail: String, width: Int
    ) -> String {
        // Fixed-width fields keep the bars of successive lines aligned as numbers change.
        let right = [Format.pad(bytes, columns: 17), Format.pad(speed, columns: 10), Format.pad(tail, columns: 8)]
            .joined(separator: " ")
        let gap = width >= 80 ? "  " : " "
        let fitted = Format.pad(Format.fit(label, columns: labelColumns), columns: labelColumns)
        let barColumns = width - labelColumns - Format.width(right) - 2 * gap.count
        let line: String
        if barColumns >= 5 {
            line = fitted + gap + Format.bar(fraction, columns: barColumns) + gap + right
        } else {
            line = "\(fitted) \(bytes) \(speed) \(tail)"
        }
        let trimmed = String(line.reversed().drop(while: { $0 == " " }).reversed())
        return Format.fit(trimmed, columns: width)
    }
}
