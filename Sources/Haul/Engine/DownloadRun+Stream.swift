import Foundation
import HTTPTypes
import HaulOperations
import Logging
import Synchronization

extension DownloadRun {
    /// One attempt, watched: if neither a response head nor a body byte arrives for the stall timeout, the
    /// transfer is stopped and the attempt fails as `stalled` (transient). Returns the result of a download that
    /// ended without a file to publish (skipped, or unchanged), else `nil`.
    ///
    /// On an ``InterruptibleHTTPTransport`` the attempt runs right here and a stall interrupts its exchange. Any other
    /// transport can only be stopped by cancelling the task it runs in, so there (and from a redirect on to a request
    /// the transport cannot interrupt) the attempt goes on in a task of its own.
    func attemptWithWatchdog() async throws(AttemptFailure) -> DownloadResult? {
        lastActivity.touch()
        var cursor = StreamCursor(
            hops: firstHop(to: sources.url))
        if interruptibleTransport != nil {
            let interruption = TransferInterruption()
            let end = try await watched(onStall: interruption.interrupt) {
                try await attempt(&cursor, interruption: interruption)
            }
            // Else a redirect led to a request the transport cannot interrupt.
            if case .finished(let skipped) = end { return skipped }
        }
        // A download cancelled already starts no attempt: its own task would run before the cancellation reached it
        // and put the request on the wire (URLSession sends at resume(), before its cancellation handler runs).
        if Task.isCancelled { throw attemptFailure(CancellationError(), stoppedFor: nil) }
        // Its own task, so that a stall can cancel this attempt alone and the download can still retry.
        let from = cursor
        let transfer = Task {
            var cursor = from
            return try await self.attempt(&cursor, interruption: nil)
        }
        let end = try await watched(onStall: transfer.cancel) {
            try await withTaskCancellationHandler {
                try await transfer.value
            } onCancel: {
                transfer.cancel()
            }
        }
        guard case .finished(let skipped) = end else { return nil }  // only an interruptible attempt needs a task
        return skipped
    }

    /// Runs `body` while the stall watch looks at this attempt's activity; `stop` ends the transfer on a stall.
    /// What `body` throws comes back as the retry loop sees it.
    private func watched<Value>(
        onStall stop: @escaping @Sendable () -> Void, _ body: () async throws -> Value
    ) async throws(AttemptFailure) -> Value {
        let stopped = Locked<StallWatch.Reason?>(nil)
        let limits = StallWatch.Limits(
            minimumSpeed: minimumSpeed, deadline: deadline, stallTimeout: request.stallTimeout)
        let token = stallWatch.watch(lastActivity, limits: limits) { reason in
            stopped.withLock { $0 = reason }
            stop()
        }
        defer { stallWatch.stop(token) }
        do {
            return try await body()
        } catch {
            throw attemptFailure(error, stoppedFor: stopped.withLock { $0 })
        }
    }

    /// What ended an attempt early, as the retry loop sees it.
    private func attemptFailure(_ error: any Error, stoppedFor reason: StallWatch.Reason?) -> AttemptFailure {
        switch reason {
        case .stalled?:
            // A proxy in between may be what went silent: it is named.
            let between = options(for: tally.finalURL).proxy.map { ", the proxy \($0)" } ?? ""
            return .transient(
                DownloadError(
                    .stalled,
                    message:
                        "no data for \(configuration.stallTimeout) (stall timeout); the server\(between) or network stopped",
                    url: tally.finalURL))
        case .tooSlow?:
            return .transient(
                DownloadError(
                    .tooSlow,
                    message: "slower than \(minimumSpeed?.bytesPerSecond ?? 0) bytes/s for "
                        + "\(minimumSpeed?.duration ?? .zero) (minimum speed); the server or network is too slow",
                    url: tally.finalURL))
        case .timedOut?:
            return .permanent(timedOutError(after: "the transfer was still running"))
        case nil:
            break
        }
        if let failure = error as? AttemptFailure { return failure }
        if Task.isCancelled { return .permanent(cancelledError()) }
        return transportFailure(error, url: tally.finalURL)
    }

    /// Where an attempt is: its hops, and whether the next request may continue the bytes held.
    struct StreamCursor: Sendable {
        var hops: Hops
        var mayResume = true
    }

    /// How an attempt ended: done (with the result of a download that has no file to publish), or at a request the
    /// interruptible transport cannot interrupt.
    enum AttemptEnd {
        case finished(skipped: DownloadResult?)
        case needsOwnTask
    }

    /// What an attempt does after a response: it is done (with the result of a download that has no file to publish),
    /// or it sends another request (a restart from zero, or without a first piece).
    enum AfterResponse {
        case finished(skipped: DownloadResult?)
        case sendAgain
    }

    /// Requests the file and streams the body into the partial file (or goes on in segments). With `interruption`,
    /// every request goes through ``interruptibleTransport`` (see ``attemptWithWatchdog()``).
    private func attempt(_ cursor: inout StreamCursor, interruption: TransferInterruption?) async throws -> AttemptEnd {
        if let segmented {
            guard try await segmentsToEnd(segmented, first: nil, interruption: interruption) == .abandoned else {
                return .finished(skipped: nil)
            }
            cursor.mayResume = false
        }
        while true {
            let asked = nextAsk(mayResume: cursor.mayResume)
            let condition = target.revalidation.flatMap { $0.answered ? nil : $0.validator }
            let ask = RangeAsk(
                from: asked.from, end: asked.pieceEnd, ifRange: asked.from > 0 ? facts.validator : nil,
                condition: condition)
            let outcome = try await send(
                &cursor.hops, asking: ask, clock: nil, interruption: interruption, slot: .download, emit: emit)
            guard case .response(let hop) = outcome else { return .needsOwnTask }
            // The response is closed on every way out, before the attempt ends: a queue frees the download's slot
            // after that, and the transport has by then let go of a connection it will not reuse.
            let next: AfterResponse
            do {
                next = try await handle(hop, asked: asked, cursor: &cursor, interruption: interruption)
            } catch {
                await hop.response.body.close()
                throw error
            }
            await hop.response.body.close()
            if case .finished(let skipped) = next { return .finished(skipped: skipped) }
        }
    }

    /// What the next one-stream request asks for, from what the run holds.
    private func nextAsk(mayResume: Bool) -> ResponseDecision.Asked {
        let from: Int64 =
            if mayResume, facts.validator != nil {
                writer?.size ?? 0
            } else if mayResume, let continuation {
                continuation
            } else {
                0
            }
        // A download that may go on in segments asks for a first piece, never for the whole rest: a segment's
        // connection then never has to end a response early (which would leave the server counting a connection
        // that is gone while the next one starts).
        // (Bytes without a validator are a first piece only when they are a file another tool left: its rest has
        // none to ask with.)
        let pieceEnd =
            asksForFirstPiece && (from == 0 || facts.validator != nil || continuation != nil)
            ? firstPiece(from: from).upperBound : nil
        return ResponseDecision.Asked(
            from: from, validator: from > 0 ? facts.validator : nil, pieceEnd: pieceEnd,
            revalidating: target.revalidation.map { !$0.answered } ?? false,
            continuing: continuation != nil, held: writer?.size ?? 0, knownTotal: facts.total)
    }

    /// Carries out what ``ResponseDecision`` says of one response.
    private func handle(
        _ hop: HopResponse, asked: ResponseDecision.Asked, cursor: inout StreamCursor,
        interruption: TransferInterruption?
    ) async throws -> AfterResponse {
        let head = hop.response.head
        let url = hop.url
        tally.finalURL = url
        // Any 2xx answers a revalidation: the server has a new copy (whatever becomes of this response).
        if asked.revalidating, (200..<300).contains(head.status.code), var revalidation = target.revalidation {
            revalidation.answered = true
            target.replaces = .completedFile(revalidation, stamp: revalidation.stamp)
            emit(.revalidated(modified: true))
        }
        let rules = ResponseDecision(policy: configuration.retryPolicy, maxSize: request.maxSize)
        switch rules.decide(head, from: url, asked: asked, sent: hop.sent) {
        case .notModified:
            guard let revalidation = target.revalidation else { return .finished(skipped: nil) }
            keepAfterNotModified(revalidation, head: head)
            emit(.revalidated(modified: false))
            return .finished(
                skipped: try endingForGood { () throws(DownloadError) in
                    try existingFileResult(
                        path: revalidation.path, size: revalidation.size, sha256: revalidation.sha256, finalURL: url,
                        notModified: true)
                })
        case .askWithoutPiece:
            facts.oneStream = true
            return .sendAgain
        case .complete(let total):
            facts.total = total  // every byte is already here
            return .finished(skipped: nil)
        case .foreignFileComplete(let size):
            // The file another tool left is complete already: it stays as it is.
            return .finished(
                skipped: try endingForGood { () throws(DownloadError) in
                    try existingFileResult(path: target.path ?? "", size: size, sha256: nil, finalURL: url)
                })
        case .startOver(let reason):
            try await restartFromZero()
            if let skipped = try abandonContinuation(because: reason) { return .finished(skipped: skipped) }
            cursor.mayResume = false
            return .sendAgain
        case .misfit(let failure):
            if asked.continuing { try startContinuation(at: asked.from, url: url) }
            try await restartFromZero()
            throw failure
        case .fail(let failure, let hold):
            if let hold { pacer.hold(host: Self.pacingKey(url), for: hold) }
            throw failure
        case .write(let write):
            if let skipped = try await prepare(write, asked: asked, url: url, head: head) {
                return .finished(skipped: skipped)
            }
            return try await stream(hop, write: write, asked: asked, cursor: &cursor, interruption: interruption)
        }
    }

    /// Readies the run for the body `write` describes: what becomes of the bytes held or of another tool's file, the
    /// file's total and validator, the size limit, the destination's name. Returns a result when that leaves the
    /// download done (a file there already, skipped).
    private func prepare(
        _ write: ResponseDecision.Write, asked: ResponseDecision.Asked, url: URL, head: HTTPResponse
    ) async throws -> DownloadResult? {
        // A 200 to a first piece: the server sends no ranges, so no segments either.
        if write.endsPieces { facts.oneStream = true }
        if write.startsContinuation { try startContinuation(at: asked.from, url: url) }
        // A 200 to a Range request means the whole file again: never append it.
        if write.abandonsContinuation,
            let skipped = try abandonContinuation(because: "the server sent the whole file, not the rest")
        {
            return skipped
        }
        if write.discardsHeld { try await restartFromZero() }
        facts.total = write.total
        facts.validator = write.validator
        if configuration.usesRemoteModificationTime { facts.lastModified = write.lastModified }
        if let refusal = write.refusal { throw AttemptFailure.permanent(refusal) }
        guard target.path == nil else { return nil }
        return try chooseDestinationName(from: head)
    }

    /// Streams the body `write` describes into the partial; the first piece of a file that may be split is handed
    /// over to the segments when it comes slowly enough.
    private func stream(
        _ hop: HopResponse, write: ResponseDecision.Write, asked: ResponseDecision.Asked, cursor: inout StreamCursor,
        interruption: TransferInterruption?
    ) async throws -> AfterResponse {
        let (from, url) = (asked.from, hop.url)
        // The first piece of a file that may be split comes as one stream; if it comes slowly enough that more
        // connections are worth it, it is handed over to the segments there and then.
        let mayHandOver = write.isRange && asked.pieceEnd != nil && canSegment(resumeFrom: from)
        try ensurePartial()
        // Small bodies are not worth a journal write: an interrupted one is fetched again whole, cheaply.
        if let journal = configuration.journal, let validator = facts.validator, let destinationPath = target.path,
            (facts.total ?? .max) > Self.restartableLimit
        {
            await journal.commit(
                JournalRecord(
                    key: partialKey, path: destinationPath,
                    state: .partial(validator: validator, totalBytes: facts.total), request: request))
            facts.recorded = true
        }
        // Timed from the request: a client slow to read the head would otherwise see a backlog come in a burst.
        let start = hop.sentAt
        let rest = try await receive(
            hop.response.body, length: write.bodyLength, expected: write.expected, url: url,
            handOver: mayHandOver ? { self.worthSegments(from: from, since: start, received: $0) } : nil)
        // The piece came whole, but quickly enough to judge: the rest in segments if it would take a while.
        let segmentsNow =
            rest == nil && mayHandOver
            && (writer?.size).map {
                $0 < (facts.total ?? 0) && worthSegments(from: from, since: start, received: $0 - from, atEnd: true)
            } == true
        if rest != nil || segmentsNow, let writer {
            try await startSegments(
                resumeFrom: writer.size, firstEnd: from + (write.expected ?? 0), primary: cursor.hops)
            guard let segmented else { return .finished(skipped: nil) }
            let first = rest.map { BodyRest(hop.response.body, $0) }
            guard try await segmentsToEnd(segmented, first: first, interruption: interruption) == .abandoned else {
                return .finished(skipped: nil)
            }
            cursor.mayResume = false
            return .sendAgain
        }
        if write.isRange, asked.pieceEnd != nil, let totalBytes = facts.total, let writer, writer.size < totalBytes {
            // A first piece of a file that is not fetched in segments (no validator to check the pieces with, or too
            // small to split): the rest as one stream, resumed with If-Range, or from zero without a validator.
            facts.oneStream = true
            if facts.validator == nil {
                try await restartFromZero()
                cursor.mayResume = false
            }
            return .sendAgain
        }
        try await checkFinalSize(url: url)
        return .finished(skipped: nil)
    }

    /// After a body ended normally: the file must be as long as the total the responses stated. Anything else
    /// starts the download over from zero (transient), so a server that lies about lengths never gets a file
    /// published.
    private func checkFinalSize(url: URL) async throws {
        guard let totalBytes = facts.total, let writer else { return }
        try? await writer.drain()
        let size = writer.size
        guard size != totalBytes else { return }
        try await restartFromZero()
        throw AttemptFailure.transient(
            DownloadError(
                .invalidResponse,
                message: "the server's responses add up to \(size) bytes for a file of \(totalBytes); starting over",
                url: url, bytesReceived: size))
    }

    /// Streams `body` into the partial. `expected`, when known, is how many bytes the body may bring (a `206`'s
    /// range): more than that is a lying server, and the attempt stops before writing them.
    ///
    /// `handOver`, asked after each chunk with the bytes received so far, says when the rest of the body goes to the
    /// segments instead: the reading stops there and the rest is returned, not read.
    private func receive(
        _ body: ResponseBody, length: Int64?, expected: Int64?, url: URL, handOver: ((Int64) -> Bool)? = nil
    ) async throws -> ResponseBody.AsyncIterator? {
        guard let writer else { return nil }
        let start = writer.size
        var received: Int64 = 0
        var chunks = body.makeAsyncIterator()
        do {
            while let chunk = try await chunks.next() {
                lastActivity.received(chunk.count)
                let count = Int64(chunk.count)
                if let expected, received + count > expected {
                    try await restartFromZero()
                    throw AttemptFailure.transient(
                        DownloadError(
                            .invalidResponse,
                            message:
                                "the server sent more than the \(expected) bytes its response announced; starting over",
                            url: url, bytesReceived: received + count))
                }
                if let max = request.maxSize, start + received + count > max {
                    throw AttemptFailure.permanent(
                        DownloadError(
                            .sizeLimitExceeded, message: "the body grew over the limit of \(max) bytes", url: url,
                            bytesReceived: start + received + count))
                }
                try await writer.write(chunk, url: url)
                received += count
                tally.bytesTransferred += count
                let first = received == count && received != length
                if tally.meter.record(chunk.count, now: .now, first: first) { emitProgress(start + received) }
                if limitsBandwidth {
                    try await waitForBandwidth(chunk.count) {
                        if tally.meter.reportBeforeWaiting(now: .now) { emitProgress(start + received) }
                    }
                }
                if let handOver, handOver(received) {
                    try await writer.drain()
                    return chunks
                }
            }
            try await writer.drain()
        } catch {
            // Whatever ended the attempt, the queued bytes land before anyone looks at the file again.
            let drained: DownloadError?
            do { try await writer.drain(); drained = nil } catch { drained = error }
            if let failure = error as? AttemptFailure { throw failure }
            if let error = (error as? DownloadError) ?? drained { throw AttemptFailure.permanent(error) }
            if Task.isCancelled { throw CancellationError() }
            throw AttemptFailure.transient(
                DownloadError(
                    .truncated, message: "connection lost after \(received) body bytes: \(error)", url: url,
                    bytesReceived: received, underlying: error))
        }
        emitProgress(start + received)
        // A range's end is its own even without a `Content-Length` (a body ended by the connection's close): one that
        // falls short of it was cut, and what came is resumed from, as after a cut body whose length was given.
        if let length = length ?? expected, received < length {
            throw AttemptFailure.transient(
                DownloadError(
                    .truncated, message: "connection closed after \(received) of \(length) bytes", url: url,
                    bytesReceived: received))
        }
        return nil
    }

    private func emitProgress(_ bytesWritten: Int64) {
        emit(
            .progress(
                DownloadProgress(
                    bytesWritten: bytesWritten, totalBytes: facts.total, bytesPerSecond: tally.meter.bytesPerSecond)))
    }

    /// Waits for this request's turn under the downloader's pacing and the holds hosts asked for, telling `emit`
    /// why. The wait is the download's own choice, not a stall (nor for `clock`, a connection's own); one that would
    /// end past the time limit ends the download now.
    func waitForTurn(
        url: URL, clock: ActivityClock? = nil, emit: @Sendable (DownloadEvent) -> Void
    ) async throws {
        let host = Self.pacingKey(url)
        var told = false
        while let (delay, reason) = pacer.claim(host: host) {
            let until = ContinuousClock.now + delay
            if let deadline, until >= deadline {
                throw AttemptFailure.permanent(
                    timedOutError(after: "the next request to \(url.host() ?? "the host") may start only after it"))
            }
            if !told {
                // Once per request: a turn another request took meanwhile only lengthens the same wait.
                told = true
                emit(.throttled(reason: reason, delay: delay))
                logger.debug("waiting for the request's turn", metadata: ["delay": "\(delay)", "reason": "\(reason)"])
            }
            lastActivity.waits(until: until)
            clock?.waits(until: until)
            try await Task.sleep(until: until, clock: .continuous)
        }
    }

    /// The download's own bandwidth limit: its owner's, which may be set, changed or lifted while it runs, else its
    /// request's.
    var ownBandwidth: TokenBucket? { control?.bandwidth ?? requestBandwidth }

    /// Whether a bandwidth limit applies now.
    var limitsBandwidth: Bool { sharedLimit.current?.isLimited == true || ownBandwidth?.isLimited == true }

    /// Takes `count` bytes from the bandwidth limits and waits as long as they say (ending at the time limit); the
    /// wait is no stall for `clock` either (a connection's own). A wait longer than the progress interval first calls
    /// `beforeLongWait`, so progress not yet told is told before the download holds still.
    func waitForBandwidth(
        _ count: Int, clock: ActivityClock? = nil, beforeLongWait: () -> Void
    ) async throws {
        var now = ContinuousClock.now
        let ownBandwidth = self.ownBandwidth
        let sharedBandwidth = sharedLimit.current
        var sharedUntil = now + (sharedBandwidth?.take(count, now: now) ?? .zero)
        var ownUntil = now + (ownBandwidth?.take(count, now: now) ?? .zero)
        if max(sharedUntil, ownUntil) - now > configuration.progressInterval { beforeLongWait() }
        // Either limit may change while the download waits (its queue sets, lowers or lifts its own; the downloader's
        // owner the shared one): the wait is looked at again when one has, at least every quarter of a second.
        let versions = (shared: sharedBandwidth?.version, own: ownBandwidth?.version)
        while case let end = max(sharedUntil, ownUntil), end > now {
            var until = min(end, now + .milliseconds(250))
            if let deadline, until >= deadline { until = deadline }
            lastActivity.waits(until: until)
            clock?.waits(until: until)
            try await Task.sleep(until: until, clock: .continuous)
            now = .now
            if let deadline, now >= deadline {
                throw AttemptFailure.permanent(timedOutError(after: "the transfer was still running"))
            }
            if let ownBandwidth, ownBandwidth.version != versions.own {
                ownUntil = now + ownBandwidth.remainingDelay(now: now)
            }
            if let sharedBandwidth, sharedBandwidth.version != versions.shared {
                sharedUntil = now + sharedBandwidth.remainingDelay(now: now)
            }
        }
    }

    /// The key requests are paced by: the host name, whatever the scheme and port.
    static func pacingKey(_ url: URL) -> String {
        url.host(percentEncoded: false)?.lowercased() ?? ""
    }

    /// Gives up continuing the file another tool left (the server will not send its rest): the conflict policy
    /// decides what happens to it now. Returns a result when that leaves the download done (skipped).
    private func abandonContinuation(because reason: String) throws -> DownloadResult? {
        guard continuation != nil, let destinationPath = target.path else { return nil }
        phase = .planning
        do {
            return try checkDestination(destinationPath)
        } catch {
            guard error.code == .destinationExists else { throw AttemptFailure.permanent(error) }
            throw AttemptFailure.permanent(
                DownloadError(
                    .destinationExists,
                    message:
                        "cannot continue '\(destinationPath)': \(reason); left untouched (choose skip, overwrite or "
                        + "rename)", url: error.url, path: error.path))
        }
    }

    /// Starts the partial of a continued file with a copy of the `size` bytes at the destination, which the server's
    /// rest is appended to; the whole replaces the file when it is published.
    private func startContinuation(at size: Int64, url: URL) throws {
        guard let destinationPath = target.path else { return }
        let writer = try endingForGood { () throws(DownloadError) in
            let file = try PartialFile(
                creatingAt: PartialFile.partialPath(forDestination: destinationPath), url: request.url)
            try file.append(copyOf: destinationPath, count: size, url: request.url)
            return try BackgroundWriter(
                resuming: file, algorithm: request.expectedDigest?.algorithm,
                computesSHA256: configuration.computesSHA256, url: request.url)
        }
        phase = .streaming(writer)
        target.replaces = .foreignFile
        logger.debug("continuing a file another tool left", metadata: ["bytes": "\(size)"])
    }

    /// The options for a request to `url`: the downloader's, with the proxy its configuration picks for `url` and
    /// the receive window of the bandwidth limits that apply now (the download's own, the shared one).
    func options(for url: URL) -> TransportOptions {
        let ownLimit = ownBandwidth?.isLimited == true ? ownBandwidth?.bytesPerSecond : nil
        let shared = sharedLimit.current
        let sharedLimit = shared?.isLimited == true ? shared?.bytesPerSecond : nil
        guard configuration.proxy != .none || ownLimit != nil || sharedLimit != nil else { return transportOptions }
        var options = transportOptions
        if configuration.proxy != .none { options.proxy = configuration.proxy.proxy(for: url) }
        for limit in [ownLimit, sharedLimit].compactMap({ $0 }) {
            options.receiveWindow = min(options.receiveWindow ?? .max, Downloader.receiveWindow(forRate: limit))
        }
        return options
    }

    /// The first hop of a request to `source` (the request's URL or a mirror): its fields are the request's own,
    /// without its credential fields (`Authorization`, `Cookie`, `Proxy-Authorization`) for a mirror at another origin
    /// than the request's URL.
    func firstHop(to source: URL) -> Hops {
        Hops(url: source, fields: fields(for: source))
    }

    private func fields(for source: URL) -> HTTPFields {
        // Most requests have no mirror: their URL is their origin, with nothing to compare.
        guard source != request.url else { return request.headerFields }
        var fields = request.headerFields
        if HTTPRules.origin(of: source) != HTTPRules.origin(of: request.url) {
            for name in HTTPRules.credentialFields { fields[name] = nil }
        }
        return fields
    }

    /// The fields of the current hop of `hops` with the credentials and cookies for its URL added: `Authorization:
    /// Basic` with the request's own credentials on the origin of its URL (on no other, and not once a redirect has
    /// left the first hop's origin), else those of the credential provider (not over plain `http` when an earlier hop
    /// was `https`); the cookie jar's cookies for the URL after any `Cookie` of the request's own. Fields the caller
    /// set win.
    func withCredentialsAndCookies(for hops: Hops) -> HTTPFields {
        if request.credentials == nil && configuration.credentials == nil && configuration.cookies == nil {
            return hops.fields
        }
        let url = hops.url
        var fields = hops.fields
        if fields[.authorization] == nil {
            let credentials: Credentials? =
                if let own = request.credentials, !hops.leftOrigin,
                    HTTPRules.origin(of: url) == HTTPRules.origin(of: request.url)
                {
                    own
                } else if hops.wasSecure && !HTTPRules.isSecure(url) {
                    nil
                } else {
                    configuration.credentials?.credentials(for: url)
                }
            if let credentials { fields[.authorization] = credentials.basicAuthorization }
        }
        if let jar = configuration.cookies, let cookies = jar.cookieHeader(for: url) {
            fields[.cookie] = fields[.cookie].map { $0 + "; " + cookies } ?? cookies
        }
        return fields
    }

    func transportFailure(_ error: any Error, url: URL) -> AttemptFailure {
        if let failure = error as? AttemptFailure { return failure }
        // A transport's own words name the host and the reason; anything else is the library's description.
        let failure =
            if let readable = error as? TransportError {
                DownloadError(.transport, message: readable.message, url: url, underlying: readable.underlying ?? error)
            } else {
                DownloadError(.transport, message: "request failed: \(error)", url: url, underlying: error)
            }
        if let classified = error as? any TransportFailure, !classified.isTransient { return .permanent(failure) }
        return .transient(failure)
    }

    private func restartFromZero() async throws {
        do {
            try await writer?.restart(url: tally.finalURL)
        } catch {
            throw AttemptFailure.permanent(error)
        }
        forgetHeldBytes()
    }

    /// The bytes held are gone (the partial emptied for another version): the journal's partial record, which offers
    /// them for a resume under their validator, goes before a byte of the new version is written. The download stays
    /// recorded as requested, so that a run killed now finds it again; a new copy of a completed file has no record of
    /// its own to fall back to.
    private func forgetHeldBytes() {
        facts.validator = nil
        defer { facts.recorded = false }
        guard facts.recorded, let journal = configuration.journal else { return }
        if target.replacesCompleted {
            journal.remove(partialKey)
        } else {
            journal.store(JournalRecord(key: journalKey, path: target.path ?? "", state: .requested, request: request))
        }
    }

    /// Names the destination of a `.directory` request from the response's `Content-Disposition`, else the URL.
    /// Returns a result when a file there already is skipped.
    private func chooseDestinationName(from head: HTTPResponse) throws -> DownloadResult? {
        guard case .directory(let directory, _) = request.destination else { return nil }
        let suggested = head.headerFields[.contentDisposition].flatMap(FileNaming.name(fromContentDisposition:))
        guard let name = suggested ?? FileNaming.name(for: request.url) else {
            throw AttemptFailure.permanent(
                DownloadError(
                    .unsafeName, message: "no safe file name in the URL or Content-Disposition; give one explicitly",
                    url: request.url))
        }
        let path = FileNaming.path(name, in: directory.path)
        let skipped = try endingForGood { () throws(DownloadError) in try checkDestination(path) }
        target.path = path
        return skipped
    }

    /// `body`'s result; its error ends the download (a permanent failure: another attempt would meet it again).
    func endingForGood<Result>(_ body: () throws(DownloadError) -> Result) throws(AttemptFailure) -> Result {
        do {
            return try body()
        } catch {
            throw AttemptFailure.permanent(error)
        }
    }

    private func ensurePartial() throws {
        guard writer == nil, let destinationPath = target.path else { return }
        // A small body that nobody would resume (see the journal write above) and that must not replace a file
        // goes to an unnamed file where the system has them: one directory change to publish, not three.
        let small =
            (facts.total ?? .max) <= Self.restartableLimit && request.conflictPolicy != .overwrite
            && !target.replacesFile
        let file: PartialFile
        if small, let unnamed = PartialFile(unnamedFor: destinationPath) {
            file = unnamed
        } else {
            file = try endingForGood { () throws(DownloadError) in
                try PartialFile(creatingAt: PartialFile.partialPath(forDestination: destinationPath), url: request.url)
            }
        }
        phase = .streaming(
            BackgroundWriter(
                file: file, algorithm: request.expectedDigest?.algorithm, computesSHA256: configuration.computesSHA256))
    }
}

extension DownloadRun {
    /// After the last segment: the whole file is the partial a one-stream download would have, and is verified and
    /// published as one (its digest read from the file, in order).
    func finishSegments() throws {
        guard let segmented else { return }
        tally.servedBy = segmented.state.withLock { $0.sources.max { $0.bytes < $1.bytes }?.given }
        if configuration.usesRemoteModificationTime, facts.lastModified == nil {
            facts.lastModified = segmented.state.withLock { $0.lastModified }
        }
        phase = .streaming(
            try endingForGood { () throws(DownloadError) in
                try BackgroundWriter(
                    resuming: segmented.file, algorithm: request.expectedDigest?.algorithm,
                    computesSHA256: configuration.computesSHA256, url: request.url)
            })
    }

    /// How a segmented transfer ended: the file is whole, or the segments were given up for one stream from zero.
    enum SegmentsEnd { case complete, abandoned }

    /// Fetches the rest of `segmented` over its connections (`first`: the rest of the response that started it), and
    /// readies what follows: the whole file to verify and publish, or an empty partial for one stream from zero.
    func segmentsToEnd(
        _ segmented: SegmentedTransfer, first: BodyRest?, interruption: TransferInterruption?
    ) async throws -> SegmentsEnd {
        switch try await runSegments(segmented, first: first, interruption: interruption) {
        case nil:
            try finishSegments()
            return .complete
        case .abandon(let reason)?:
            try await abandonSegments(because: reason)
            return .abandoned
        case .disagree(let error)?:
            throw AttemptFailure.permanent(error)
        }
    }

    /// Gives segments up for one stream from zero: the partial is emptied, so no byte of another version stays.
    private func abandonSegments(because reason: String) async throws {
        guard let segmented else { return }
        logger.info("segments given up; one stream from zero", metadata: ["reason": "\(reason)"])
        try endingForGood { () throws(DownloadError) in try segmented.file.truncate(url: request.url) }
        phase = .streaming(
            BackgroundWriter(
                file: segmented.file, algorithm: request.expectedDigest?.algorithm,
                computesSHA256: configuration.computesSHA256))
        facts.oneStream = true
        forgetHeldBytes()
    }
}
