import Foundation
import HTTPTypes
import HaulOperations
import Logging
import Synchronization

extension DownloadRun {
    /// Runs the connections of `transfer` (the first one reading `first`, the rest of the response that started it)
    /// until the file is whole, or one of them finds why the segments end (returned).
    func runConnections(
        _ transfer: SegmentedTransfer, first: BodyRest?, sink: AsyncStream<SegmentNote>.Continuation
    ) async throws -> SegmentsStop? {
        let count = plannedConnections(total: transfer.total, from: transfer.written)
        let minimum = request.minimumSegmentSize
        transfer.state.withLock { state in
            state.runStart = (.now, state.table.written)
            state.noMoreWork = false
        }
        let stop = try await withThrowingTaskGroup(of: SegmentsStop?.self) { group -> SegmentsStop? in
            _ = register(0, transfer, preferring: 0)
            group.addTask {
                defer { self.unregister(0, transfer) }
                return try await self.connection(
                    ConnectionContext(index: 0, transfer: transfer, sink: sink, slot: .download), first: first)
            }
            for index in 1..<count {
                group.addTask {
                    guard try await self.worthAnotherConnection(transfer),
                        transfer.state.withLock({ $0.table.hasWork(splittingAbove: minimum) }),
                        let url = self.register(index, transfer, preferring: nil)
                    else { return nil }
                    defer { self.unregister(index, transfer) }
                    var slot: ConnectionSlot?
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
                        guard let granted else { return nil }
                        slot = ConnectionSlot(at: url, release: granted)
                    }
                    defer { slot?.release() }
                    // Its speed counts from here, not from when it began to wait for a slot.
                    transfer.state.withLock { $0.connections[index]?.since = .now }
                    return try await self.connection(
                        ConnectionContext(
                            index: index, transfer: transfer, sink: sink, slot: slot.map { .connection($0) }),
                        first: nil)
                }
            }
            // The first connection that fails for good, or finds that the segments end, ends the others (waitForAll
            // would let them finish first).
            for try await stop in group {
                guard let stop else { continue }
                group.cancelAll()
                return stop
            }
            return nil
        }
        if let stop { return stop }
        guard transfer.isComplete else {
            throw AttemptFailure.transient(
                DownloadError(
                    .truncated, message: "the connections ended with \(transfer.missing.count) segments missing",
                    url: request.url, bytesReceived: transfer.written))
        }
        return nil
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
    private func connection(_ context: ConnectionContext, first: BodyRest?) async throws -> SegmentsStop? {
        var first = first
        var minimum = request.minimumSegmentSize
        var current: SegmentWork?
        while true {
            try Task.checkCancellation()
            if current == nil {
                // The first response's body starts where segment 0 does.
                switch try await nextWork(context, minimum: minimum, wanted: first == nil ? nil : 0) {
                case .work(let work):
                    current = work
                    minimum = stealMinimum
                case .later: continue
                case .done: return nil
                }
            }
            guard let work = current else { continue }
            do {
                let response = first
                first = nil
                if let stop = try await watchedRound(context, work, first: response) { return stop }
                if finishedRound(context, work) { current = nil }
            } catch {
                current = nil
                if let stop = try await recover(after: error, context, work) { return stop }
            }
        }
    }

    /// What a connection does next: work, another look later, or nothing more.
    private enum NextWork {
        case work(SegmentWork)
        case later
        case done
    }

    /// The next segment for the connection of `context` (`wanted`, if given), told as `.started`. With nothing to
    /// split, it waits a little while a connection that may be much slower still works (to take its rest over once
    /// the speeds say so: they do two seconds after a connection's start); else it is done, and so is any connection
    /// still waiting for a slot.
    private func nextWork(_ context: ConnectionContext, minimum: Int64, wanted: Int?) async throws -> NextWork {
        let transfer = context.transfer
        let taken = takeWork(context, minimum: minimum, segment: wanted)
        switch taken {
        case .leave: return .done
        case .move(let url):
            if !(await moveSlot(to: url)) { throw CancellationError() }
            return .later
        case .work, .nothing: break
        }
        guard case .work(let segment, let source, let url) = taken else {
            if mayTakeOverLater(context.index, transfer) {
                lastActivity.touch()
                try await Task.sleep(for: .milliseconds(250))
                return .later
            }
            let waiting = transfer.state.withLock { state in
                state.noMoreWork = true
                defer { state.waiting = [:] }
                return Array(state.waiting.values)
            }
            for task in waiting { task.cancel() }
            return .done
        }
        let range = transfer.state.withLock { $0.table.range(of: segment) }
        context.tell(.segment(SegmentEvent(connection: context.index, range: range, url: url, change: .started)))
        return .work(SegmentWork(segment: segment, source: source, url: url, start: range.lowerBound))
    }

    /// After a round that went well: the source's failures in a row are over. Returns whether the segment is finished
    /// (told as `.finished`; the connection takes another), else its next piece follows on the same connection.
    private func finishedRound(_ context: ConnectionContext, _ work: SegmentWork) -> Bool {
        let finished = context.transfer.state.withLock { state -> Range<Int64>? in
            state.sources[work.source].failures = 0
            let segmentState = state.table.segments[work.segment]
            guard segmentState.isFinished else { return nil }
            state.connections[context.index]?.segment = nil
            state.table.release(work.segment)
            return work.start..<segmentState.end
        }
        guard let finished else { return false }
        context.tell(
            .segment(SegmentEvent(connection: context.index, range: finished, url: work.url, change: .finished)))
        return true
    }

    /// After a failed round: its segment is left to whoever takes it (told as `.failed`). Each source has retries of
    /// its own (failures in a row, over all its connections): it is asked again after a backoff while they last; then,
    /// or after a failure another attempt would meet again, it is dropped and left to the other sources. What ends the
    /// download (the last source's failure, the time limit, the file system) is thrown. A primary that has not
    /// vouched for the bytes held (``SegmentedTransfer/State/primaryVouched``) is not dropped: the segments end.
    private func recover(
        after error: any Error, _ context: ConnectionContext, _ work: SegmentWork
    ) async throws -> SegmentsStop? {
        let failure = transportFailure(error, url: work.url)
        let range = context.transfer.state.withLock { state in
            state.connections[context.index]?.segment = nil
            state.table.release(work.segment)
            return state.table.range(of: work.segment)
        }
        context.tell(
            .segment(
                SegmentEvent(connection: context.index, range: range, url: work.url, change: .failed(failure.error))))
        if Task.isCancelled { throw CancellationError() }
        if failure.error.code == .timedOut || failure.error.code == .fileSystem { throw failure }
        let failures = context.transfer.state.withLock { state in
            state.sources[work.source].failures += 1
            return state.sources[work.source].failures
        }
        let retries = failure.isTransient && failures <= configuration.retryPolicy.maxRetries
        if !retries {
            let unvouched = context.transfer.state.withLock { state in
                state.sources[work.source].isPrimary && !state.primaryVouched
                    && state.sources.contains { !$0.isPrimary && $0.dropped == nil }
            }
            if unvouched {
                return .abandon(
                    because: "the primary source failed before it confirmed the bytes held (\(failure.error.message))"
                        + "; another source may have another version of the file")
            }
            if drop(work.source, because: failure.error.message, by: context) { return nil }
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
        return nil
    }

    /// A segment for connection `index` (`wanted`, if given: the one the first response's body is) and the live source
    /// to fetch it from (the one with the fewest connections), or ``Taken/nothing`` when nothing is left that is worth
    /// a connection (``Taken/move(_:)`` or ``Taken/leave`` when its source was dropped for one at another origin,
    /// under a queue). When nothing can be split, a connection takes over the whole rest of a segment whose connection, to
    /// another source, is much slower (a quarter of its own speed or less), and that source is dropped as too slow.
    private func takeWork(_ context: ConnectionContext, minimum: Int64, segment wanted: Int?) -> Taken {
        let (index, transfer) = (context.index, context.transfer)
        let queued = connections != nil
        let (work, dropped) = transfer.state.withLock { state -> (Taken, URL?) in
            var dropped: URL?
            let now = ContinuousClock.now
            guard var connection = state.connections[index] else { return (.nothing, nil) }
            if state.sources[connection.source].dropped != nil {
                // Its source was dropped: on to the live one with the fewest connections, measured afresh there.
                guard
                    let live = state.sources.indices.filter({ state.sources[$0].dropped == nil })
                        .min(by: { state.sources[$0].connections < state.sources[$1].connections })
                else { return (.nothing, nil) }
                // Under a queue a connection holds a slot at its source's origin: another origin needs one of its own.
                // The download's own slot moves there; an extra connection leaves (the others take its work).
                let url = state.sources[live].url
                let elsewhere =
                    queued
                    && DownloadQueue.originKey(for: url)
                        != DownloadQueue.originKey(for: state.sources[connection.source].url)
                if elsewhere, index != 0 { return (.leave, nil) }
                state.sources[connection.source].connections -= 1
                state.sources[live].connections += 1
                state.connections[index] = SegmentedTransfer.Connection(source: live, since: now)
                if elsewhere { return (.move(url), nil) }
                connection = SegmentedTransfer.Connection(source: live, since: now)
            }
            // Resumed bytes are the primary's version until it confirms them: no other source's bytes join them
            // before (a mirror's validator is its own, so it could write another version of the same size).
            guard state.primaryVouched || state.sources[connection.source].isPrimary else { return (.nothing, nil) }
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
                // (Before the primary has confirmed the bytes held, only its own connections get here: it is never
                // dropped for another source.)
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
            guard let segment else { return (.nothing, dropped) }
            return (
                .work(segment: segment, source: connection.source, url: state.sources[connection.source].url), dropped
            )
        }
        if let dropped {
            logger.info(
                "source dropped", metadata: ["url": "\(dropped.redactedString)", "reason": "\(Self.slowSource)"])
            context.tell(
                .segment(
                    SegmentEvent(
                        connection: index, range: 0..<0, url: dropped, change: .sourceDropped(reason: Self.slowSource)))
            )
        }
        return work
    }

    /// What ``takeWork(_:minimum:segment:)`` found for a connection.
    private enum Taken {
        /// A segment, and the source to fetch it from.
        case work(segment: Int, source: Int, url: URL)
        /// Nothing worth a connection now.
        case nothing
        /// Its source was dropped and the live one is at another origin: the download's own slot must move there.
        case move(URL)
        /// Its source was dropped and the live one is at another origin, where its slot does not count: it ends.
        case leave
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
    private func drop(_ source: Int, because reason: String, by context: ConnectionContext) -> Bool {
        let (moves, url) = context.transfer.state.withLock { state -> (Bool, URL?) in
            guard state.sources.indices.contains(where: { $0 != source && state.sources[$0].dropped == nil })
            else { return (false, nil) }
            // Another connection may have dropped it already.
            guard state.sources[source].dropped == nil else { return (true, nil) }
            state.sources[source].dropped = reason
            return (true, state.sources[source].given)
        }
        guard let url else { return moves }
        logger.info("source dropped", metadata: ["url": "\(url.redactedString)", "reason": "\(reason)"])
        context.tell(
            .segment(
                SegmentEvent(connection: context.index, range: 0..<0, url: url, change: .sourceDropped(reason: reason)))
        )
        return true
    }

    /// One request of a connection (or the first response's body), in a task of its own watched for stalls, so that
    /// a stalled connection is stopped alone and the others go on.
    private func watchedRound(
        _ context: ConnectionContext, _ work: SegmentWork, first: BodyRest?
    ) async throws -> SegmentsStop? {
        let clock = ActivityClock()
        let stopped = Locked<StallWatch.Reason?>(nil)
        let round = Task { try await self.round(context, work, first: first, clock: clock) }
        let limits = StallWatch.Limits(minimumSpeed: nil, deadline: deadline, stallTimeout: request.stallTimeout)
        let token = stallWatch.watch(clock, limits: limits) { reason in
            stopped.withLock { $0 = reason }
            round.cancel()
        }
        defer { stallWatch.stop(token) }
        do {
            return try await withTaskCancellationHandler {
                try await round.value
            } onCancel: {
                round.cancel()
            }
        } catch {
            switch stopped.withLock({ $0 }) {
            case .stalled?:
                throw AttemptFailure.transient(
                    DownloadError(
                        .stalled,
                        message: "no data for \(configuration.stallTimeout) (stall timeout) on one connection",
                        url: context.transfer.state.withLock { $0.sources[work.source].url }))
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
        _ context: ConnectionContext, _ work: SegmentWork, first: BodyRest?, clock: ActivityClock
    ) async throws -> SegmentsStop? {
        let rest: BodyRest
        let piece: Piece
        if let first {
            rest = first
            piece = context.transfer.state.withLock {
                Piece(end: $0.table.segments[work.segment].requested, url: $0.sources[work.source].url)
            }
        } else {
            switch try await requestRange(context, work, clock: clock) {
            case .body(let response, let answered):
                piece = answered
                rest = BodyRest(response.body, response.body.makeAsyncIterator())
            case .stop(let stop):
                return stop
            }
        }
        do {
            try await receiveSegment(rest, context, segment: work.segment, piece: piece, clock: clock)
        } catch {
            await rest.body.close()
            throw error
        }
        await rest.body.close()
        return nil
    }

    /// Where a piece a connection asked for ends, and the URL that sends it.
    struct Piece {
        var end: Int64
        var url: URL
    }

    /// What a range request came to: a body to read for a piece, or the end of the segments.
    private enum RangeAnswer {
        case body(TransportResponse, Piece)
        case stop(SegmentsStop)
    }

    /// Sends the next piece's range request of the work's segment to its source through the hop path (following
    /// redirects, which the source's URL then points past), and judges the answer (``SegmentDecision``).
    private func requestRange(
        _ context: ConnectionContext, _ work: SegmentWork, clock: ActivityClock
    ) async throws -> RangeAnswer {
        let (transfer, segment, source) = (context.transfer, work.segment, work.source)
        let piece = transfer.state.withLock { state in
            // Alone (no other connection is worth opening yet), a connection asks for the whole rest of its segment:
            // the pieces are there for others to take what is not asked for yet.
            state.table.requestPiece(segment, size: state.connections.count == 1 ? .max : transfer.pieceSize)
        }
        var (hops, validator) = transfer.state.withLock {
            ($0.sources[source].hops.newChain(), $0.sources[source].validator)
        }
        let ask = RangeAsk(from: piece.lowerBound, end: piece.upperBound, ifRange: validator)
        let outcome = try await send(
            &hops, asking: ask, clock: clock, interruption: nil, slot: context.slot, emit: context.tell)
        guard case .response(let hop) = outcome else { throw CancellationError() }  // not asked to interrupt
        if hops.count > 0 { transfer.state.withLock { $0.sources[source].hops = hops } }
        let stop: SegmentsStop?
        do {
            stop = try checkSegmentResponse(
                hop, transfer, offset: piece.lowerBound, source: source, sentIfRange: validator != nil)
        } catch {
            await hop.response.body.close()
            throw error
        }
        guard let stop else { return .body(hop.response, Piece(end: piece.upperBound, url: hop.url)) }
        await hop.response.body.close()
        return .stop(stop)
    }

    /// A range response must continue the segment at its offset and state the file's total; a source that sends the
    /// whole file (it changed, or ignores `Range`) or another total is refused (``SegmentDecision``). Returns why the
    /// segments end, if they do; a failure of this request is thrown.
    private func checkSegmentResponse(
        _ hop: HopResponse, _ transfer: SegmentedTransfer, offset: Int64, source: Int, sentIfRange: Bool
    ) throws -> SegmentsStop? {
        let asked = transfer.state.withLock { state in
            SegmentDecision.Asked(
                offset: offset, total: transfer.total, given: state.sources[source].given,
                primary: state.sources[0].given, isPrimary: state.sources[source].isPrimary,
                validator: state.sources[source].validator, sentIfRange: sentIfRange)
        }
        switch SegmentDecision(policy: configuration.retryPolicy).decide(
            hop.response.head, from: hop.url, asked: asked, sent: hop.sent)
        {
        case .write(let validator, let lastModified):
            transfer.state.withLock { state in
                if let lastModified { state.lastModified = lastModified }
                if state.sources[source].validator == nil { state.sources[source].validator = validator }
                if state.sources[source].isPrimary { state.primaryVouched = true }
            }
            return nil
        case .abandonSegments(let reason):
            return .abandon(because: reason)
        case .disagree(let error):
            return .disagree(error)
        case .fail(let failure, let hold):
            if let hold { pacer.hold(host: Self.pacingKey(hop.url), for: hold) }
            throw failure
        }
    }

    /// Writes `body` in place from the segment's offset, until its end (which a steal may move down) or the body's.
    private func receiveSegment(
        _ rest: BodyRest, _ context: ConnectionContext, segment: Int, piece: Piece, clock: ActivityClock
    ) async throws {
        let (index, transfer, url, pieceEnd) = (context.index, context.transfer, piece.url, piece.end)
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
                    state.meter.record(count, now: now, first: state.table.written == Int64(count))
                    ? state.progress : nil
                let reserved = state.table.reserved(segment)
                return (progress, checkpoint, state.table.isExhausted(segment) || reserved >= pieceEnd)
            }
            segmentBytes.add(Int64(count), ordering: .relaxed)
            if let progress { context.tell(.progress(progress)) }
            if checkpoint { context.sink.yield(.checkpoint) }
            // The piece is in (a response longer than asked for is not read on), or a faster connection took the rest.
            if exhausted { return }
            if limitsBandwidth {
                try await waitForBandwidth(count, clock: clock) {
                    let progress = transfer.state.withLock { state in
                        state.meter.reportBeforeWaiting(now: .now) ? state.progress : nil
                    }
                    if let progress { context.tell(.progress(progress)) }
                }
            }
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
