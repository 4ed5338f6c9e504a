import Foundation
import HTTPTypes
import HaulOperations
import Logging
import Synchronization

extension DownloadRun {
    /// The connections a file of `total` bytes would be fetched over from here: 1 keeps the one stream.
    func plannedConnections(total: Int64, from offset: Int64) -> Int {
        let wanted = request.maxConnections
        guard wanted > 1 else { return 1 }
        let splits = (total - offset) / max(1, request.minimumSegmentSize)
        return Int(min(Int64(wanted), max(1, splits)))
    }

    /// Whether the next request asks for a first piece (a closed range) instead of the rest of the file: the request
    /// wants segments, and none are running or were given up. A revalidation's condition goes with the piece (a
    /// current file is a `304` all the same), and so does the rest of a file another tool left. With one connection
    /// (mirrors or not) a download is one stream, which moves from source to source with `If-Range`.
    var asksForFirstPiece: Bool {
        request.maxConnections > 1 && segmented == nil && !facts.oneStream
    }

    /// The first piece asked for from `offset`: the smallest segment, so a file too small to split comes whole in it.
    func firstPiece(from offset: Int64) -> Range<Int64> {
        offset..<(offset + max(1, request.minimumSegmentSize))
    }

    /// Whether the `206` to a first piece lets the download go on in segments over several connections: the file's
    /// size and a validator are known, the file is not small, and it is worth a second connection.
    func canSegment(resumeFrom: Int64) -> Bool {
        guard target.path != nil, facts.validator != nil, let total = facts.total, total > Self.restartableLimit else {
            return false
        }
        return plannedConnections(total: total, from: resumeFrom) > 1
    }

    /// Whether the first piece, `received` bytes into it after starting at `offset` at `start`, comes slowly enough
    /// that more connections are worth opening: after a fifth of a second (or at its end, `atEnd`), when the rest of
    /// the file would take more than a second at its speed. A fast link is not split: more connections cost the server
    /// and both machines more, and on a link one connection fills they gain nothing (on loopback, a 1 GiB file from
    /// nginx comes faster over one, written by the stream's own writer thread).
    func worthSegments(
        from offset: Int64, since start: ContinuousClock.Instant, received: Int64, atEnd: Bool = false
    ) -> Bool {
        guard let total = facts.total else { return false }
        let elapsed = (ContinuousClock.now - start).seconds
        guard elapsed >= 0.2 || atEnd, received > 0, elapsed > 0 else { return false }
        return Double(total - offset - received) / (Double(received) / elapsed) > 1
    }

    /// Turns this download into a segmented one at `resumeFrom` (the bytes before it are in the partial, if any), the
    /// first response bringing the bytes up to `firstEnd` (none more when it is `resumeFrom`), and records it in the
    /// journal before a byte is written.
    func startSegments(resumeFrom: Int64, firstEnd: Int64, primary: Hops) async throws {
        guard let destinationPath = target.path, let total = facts.total, let validator = facts.validator else {
            return
        }
        let file: PartialFile
        if let writer {
            try? await writer.drain()
            file = writer.file
            phase = .planning
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
            facts.recorded = true
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
        phase = .segmented(transfer)
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
                    hops: firstHop(to: mirror), given: mirror, isPrimary: false))
        }
        return SegmentedTransfer(
            file: file, table: SegmentTable(total: total, missing: missing), sources: sources, pieceSize: pieceSize,
            meter: ProgressMeter(interval: configuration.progressInterval))
    }

    /// Fetches what is missing of the segmented file over its connections; `first` is the response that started
    /// it, whose body is the first connection's first segment. Emits the connections' events and records their
    /// progress in the journal from this task. Returns `nil` once the file is whole, or why the segments ended; throws
    /// the failure that ended the last connection.
    func runSegments(
        _ transfer: SegmentedTransfer, first: BodyRest?, interruption: TransferInterruption?
    ) async throws -> SegmentsStop? {
        // Each connection is watched for stalls on its own; the whole download only for its time limit and speed.
        lastActivity.setStallsWatchedElsewhere(true)
        defer { lastActivity.setStallsWatchedElsewhere(false) }
        let (notes, sink) = AsyncStream<SegmentNote>.makeStream()
        let work = Task {
            defer { sink.finish() }
            return try await self.runConnections(transfer, first: first, sink: sink)
        }
        // The time limit or the minimum speed of the whole download stops every connection.
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
        let ended = await work.result
        // The connections have ended: what they received counts, and a transfer that ends early has its ranges
        // recorded.
        tally.bytesTransferred += segmentBytes.exchange(0, ordering: .relaxed)
        guard case .success(nil) = ended else {
            if transfer.written > 0 { await recordSegments(transfer) }
            return try ended.get()
        }
        emit(
            .progress(
                DownloadProgress(
                    bytesWritten: transfer.total, totalBytes: transfer.total,
                    bytesPerSecond: transfer.state.withLock { $0.meter.bytesPerSecond })))
        return nil
    }

    /// Records the ranges still missing, so that a killed run resumes each segment where it stopped.
    func recordSegments(_ transfer: SegmentedTransfer) async {
        guard let journal = configuration.journal, facts.recorded, let destinationPath = target.path,
            let validator = facts.validator
        else { return }
        let missing = transfer.missing
        await journal.commit(
            JournalRecord(
                key: partialKey, path: destinationPath,
                state: .partial(validator: validator, totalBytes: transfer.total, missingRanges: missing),
                request: request))
    }

    /// The same, without suspending: when a failed or cancelled download keeps its partial.
    func storeSegments(_ transfer: SegmentedTransfer) {
        guard let journal = configuration.journal, let destinationPath = target.path, let validator = facts.validator
        else { return }
        journal.store(
            JournalRecord(
                key: partialKey, path: destinationPath,
                state: .partial(validator: validator, totalBytes: transfer.total, missingRanges: transfer.missing),
                request: request))
    }
}
