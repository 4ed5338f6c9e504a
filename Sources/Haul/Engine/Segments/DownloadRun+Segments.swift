import Foundation
import HTTPTypes
import HaulOperations
import Logging
import Synchronization

/// The shared state of one file fetched over several connections: the partial file, written in place, and behind a
/// lock the segment table, the sources (the request's URL and its mirrors) and what each connection is doing.
final class SegmentedTransfer: @unchecked Sendable {
    // unchecked Sendable: `file` is only used for positional writes, which the kernel orders (each connection
    // writes its own bytes), and by the run's task once every connection has ended; the rest is behind `state`.

    let file: PartialFile
    let total: Int64
    /// The most bytes one request of a connection asks for.
    let pieceSize: Int64

    /// A URL the file is fetched from.
    struct Source {
        /// Where requests go (the URL given, or where it redirected to), with the fields and credential rules the
        /// hops that led there left (``Hops``).
        var hops: Hops
        var url: URL { hops.url }
        /// The URL given (the request's URL or a mirror), for messages.
        let given: URL
        /// The validator this source gave for the file (the request's URL: the first response's), sent with
        /// `If-Range`: a source that changed answers with the whole file instead of a range.
        var validator: String?
        /// Why it is no longer used, once dropped.
        var dropped: String?
        var connections = 0
        var isPrimary: Bool
        /// Body bytes written from it.
        var bytes: Int64 = 0
        /// Failed requests in a row, over all its connections.
        var failures = 0
    }

    /// What one connection is doing, for telling a slow source from a fast one.
    struct Connection {
        var source: Int
        var segment: Int?
        var since: ContinuousClock.Instant
        var bytes: Int64 = 0

        /// Bytes per second since it started, once it has run long enough for that to say something.
        func speed(now: ContinuousClock.Instant) -> Double? {
            let elapsed = (now - since).seconds
            return elapsed >= 2 ? Double(bytes) / elapsed : nil
        }
    }

    struct State {
        var table: SegmentTable
        var sources: [Source]
        var connections: [Int: Connection] = [:]
        var meter: ProgressMeter
        /// Bytes written since the journal last recorded the missing ranges.
        var unrecorded: Int64 = 0
        /// The primary source's `Last-Modified`, for a transfer resumed from the journal (no first response).
        var lastModified: String?
        /// Connections waiting for a slot, cancelled once a connection finds nothing left to take: a download must
        /// not hold its own slot waiting for extra ones that have no work (two such downloads would wait for each
        /// other's slots).
        var waiting: [Int: Task<(@Sendable () -> Void)?, Never>] = [:]
        var noMoreWork = false
        /// When the current run of the connections began, and the bytes written then: how fast the file comes.
        var runStart: (time: ContinuousClock.Instant, written: Int64) = (.now, 0)
        /// Set when the stream that started the file found it slow enough: more connections open at once.
        var worthMore = false
    }

    let state: Locked<State>

    init(
        file: PartialFile, total: Int64, missing: [Range<Int64>], sources: [Source], pieceSize: Int64,
        progressInterval: Duration
    ) {
        self.file = file
        self.total = total
        self.pieceSize = pieceSize
        state = Locked(
            State(
                table: SegmentTable(total: total, missing: missing), sources: sources,
                meter: ProgressMeter(interval: progressInterval)))
    }

    var missing: [Range<Int64>] { state.withLock { $0.table.missing } }
    var written: Int64 { state.withLock { $0.table.written } }
    var isComplete: Bool { state.withLock { $0.table.isComplete } }
}

/// The rest of a response whose first bytes came as one stream, handed over to the first connection of the segments:
/// read from where the stream stopped.
final class BodyRest: @unchecked Sendable {
    // unchecked Sendable: one task at a time iterates it (the stream's, then the first connection's).
    let body: ResponseBody
    var chunks: ResponseBody.AsyncIterator

    init(_ body: ResponseBody, _ chunks: ResponseBody.AsyncIterator) {
        self.body = body
        self.chunks = chunks
    }
}

/// What the connections of a segmented transfer tell the run's task, which alone emits events and writes the journal.
enum SegmentNote: Sendable {
    case event(DownloadEvent)
    /// Enough bytes were written since the journal last recorded the missing ranges.
    case checkpoint
}

/// A failure of one connection that ends the whole download: the sources disagree about the file.
struct SourcesDisagree: Error {
    var error: DownloadError
}

/// Why a segmented transfer gives up its segments: the file changed on the server, or the server does not send
/// ranges after all. The download goes on as one stream from zero.
struct SegmentsAbandoned: Error {
    var reason: String
}

extension DownloadRun {
    /// The connections a file of `total` bytes would be fetched over from here: 1 keeps the one stream.
    func plannedConnections(total: Int64, from offset: Int64) -> Int {
        let wanted = request.maxConnections
        guard wanted > 1 else { return 1 }
        let splits = (total - offset) / max(1, request.minimumSegmentSize)
        return Int(min(Int64(wanted), max(1, splits)))
    }

    /// Whether the next request asks for a first piece (a closed range) instead of the rest of the file: the request
    /// wants segments or mirrors, and none are running or were given up. A revalidation's condition goes with the
    /// piece (a current file is a `304` all the same), and so does the rest of a file another tool left.
    var asksForFirstPiece: Bool {
        (request.maxConnections > 1 || !request.mirrors.isEmpty) && segmented == nil && !segmentsAbandoned
    }

    /// The first piece asked for from `offset`: the smallest segment, so a file too small to split comes whole in it.
    func firstPiece(from offset: Int64) -> Range<Int64> {
        offset..<(offset + max(1, request.minimumSegmentSize))
    }

    /// Whether the `206` to a first piece lets the download go on in segments over several connections (or over
    /// mirrors): the file's size and a validator are known, the file is not small, and it is worth a second
    /// connection (or has mirrors).
    func canSegment(resumeFrom: Int64) -> Bool {
        guard destinationPath != nil, validator != nil, let total = totalBytes, total > Self.restartableLimit else {
            return false
        }
        return plannedConnections(total: total, from: resumeFrom) > 1 || !request.mirrors.isEmpty
    }

    /// Whether the first piece, `received` bytes into it after starting at `offset` at `start`, comes slowly enough
    /// that more connections are worth opening: after a fifth of a second (or at its end, `atEnd`), when the rest of
    /// the file would take more than a second at its speed. A fast link is not split: more connections cost the server
    /// and both machines more, and on a link one connection fills they gain nothing (on loopback, a 1 GiB file from
    /// nginx comes faster over one, written by the stream's own writer thread).
    func worthSegments(
        from offset: Int64, since start: ContinuousClock.Instant, received: Int64, atEnd: Bool = false
    ) -> Bool {
        guard let total = totalBytes else { return false }
        let elapsed = (ContinuousClock.now - start).seconds
        guard elapsed >= 0.2 || atEnd, received > 0, elapsed > 0 else { return false }
        return Double(total - offset - received) / (Double(received) / elapsed) > 1
    }

    /// Turns this download into a segmented one at `resumeFrom` (the bytes before it are in the partial, if any), the
    /// first response bringing the bytes up to `firstEnd` (none more when it is `resumeFrom`), and records it in the
    /// journal before a byte is written.
    func startSegments(resumeFrom: Int64, firstEnd: Int64, primary: Hops) async throws {
        guard let destinationPath, let total = totalBytes, let validator else { return }
        let file: PartialFile
        if let writer {
            try? await writer.drain()
            file = writer.file
            self.writer = nil
        } else {
            file = try endingForGood { () throws(DownloadError) in
                try PartialFile(creatingAt: PartialFile.partialPath(forDestination: destinationPath), url: request.url)
            }
        }
        // Recorded before the file takes its full length: a partial record without ranges says its bytes are its
        // size, which a killed run must never leave it to mean.
        if let journal = configuration.journal {
            await journal.commit(
                JournalRecord(
                    key: partialKey, path: destinationPath,
                    state: .partial(validator: validator, totalBytes: total, missingRanges: [resumeFrom..<total]),
                    request: request))
            recordedPartial = true
        }
        let transfer = makeTransfer(file: file, total: total, missing: [resumeFrom..<total], primary: primary)
        let count = plannedConnections(total: total, from: resumeFrom)
        transfer.state.withLock { state in
            state.sources[0].validator = validator
            // Cut up ahead: each connection that starts takes a part of its own.
            state.table.split(into: count, firstAtLeast: firstEnd - resumeFrom)
            // The first response's body is segment 0's: its connection owns it before any other connection starts.
            if firstEnd > resumeFrom {
                _ = state.table.assign(0, to: 0)
                state.table.requested(0, upTo: firstEnd)
            }
            state.worthMore = true
        }
        segmented = transfer
        try endingForGood { () throws(DownloadError) in
            try file.prepareForPositionalWrites(length: total, url: primary.url)
        }
        logger.debug("fetching in segments", metadata: ["size": "\(total)", "from": "\(resumeFrom)"])
    }

    /// The transfer of a file of `total` bytes whose `missing` ranges are fetched into `file`, from the source the
    /// file is fetched from now (`primary`, where its hops led) and the mirrors not dropped yet.
    func makeTransfer(file: PartialFile, total: Int64, missing: [Range<Int64>], primary: Hops) -> SegmentedTransfer {
        // Pieces of a quarter of a connection's share: few requests, and a slow connection holds at most that much
        // that nobody else may take; between 1 and 16 MiB.
        let share = total / Int64(plannedConnections(total: total, from: 0) * 4)
        let pieceSize = min(16 << 20, max(1 << 20, share))
        // The source the file is fetched from now is the primary; the sources not dropped yet follow it.
        let live = self.sources.live
        var sources = [SegmentedTransfer.Source(hops: primary, given: live[0], isPrimary: true)]
        for mirror in live.dropFirst() {
            sources.append(
                SegmentedTransfer.Source(
                    hops: Hops(url: mirror, fields: fields(for: mirror)), given: mirror, isPrimary: false))
        }
        return SegmentedTransfer(
            file: file, total: total, missing: missing, sources: sources, pieceSize: pieceSize,
            progressInterval: configuration.progressInterval)
    }

    /// Fetches what is missing of the segmented file over its connections; `first` is the response that started
    /// it, whose body is the first connection's first segment. Emits the connections' events and records their
    /// progress in the journal from this task. Returns once the file is whole; throws ``SegmentsAbandoned`` when
    /// it must be fetched as one stream from zero, or the failure that ended the last connection.
    func runSegments(
        _ transfer: SegmentedTransfer, first: BodyRest?, interruption: TransferInterruption?
    ) async throws {
        let (notes, sink) = AsyncStream<SegmentNote>.makeStream()
        let work = Task {
            defer { sink.finish() }
            try await self.runConnections(transfer, first: first, sink: sink)
        }
        // A stall, the time limit or the minimum speed of the whole download stops every connection.
        interruption?.onInterrupt { work.cancel() }
        await withTaskCancellationHandler {
            for await note in notes {
                switch note {
                case .event(let event): emit(event)
                case .checkpoint: await recordSegments(transfer)
                }
            }
        } onCancel: {
            work.cancel()
        }
        do {
            try await work.value
        } catch {
            if transfer.written > 0 { await recordSegments(transfer) }
            throw error
        }
        emit(
            .progress(
                DownloadProgress(
                    bytesWritten: transfer.total, totalBytes: transfer.total,
                    bytesPerSecond: transfer.state.withLock { $0.meter.bytesPerSecond })))
    }

    /// Records the ranges still missing, so that a killed run resumes each segment where it stopped.
    func recordSegments(_ transfer: SegmentedTransfer) async {
        guard let journal = configuration.journal, recordedPartial, let destinationPath, let validator else { return }
        let missing = transfer.missing
        await journal.commit(
            JournalRecord(
                key: partialKey, path: destinationPath,
                state: .partial(validator: validator, totalBytes: transfer.total, missingRanges: missing),
                request: request))
    }

    /// The same, without suspending: when a failed or cancelled download keeps its partial.
    func storeSegments(_ transfer: SegmentedTransfer) {
        guard let journal = configuration.journal, let destinationPath, let validator else { return }
        journal.store(
            JournalRecord(
                key: partialKey, path: destinationPath,
                state: .partial(validator: validator, totalBytes: transfer.total, missingRanges: transfer.missing),
                request: request))
    }

    private func runConnections(
        _ transfer: SegmentedTransfer, first: BodyRest?, sink: AsyncStream<SegmentNote>.Continuation
    ) async throws {
        let count = plannedConnections(total: transfer.total, from: transfer.written)
        let minimum = request.minimumSegmentSize
        transfer.state.withLock { state in
            state.runStart = (.now, state.table.written)
            state.noMoreWork = false
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            _ = register(0, transfer, preferring: 0)
            group.addTask {
                defer { self.unregister(0, transfer) }
                try await self.connection(0, transfer, first: first, sink: sink)
            }
            for index in 1..<count {
                group.addTask {
                    guard try await self.worthAnotherConnection(transfer),
                        transfer.state.withLock({ $0.table.hasWork(splittingAbove: minimum) }),
                        let url = self.register(index, transfer, preferring: nil)
                    else { return }
                    defer { self.unregister(index, transfer) }
                    var release: (@Sendable () -> Void)?
                    if let connections = self.connections {
                        let waiting = Task { await connections.acquire(for: url) }
                        let ended = transfer.state.withLock { state in
                            if !state.noMoreWork { state.waiting[index] = waiting }
                            return state.noMoreWork
                        }
                        if ended { waiting.cancel() }
                        let granted = await withTaskCancellationHandler {
                            await waiting.value
                        } onCancel: {
                            waiting.cancel()
                        }
                        transfer.state.withLock { _ = $0.waiting.removeValue(forKey: index) }
                        guard let granted else { return }
                        release = granted
                    }
                    defer { release?() }
                    // Its speed counts from here, not from when it began to wait for a slot.
                    transfer.state.withLock { $0.connections[index]?.since = .now }
                    try await self.connection(index, transfer, first: nil, sink: sink)
                }
            }
            // The first connection that fails for good ends the others (waitForAll would let them finish first).
            for try await _ in group {}
        }
        guard transfer.isComplete else {
            throw AttemptFailure.transient(
                DownloadError(
                    .truncated, message: "the connections ended with \(transfer.missing.count) segments missing",
                    url: request.url, bytesReceived: transfer.written))
        }
    }

    /// Whether another connection is worth opening: at once when the stream that started the file found it slow
    /// (``worthSegments(from:since:received:)``); for a transfer resumed from earlier bytes, once the connections
    /// have run for a fifth of a second and the rest of the file would take them more than a second at their speed.
    /// Asked again every tenth of a second until it is, or the file is complete, or nothing is left to take.
    private func worthAnotherConnection(_ transfer: SegmentedTransfer) async throws -> Bool {
        enum Answer { case yes, no, notYet }
        while true {
            let answer = transfer.state.withLock { state -> Answer in
                if state.noMoreWork || state.table.isComplete { return .no }
                if state.worthMore { return .yes }
                let elapsed = (ContinuousClock.now - state.runStart.time).seconds
                guard elapsed >= 0.2 else { return .notYet }
                let speed = Double(state.table.written - state.runStart.written) / elapsed
                let left = Double(transfer.total - state.table.written)
                return speed <= 0 || left / speed > 1 ? .yes : .notYet
            }
            switch answer {
            case .yes: return true
            case .no: return false
            case .notYet: try await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    /// Registers connection `index` with its source (`preferring`, else the live source with the fewest
    /// connections), before it waits for a slot: connections that start together spread over the sources. Returns
    /// where it goes (for the queue's per-host count).
    private func register(_ index: Int, _ transfer: SegmentedTransfer, preferring preferred: Int?) -> URL? {
        transfer.state.withLock { state in
            guard
                let source = preferred
                    ?? state.sources.indices.filter({ state.sources[$0].dropped == nil })
                    .min(by: { state.sources[$0].connections < state.sources[$1].connections })
            else { return nil }
            state.sources[source].connections += 1
            state.connections[index] = SegmentedTransfer.Connection(source: source, since: .now)
            return state.sources[source].url
        }
    }

    /// Forgets connection `index`: its source has one connection fewer, its segment (if any) is left to others.
    private func unregister(_ index: Int, _ transfer: SegmentedTransfer) {
        transfer.state.withLock { state in
            guard let connection = state.connections.removeValue(forKey: index) else { return }
            state.sources[connection.source].connections -= 1
            if let segment = connection.segment { state.table.release(segment) }
        }
    }

    /// The smallest piece a connection that has finished a segment still splits off another: its connection is
    /// open already, so it is worth less than a new connection's ``DownloadRequest/minimumSegmentSize``.
    private var stealMinimum: Int64 { min(request.minimumSegmentSize, 1 << 20) }

    /// One connection: takes segments until none is left to take, fetches each piece by piece from a live source,
    /// and deals with what goes wrong (another source, or a backoff and the same one).
    private func connection(
        _ index: Int, _ transfer: SegmentedTransfer, first: BodyRest?,
        sink: AsyncStream<SegmentNote>.Continuation
    ) async throws {
        var first = first
        var minimum = request.minimumSegmentSize
        var current: (segment: Int, source: Int, url: URL, start: Int64)?
        while true {
            try Task.checkCancellation()
            if current == nil {
                // The first response's body starts where segment 0 does.
                guard
                    let (segment, source, url) = takeWork(
                        index, transfer, minimum: minimum, segment: first == nil ? nil : 0, sink: sink)
                else {
                    // Nothing to split: while a connection that may be much slower still works, wait to take its rest
                    // over once the speeds say so (they do two seconds after a connection's start).
                    if mayTakeOverLater(index, transfer) {
                        lastActivity.touch()
                        try await Task.sleep(for: .milliseconds(250))
                        continue
                    }
                    // Nothing left for this connection: nothing for one still waiting for a slot either.
                    let waiting = transfer.state.withLock { state in
                        state.noMoreWork = true
                        defer { state.waiting = [:] }
                        return Array(state.waiting.values)
                    }
                    for task in waiting { task.cancel() }
                    return
                }
                minimum = stealMinimum
                let range = transfer.state.withLock { $0.table.range(of: segment) }
                current = (segment, source, url, range.lowerBound)
                sink.yield(
                    .event(.segment(SegmentEvent(connection: index, range: range, url: url, change: .started))))
            }
            guard let (segment, source, url, start) = current else { continue }
            do {
                let response = first
                first = nil
                try await watchedRound(index, transfer, segment: segment, source: source, first: response, sink: sink)
                transfer.state.withLock { $0.sources[source].failures = 0 }
                let finished = transfer.state.withLock { state -> Range<Int64>? in
                    let segmentState = state.table.segments[segment]
                    guard segmentState.isFinished else { return nil }  // its next piece, on the same connection
                    state.connections[index]?.segment = nil
                    state.table.release(segment)
                    return start..<segmentState.end
                }
                if let finished {
                    current = nil
                    sink.yield(
                        .event(.segment(SegmentEvent(connection: index, range: finished, url: url, change: .finished))))
                }
            } catch let abandoned as SegmentsAbandoned {
                throw abandoned
            } catch let disagreement as SourcesDisagree {
                throw AttemptFailure.permanent(disagreement.error)
            } catch {
                current = nil
                let failure = transportFailure(error, url: url)
                let range = transfer.state.withLock { state in
                    state.connections[index]?.segment = nil
                    state.table.release(segment)
                    return state.table.range(of: segment)
                }
                sink.yield(
                    .event(
                        .segment(
                            SegmentEvent(connection: index, range: range, url: url, change: .failed(failure.error)))))
                if Task.isCancelled { throw CancellationError() }
                if failure.error.code == .timedOut || failure.error.code == .fileSystem {
                    throw failure
                }
                // Each source has retries of its own (failures in a row, over all its connections): asked again after
                // a backoff while they last; then, or after a failure another attempt would meet again, dropped and
                // left to the other sources. The last one left fails the download.
                let failures = transfer.state.withLock { state in
                    state.sources[source].failures += 1
                    return state.sources[source].failures
                }
                let retries = failure.isTransient && failures <= configuration.retryPolicy.maxRetries
                if !retries, drop(source, of: transfer, because: failure.error.message, sink: sink, connection: index) {
                    continue
                }
                guard retries else { throw failure }
                let delay = configuration.retryPolicy.delay(
                    beforeRetry: failures, retryAfter: failure.retryAfter, random: configuration.random)
                if let deadline, .now + delay >= deadline {
                    throw AttemptFailure.permanent(
                        timedOutError(after: "the next attempt would start after it (\(failure.error.message))"))
                }
                lastActivity.waits(until: .now + delay)
                try await configuration.backoffClock.sleep(for: delay)
            }
        }
    }

    /// A segment for connection `index` (`wanted`, if given: the one the first response's body is) and the live source
    /// to fetch it from (the one with the fewest connections), or `nil` when nothing is left that is worth a
    /// connection. When nothing can be split, a connection takes over the whole rest of a segment whose connection, to
    /// another source, is much slower (a quarter of its own speed or less), and that source is dropped as too slow.
    private func takeWork(
        _ index: Int, _ transfer: SegmentedTransfer, minimum: Int64, segment wanted: Int?,
        sink: AsyncStream<SegmentNote>.Continuation
    ) -> (segment: Int, source: Int, url: URL)? {
        let (work, dropped) = transfer.state.withLock { state -> ((Int, Int, URL)?, URL?) in
            var dropped: URL?
            let now = ContinuousClock.now
            guard var connection = state.connections[index] else { return (nil, nil) }
            if state.sources[connection.source].dropped != nil {
                // Its source was dropped: on to the live one with the fewest connections, measured afresh there.
                guard
                    let live = state.sources.indices.filter({ state.sources[$0].dropped == nil })
                        .min(by: { state.sources[$0].connections < state.sources[$1].connections })
                else { return (nil, nil) }
                state.sources[connection.source].connections -= 1
                state.sources[live].connections += 1
                connection = SegmentedTransfer.Connection(source: live, since: now)
            }
            var segment =
                if let wanted {
                    state.table.assign(wanted, to: index) ? wanted : nil
                } else {
                    state.table.assign(to: index, minimum: minimum)
                }
            if segment == nil, let own = connection.speed(now: now) {
                // Nothing to split: the segment of a connection to another source that is much slower is taken over
                // whole, its response in flight ended, and that source dropped. (Between connections to one server,
                // speeds that far apart come and go with the machine's load: what is in flight is not worth ending.)
                let slow = state.connections.filter { other in
                    other.key != index && other.value.segment != nil && other.value.source != connection.source
                        && state.sources[other.value.source].dropped == nil
                        && (other.value.speed(now: now) ?? .infinity) * 4 <= own
                }
                if let slower = slow.min(by: { $0.value.bytes < $1.value.bytes })?.value {
                    // Every connection to that source gives up what it has left; this one takes the largest part.
                    state.sources[slower.source].dropped = Self.slowSource
                    dropped = state.sources[slower.source].given
                    for (other, connection) in state.connections where connection.source == slower.source {
                        state.table.abandonRest(ownedBy: other)
                    }
                    segment = state.table.assign(to: index, minimum: minimum)
                }
            }
            connection.segment = segment
            state.connections[index] = connection
            guard let segment else { return (nil, dropped) }
            return ((segment, connection.source, state.sources[connection.source].url), dropped)
        }
        if let dropped {
            logger.info(
                "source dropped", metadata: ["url": "\(dropped.redactedString)", "reason": "\(Self.slowSource)"])
            sink.yield(
                .event(
                    .segment(
                        SegmentEvent(
                            connection: index, range: 0..<0, url: dropped,
                            change: .sourceDropped(reason: Self.slowSource)
                        ))))
        }
        return work
    }

    static let slowSource = "a quarter of the speed of another connection or less"

    /// Whether connection `index` may yet take over another's segment: a connection to another source still works
    /// whose speed (or its own) is not known yet, or is a quarter of its own or less.
    private func mayTakeOverLater(_ index: Int, _ transfer: SegmentedTransfer) -> Bool {
        transfer.state.withLock { state in
            let now = ContinuousClock.now
            guard let source = state.connections[index]?.source else { return false }
            let own = state.connections[index]?.speed(now: now)
            return state.connections.contains { other in
                guard other.key != index, other.value.source != source, let segment = other.value.segment,
                    state.sources[other.value.source].dropped == nil, state.table.segments[segment].unreserved > 0
                else { return false }
                guard let own, let theirs = other.value.speed(now: now) else { return true }
                return theirs * 4 <= own
            }
        }
    }

    /// Drops `source` for the rest of the file when another live one can take its work. Returns whether it did.
    private func drop(
        _ source: Int, of transfer: SegmentedTransfer, because reason: String,
        sink: AsyncStream<SegmentNote>.Continuation, connection: Int
    ) -> Bool {
        let (moves, url) = transfer.state.withLock { state -> (Bool, URL?) in
            guard state.sources.indices.contains(where: { $0 != source && state.sources[$0].dropped == nil })
            else { return (false, nil) }
            // Another connection may have dropped it already.
            guard state.sources[source].dropped == nil else { return (true, nil) }
            state.sources[source].dropped = reason
            return (true, state.sources[source].given)
        }
        guard let url else { return moves }
        logger.info("source dropped", metadata: ["url": "\(url.redactedString)", "reason": "\(reason)"])
        sink.yield(
            .event(
                .segment(
                    SegmentEvent(connection: connection, range: 0..<0, url: url, change: .sourceDropped(reason: reason))
                )))
        return true
    }

    /// One request of a connection (or the first response's body), in a task of its own watched for stalls, so that
    /// a stalled connection is stopped alone and the others go on.
    private func watchedRound(
        _ index: Int, _ transfer: SegmentedTransfer, segment: Int, source: Int, first: BodyRest?,
        sink: AsyncStream<SegmentNote>.Continuation
    ) async throws {
        let clock = ActivityClock()
        let stopped = Locked<StallWatch.Reason?>(nil)
        let round = Task {
            try await self.round(
                index, transfer, segment: segment, source: source, first: first, clock: clock, sink: sink)
        }
        let token = stallWatch.watch(clock, limits: StallWatch.Limits(minimumSpeed: nil, deadline: deadline)) {
            reason in
            stopped.withLock { $0 = reason }
            round.cancel()
        }
        defer { stallWatch.stop(token) }
        do {
            try await withTaskCancellationHandler {
                try await round.value
            } onCancel: {
                round.cancel()
            }
        } catch {
            switch stopped.withLock({ $0 }) {
            case .stalled?:
                throw AttemptFailure.transient(
                    DownloadError(
                        .stalled, message: "no data for \(stallWatch.timeout) (stall timeout) on one connection",
                        url: transfer.state.withLock { $0.sources[source].url }))
            case .timedOut?:
                throw AttemptFailure.permanent(timedOutError(after: "the transfer was still running"))
            case .tooSlow?, nil:
                throw error
            }
        }
    }

    /// Sends one range request (following redirects), checks the answer against the file, and writes its body in
    /// place until the segment's end (which a steal may move down meanwhile).
    private func round(
        _ index: Int, _ transfer: SegmentedTransfer, segment: Int, source: Int, first: BodyRest?,
        clock: ActivityClock, sink: AsyncStream<SegmentNote>.Continuation
    ) async throws {
        let rest: BodyRest
        let url: URL
        let pieceEnd: Int64
        if let first {
            rest = first
            (url, pieceEnd) = transfer.state.withLock { ($0.sources[source].url, $0.table.segments[segment].requested) }
        } else {
            let response: TransportResponse
            (response, url, pieceEnd) = try await requestRange(
                transfer, segment: segment, source: source, clock: clock, sink: sink)
            rest = BodyRest(response.body, response.body.makeAsyncIterator())
        }
        do {
            try await receiveSegment(
                rest, index, transfer, segment: segment, pieceEnd: pieceEnd, url: url, clock: clock, sink: sink)
        } catch {
            await rest.body.close()
            throw error
        }
        await rest.body.close()
    }

    /// Sends the next piece's range request of `segment` to `source` through the hop path (following redirects,
    /// which the source's URL then points past), and judges the answer (``SegmentDecision``). Returns the response
    /// to read, where it came from and where the piece ends.
    private func requestRange(
        _ transfer: SegmentedTransfer, segment: Int, source: Int, clock: ActivityClock,
        sink: AsyncStream<SegmentNote>.Continuation
    ) async throws -> (TransportResponse, URL, Int64) {
        let piece = transfer.state.withLock { state in
            // Alone (no other connection is worth opening yet), a connection asks for the whole rest of its segment:
            // the pieces are there for others to take what is not asked for yet.
            state.table.requestPiece(segment, size: state.connections.count == 1 ? .max : transfer.pieceSize)
        }
        // A new chain of redirects from where the source's last one led, with what its hops left of the fields.
        var (hops, validator) = transfer.state.withLock { ($0.sources[source].hops, $0.sources[source].validator) }
        hops.visited = []
        hops.count = 0
        let ask = RangeAsk(from: piece.lowerBound, end: piece.upperBound, ifRange: validator)
        let outcome = try await send(&hops, asking: ask, clock: clock, interruption: nil) { sink.yield(.event($0)) }
        guard case .response(let hop) = outcome else { throw CancellationError() }  // not asked to interrupt
        if hops.count > 0 { transfer.state.withLock { $0.sources[source].hops = hops } }
        do {
            try checkSegmentResponse(
                hop, transfer, offset: piece.lowerBound, source: source, sentIfRange: validator != nil)
        } catch {
            await hop.response.body.close()
            throw error
        }
        return (hop.response, hop.url, piece.upperBound)
    }

    /// A range response must continue the segment at its offset and state the file's total; a source that sends the
    /// whole file (it changed, or ignores `Range`) or another total is refused (``SegmentDecision``).
    private func checkSegmentResponse(
        _ hop: HopResponse, _ transfer: SegmentedTransfer, offset: Int64, source: Int, sentIfRange: Bool
    ) throws {
        let asked = transfer.state.withLock { state in
            SegmentDecision.Asked(
                offset: offset, total: transfer.total, given: state.sources[source].given,
                primary: state.sources[0].given, isPrimary: state.sources[source].isPrimary,
                validator: state.sources[source].validator, sentIfRange: sentIfRange)
        }
        let sent = ResponseDecision.Sent(proxy: hop.proxy, credentials: hop.sentCredentials)
        switch SegmentDecision(policy: configuration.retryPolicy).decide(
            hop.response.head, from: hop.url, asked: asked, sent: sent)
        {
        case .write(let validator, let lastModified):
            transfer.state.withLock { state in
                if let lastModified { state.lastModified = lastModified }
                if state.sources[source].validator == nil { state.sources[source].validator = validator }
            }
        case .abandonSegments(let reason):
            throw SegmentsAbandoned(reason: reason)
        case .disagree(let error):
            throw SourcesDisagree(error: error)
        case .fail(let failure):
            throw failure
        }
    }

    /// Writes `body` in place from the segment's offset, until its end (which a steal may move down) or the body's.
    private func receiveSegment(
        _ rest: BodyRest, _ index: Int, _ transfer: SegmentedTransfer, segment: Int, pieceEnd: Int64, url: URL,
        clock: ActivityClock, sink: AsyncStream<SegmentNote>.Continuation
    ) async throws {
        // What a killed run may have to fetch again: at most 1/256 of the file (at least 256 KiB) per checkpoint.
        let threshold = max(256 << 10, transfer.total / 256)
        while let chunk = try await rest.chunks.next() {
            clock.received(chunk.count)
            lastActivity.received(chunk.count)
            let (offset, count) = transfer.state.withLock {
                $0.table.reserve(segment, count: chunk.count, upTo: pieceEnd)
            }
            if count > 0 {
                do {
                    try transfer.file.write(chunk, count: count, at: offset, url: url)
                } catch {
                    throw AttemptFailure.permanent(error)
                }
            }
            let now = ContinuousClock.now
            let (progress, checkpoint, exhausted) = transfer.state.withLock {
                state -> (DownloadProgress?, Bool, Bool) in
                state.table.wrote(segment, count: count)
                state.connections[index]?.bytes += Int64(count)
                if let source = state.connections[index]?.source { state.sources[source].bytes += Int64(count) }
                state.unrecorded += Int64(count)
                let checkpoint = state.unrecorded >= threshold
                if checkpoint { state.unrecorded = 0 }
                let progress =
                    state.meter.record(count, now: now)
                    ? DownloadProgress(
                        bytesWritten: state.table.written, totalBytes: transfer.total,
                        bytesPerSecond: state.meter.bytesPerSecond) : nil
                let reserved = state.table.reserved(segment)
                return (progress, checkpoint, state.table.isExhausted(segment) || reserved >= pieceEnd)
            }
            segmentBytes.add(Int64(count), ordering: .relaxed)
            if let progress { sink.yield(.event(.progress(progress))) }
            if checkpoint { sink.yield(.checkpoint) }
            // The piece is in (a response longer than asked for is not read on), or a faster connection took the rest.
            if exhausted { return }
            if bandwidth != nil || ownBandwidth != nil { try await waitForBandwidth(count, clock: clock) }
        }
        let left = transfer.state.withLock { state in
            min(pieceEnd, state.table.segments[segment].end) - state.table.reserved(segment)
        }
        if left > 0 {
            throw AttemptFailure.transient(
                DownloadError(
                    .truncated, message: "connection closed with \(left) bytes of its segment missing", url: url))
        }
    }
}
