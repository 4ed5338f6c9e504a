import Foundation
import HTTPTypes
import HaulOperations
import Logging
import Synchronization

extension DownloadRun {
    /// One attempt, watched: if neither a response head nor a body byte arrives for the stall timeout, the
    /// transfer is stopped and the attempt fails as `stalled` (transient).
    ///
    /// On an ``InterruptibleHTTPTransport`` the attempt runs right here and a stall interrupts its exchange. Any other
    /// transport can only be stopped by cancelling the task it runs in, so there (and from a redirect on to a request
    /// the transport cannot interrupt) the attempt goes on in a task of its own.
    func attemptWithWatchdog() async throws(AttemptFailure) {
        lastActivity.touch()
        var hops = Hops(url: sources.url, fields: sources.isFirst ? request.headerFields : fields(for: sources.url))
        if interruptibleTransport != nil {
            let interruption = TransferInterruption()
            var needsOwnTask = false
            try await watched(onStall: interruption.interrupt) {
                do {
                    try await attempt(&hops, interruption: interruption)
                } catch is NeedsOwnTask {
                    needsOwnTask = true  // a redirect led to a request the transport cannot interrupt
                }
            }
            if !needsOwnTask { return }
        }
        // Its own task, so that a stall can cancel this attempt alone and the download can still retry.
        let from = hops
        let transfer = Task {
            var hops = from
            try await self.attempt(&hops, interruption: nil)
        }
        try await watched(onStall: transfer.cancel) {
            try await withTaskCancellationHandler {
                try await transfer.value
            } onCancel: {
                transfer.cancel()
            }
        }
    }

    /// Runs `body` while the stall watch looks at this attempt's activity; `stop` ends the transfer on a stall.
    /// What `body` throws comes back as the retry loop sees it.
    private func watched(
        onStall stop: @escaping @Sendable () -> Void, _ body: () async throws -> Void
    ) async throws(AttemptFailure) {
        let stopped = Locked<StallWatch.Reason?>(nil)
        let limits = StallWatch.Limits(minimumSpeed: minimumSpeed, deadline: deadline)
        let token = stallWatch.watch(lastActivity, limits: limits) { reason in
            stopped.withLock { $0 = reason }
            stop()
        }
        defer { stallWatch.stop(token) }
        do {
            try await body()
        } catch {
            throw attemptFailure(error, stoppedFor: stopped.withLock { $0 })
        }
    }

    /// What ended an attempt early, as the retry loop sees it.
    private func attemptFailure(_ error: any Error, stoppedFor reason: StallWatch.Reason?) -> AttemptFailure {
        switch reason {
        case .stalled?:
            // A proxy in between may be what went silent: it is named.
            let between = options(for: finalURL).proxy.map { ", the proxy \($0)" } ?? ""
            return .transient(
                DownloadError(
                    .stalled,
                    message:
                        "no data for \(stallWatch.timeout) (stall timeout); the server\(between) or network stopped",
                    url: finalURL))
        case .tooSlow?:
            return .transient(
                DownloadError(
                    .tooSlow,
                    message: "slower than \(minimumSpeed?.bytesPerSecond ?? 0) bytes/s for "
                        + "\(minimumSpeed?.duration ?? .zero) (minimum speed); the server or network is too slow",
                    url: finalURL))
        case .timedOut?:
            return .permanent(timedOutError(after: "the transfer was still running"))
        case nil:
            break
        }
        if let failure = error as? AttemptFailure { return failure }
        if Task.isCancelled { return .permanent(cancelledError()) }
        return transportFailure(error, url: finalURL)
    }

    /// Where an attempt is in its chain of redirects.
    struct Hops {
        var url: URL
        var fields: HTTPFields
        /// The URLs visited, made at the first redirect (most downloads have none).
        var visited: Set<String> = []
        var count = 0
        var mayResume = true
        /// Whether a hop before the current one was `https`: a credential provider's credentials never go over plain
        /// `http` after it (a downgrade would send them in clear).
        var wasSecure = false
    }

    /// Thrown before sending a request that the interruptible transport cannot interrupt.
    private struct NeedsOwnTask: Error {}

    /// Requests the file (following redirects) and streams the body into the partial file. With `interruption`,
    /// every request goes through ``interruptibleTransport`` (see ``attemptWithWatchdog()``).
    private func attempt(_ hops: inout Hops, interruption: TransferInterruption?) async throws {
        if let segmented {
            do {
                try await runSegments(segmented, first: nil, interruption: interruption)
                try finishSegments()
                return
            } catch let abandoned as SegmentsAbandoned {
                try await abandonSegments(abandoned)
                hops.mayResume = false
            } catch {
                bytesTransferred += segmentBytes.exchange(0, ordering: .relaxed)
                throw error
            }
        }
        while true {
            let url = hops.url
            let resumeFrom: Int64 =
                if hops.mayResume, validator != nil {
                    writer?.size ?? 0
                } else if hops.mayResume, writer == nil, let continuation {
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
                asksForFirstPiece && (resumeFrom == 0 || validator != nil || (writer == nil && continuation != nil))
                ? firstPiece(from: resumeFrom).upperBound : nil
            // Most downloaders pace nothing, and no host asked them for time.
            if pacer.isActive { try await waitForTurn(url: url, emit: emit) }
            let head = makeRequest(
                url: url, fields: withCredentialsAndCookies(hops.fields, for: url, afterHTTPS: hops.wasSecure),
                resumeFrom: resumeFrom, pieceEnd: pieceEnd)
            let options = options(for: url)
            logger.debug("request", metadata: ["url": "\(url.redactedString)", "range-from": "\(resumeFrom)"])
            // A cancelled task sends nothing: some transports would still put the request on the wire.
            try Task.checkCancellation()
            let sentAt = ContinuousClock.now
            let response: TransportResponse
            do {
                if let interruption {
                    guard let interruptibleTransport,
                        interruptibleTransport.canInterrupt(head, options: options)
                    else {
                        throw NeedsOwnTask()
                    }
                    response = try await interruptibleTransport.send(
                        head, options: options, interruption: interruption)
                } else {
                    response = try await transport.send(head, options: options)
                }
            } catch let needed as NeedsOwnTask {
                throw needed
            } catch {
                if Task.isCancelled { throw CancellationError() }
                throw transportFailure(error, url: url)
            }
            lastActivity.touch()
            // The response is closed on every way out, before the attempt ends: a queue frees the download's slot
            // after that, and the transport has by then let go of a connection it will not reuse.
            let next: AfterResponse
            do {
                next = try await handle(
                    response, url: url, resumeFrom: resumeFrom, pieceEnd: pieceEnd, sentAt: sentAt, hops: &hops,
                    proxy: options.proxy,
                    sentCredentials: head.headerFields[.authorization] != nil, interruption: interruption)
            } catch {
                await response.body.close()
                throw error
            }
            await response.body.close()
            if next == .finished { return }
        }
    }

    /// What an attempt does after a response: it is done, or it sends another request (a redirect, or a restart
    /// from zero).
    enum AfterResponse { case finished, sendAgain }

    /// Handles one response: follows a redirect, checks a range, or streams the body into the partial file.
    private func handle(
        _ response: TransportResponse, url: URL, resumeFrom: Int64, pieceEnd: Int64?, sentAt: ContinuousClock.Instant,
        hops: inout Hops, proxy: Proxy?, sentCredentials: Bool, interruption: TransferInterruption?
    ) async throws -> AfterResponse {
        let status = response.head.status.code
        logger.debug("response", metadata: ["status": "\(status)", "url": "\(url.redactedString)"])
        // Redirects included: a site that sets its session cookie on a redirect expects it on the next hop.
        if let jar = configuration.cookies {
            let values = response.head.headerFields[values: .setCookie]
            if !values.isEmpty { jar.store(setCookie: values, from: url) }
        }

        if HTTPRules.redirectStatuses.contains(status) {
            if hops.visited.isEmpty { hops.visited.insert(url.absoluteString) }
            let target = try followRedirect(
                response.head, from: url, visited: &hops.visited, count: &hops.count)
            if HTTPRules.origin(of: target) != HTTPRules.origin(of: url) {
                for name in HTTPRules.credentialFields { hops.fields[name] = nil }
            }
            logger.info("redirect", metadata: ["from": "\(url.redactedString)", "to": "\(target.redactedString)"])
            emit(.redirected(from: url, to: target, status: status))
            if HTTPRules.isSecure(url) { hops.wasSecure = true }
            hops.url = target
            return .sendAgain
        }
        finalURL = url

        if status == 304, let revalidation, !revalidation.answered {
            keepAfterNotModified(revalidation, head: response.head)
            emit(.revalidated(modified: false))
            skippedResult = try endingForGood { () throws(DownloadError) in
                try existingFileResult(
                    path: revalidation.path, size: revalidation.size, sha256: revalidation.sha256, finalURL: url,
                    notModified: true)
            }
            return .finished
        }
        if status == 416, pieceEnd != nil {
            // A first piece of an empty file (or a server that refuses such ranges): the plain request instead.
            segmentsAbandoned = true
            return .sendAgain
        }
        if status == 416 && resumeFrom > 0 {
            let complete = HTTPRules.unsatisfiedRangeLength(response.head.headerFields.first(.contentRange))
            if complete == resumeFrom, writer == nil, continuation != nil, let destinationPath {
                // The file another tool left is complete already: it stays as it is.
                skippedResult = try endingForGood { () throws(DownloadError) in
                    try existingFileResult(path: destinationPath, size: complete ?? 0, sha256: nil, finalURL: url)
                }
                return .finished
            }
            if complete == resumeFrom {
                totalBytes = complete  // every byte is already here
                return .finished
            }
            try await restartFromZero()
            if try abandonContinuation(because: "the server cannot send the rest of it") { return .finished }
            hops.mayResume = false
            return .sendAgain
        }
        guard (200..<300).contains(status) else {
            let failure = statusFailure(response.head, url: url, proxy: proxy, sentCredentials: sentCredentials)
            // The host asked for time: every download to it waits, not only this one (for as long as the retry
            // policy would wait itself: a server cannot hold a host for days).
            let policy = configuration.retryPolicy
            if status == 429 || status == 503, policy.honoursRetryAfter, let retryAfter = failure.retryAfter {
                pacer.hold(host: Self.hostKey(url), for: min(retryAfter, policy.maxRetryAfter))
            }
            throw failure
        }
        if var revalidation, !revalidation.answered {
            revalidation.answered = true
            self.revalidation = revalidation
            emit(.revalidated(modified: true))
        }
        let bodyLength = Self.contentLength(response.head)
        // How many bytes the body may bring: a 206's range, else its Content-Length.
        var expected = bodyLength

        if status == 206 {
            guard resumeFrom > 0 || pieceEnd != nil,
                let range = HTTPRules.contentRange(response.head.headerFields.first(.contentRange)),
                range.first == resumeFrom
            else {
                if resumeFrom == 0 {
                    throw AttemptFailure.permanent(
                        DownloadError(
                            .httpStatus, message: "server sent 206 Partial Content to a request without Range",
                            url: url, status: status))
                }
                // A range that does not continue our bytes: start over without Range.
                try await restartFromZero()
                if try abandonContinuation(because: "the server sent another range") { return .finished }
                hops.mayResume = false
                return .sendAgain
            }
            if writer == nil, continuation != nil { try startContinuation(at: resumeFrom, url: url) }
            try await checkPartialContent(range, bodyLength: bodyLength, url: url)
            totalBytes = range.complete
            expected = range.last - range.first + 1
        } else {
            // A 200 to a first piece: the server sends no ranges, so no segments either.
            if pieceEnd != nil { segmentsAbandoned = true }
            // A 200 to a Range request means the whole file again: never append it.
            if try abandonContinuation(because: "the server sent the whole file, not the rest") { return .finished }
            if (writer?.size ?? 0) > 0 { try await restartFromZero() }
            totalBytes = bodyLength
        }
        validator = HTTPRules.validator(of: response.head)
        if configuration.usesRemoteModificationTime { lastModified = response.head.headerFields.first(.lastModified) }
        if let max = request.maxSize, let total = totalBytes, total > max {
            throw AttemptFailure.permanent(
                DownloadError(
                    .sizeLimitExceeded, message: "the file is \(total) bytes, over the limit of \(max)", url: url))
        }
        if destinationPath == nil {
            try chooseDestinationName(from: response.head)
            if skippedResult != nil { return .finished }
        }
        // The first piece of a file that may be split comes as one stream; if it comes slowly enough that more
        // connections are worth it, it is handed over to the segments there and then.
        let mayHandOver = status == 206 && pieceEnd != nil && canSegment(resumeFrom: resumeFrom)
        try ensurePartial()
        // Small bodies are not worth a journal write: an interrupted one is fetched again whole, cheaply.
        if let journal = configuration.journal, let validator, let destinationPath,
            (totalBytes ?? .max) > Self.restartableLimit
        {
            await journal.commit(
                JournalRecord(
                    key: partialKey, path: destinationPath,
                    state: .partial(validator: validator, totalBytes: totalBytes), request: request))
            recordedPartial = true
        }
        // Timed from the request: a client slow to read the head would otherwise see a backlog come in a burst.
        let start = sentAt
        let rest = try await receive(
            response.body, length: bodyLength, expected: expected, url: url,
            handOver: mayHandOver ? { self.worthSegments(from: resumeFrom, since: start, received: $0) } : nil)
        // The piece came whole, but quickly enough to judge: the rest in segments if it would take a while.
        let segmentsNow =
            rest == nil && mayHandOver
            && (writer?.size).map {
                $0 < (totalBytes ?? 0)
                    && worthSegments(from: resumeFrom, since: start, received: $0 - resumeFrom, atEnd: true)
            } == true
        if rest != nil || segmentsNow, let writer {
            let written = writer.size
            try await startSegments(resumeFrom: written, firstEnd: resumeFrom + (expected ?? 0), url: url)
            guard let segmented else { return .finished }
            do {
                let first = rest.map { BodyRest(response.body, $0) }
                try await runSegments(segmented, first: first, interruption: interruption)
                try finishSegments()
                return .finished
            } catch let abandoned as SegmentsAbandoned {
                try await abandonSegments(abandoned)
                hops.mayResume = false
                return .sendAgain
            } catch {
                bytesTransferred += segmentBytes.exchange(0, ordering: .relaxed)
                throw error
            }
        }
        if status == 206, pieceEnd != nil, let totalBytes, let writer, writer.size < totalBytes {
            // A first piece of a file that is not fetched in segments (no validator to check the pieces with, or too
            // small to split): the rest as one stream, resumed with If-Range, or from zero without a validator.
            segmentsAbandoned = true
            if validator == nil {
                try await restartFromZero()
                hops.mayResume = false
            }
            return .sendAgain
        }
        try await checkFinalSize(url: url)
        return .finished
    }

    /// Checks a `206` against the request and against itself before any of its bytes are appended: the range
    /// must lie inside the total it states, its body must be as long as the range, and the total must be the one
    /// earlier responses stated. A mismatch starts the download over from zero (transient): appending such a body
    /// would publish a file of the wrong size or bytes.
    private func checkPartialContent(
        _ range: HTTPRules.ContentRange, bodyLength: Int64?, url: URL
    ) async throws {
        let length = range.last - range.first + 1
        var problem: String?
        if let complete = range.complete, range.last >= complete {
            problem = "a range past the total it states"
        } else if let bodyLength, bodyLength != length {
            problem = "a body of \(bodyLength) bytes for a range of \(length)"
        } else if let known = totalBytes, let complete = range.complete, known != complete {
            problem = "a total of \(complete) bytes where an earlier response said \(known)"
        }
        guard let problem else { return }
        try await restartFromZero()
        throw AttemptFailure.transient(
            DownloadError(
                .invalidResponse,
                message:
                    "the server's Content-Range 'bytes \(range.first)-\(range.last)/\(range.complete.map(String.init) ?? "*")' "
                    + "does not fit: \(problem); starting over", url: url, status: 206))
    }

    /// After a body ended normally: the file must be as long as the total the responses stated. Anything else
    /// starts the download over from zero (transient), so a server that lies about lengths never gets a file
    /// published.
    private func checkFinalSize(url: URL) async throws {
        guard let totalBytes, let writer else { return }
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
                bytesTransferred += count
                if meter.record(chunk.count, now: .now) { emitProgress(start + received) }
                if bandwidth != nil || ownBandwidth != nil { try await waitForBandwidth(chunk.count) }
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
        if let length, received < length {
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
                    bytesWritten: bytesWritten, totalBytes: totalBytes, bytesPerSecond: meter.bytesPerSecond)))
    }

    private func makeRequest(url: URL, fields: HTTPFields, resumeFrom: Int64, pieceEnd: Int64?) -> HTTPRequest {
        var head = HTTPRequest(method: .get, url: url)
        let condition = revalidation.flatMap { $0.answered ? nil : $0.validator }
        // Most requests set no fields and resume nothing: the fields made once are theirs, with nothing to copy.
        if fields.isEmpty && resumeFrom == 0 && condition == nil && pieceEnd == nil {
            head.headerFields = baseFields
            return head
        }
        var fields = fields
        // Bodies are stored as sent, so Range offsets are offsets into the file (ARCHITECTURE.md, "Invariants" 7).
        fields[.acceptEncoding] = "identity"
        if fields[.userAgent] == nil { fields[.userAgent] = configuration.userAgent }
        fields[.range] = nil
        fields[.ifRange] = nil
        if let pieceEnd {
            fields[.range] = "bytes=\(resumeFrom)-\(pieceEnd - 1)"
            if resumeFrom > 0, let validator { fields[.ifRange] = validator }
        } else if resumeFrom > 0 {
            fields[.range] = "bytes=\(resumeFrom)-"
            // Without a validator (a file another tool left), nothing can make the server check the prefix.
            if let validator { fields[.ifRange] = validator }
        }
        // A revalidation's condition goes with any range: the server evaluates it first (RFC 9110 13.2.2), so a
        // current file is a 304 whether the rest of a new copy or a first piece was asked for.
        if let condition {
            // A strong ETag is the exact test; a date the next best (RFC 9110 13.1.3).
            if condition.hasPrefix("\"") {
                fields[.ifNoneMatch] = condition
            } else {
                fields[.ifModifiedSince] = condition
            }
        }
        head.headerFields = fields
        return head
    }

    /// Waits for this request's turn under the downloader's pacing and the holds hosts asked for, telling `emit`
    /// why. The wait is the download's own choice, not a stall (nor for `clock`, a connection's own); one that would
    /// end past the time limit ends the download now.
    func waitForTurn(
        url: URL, clock: ActivityClock? = nil, emit: @Sendable (DownloadEvent) -> Void
    ) async throws {
        let host = Self.hostKey(url)
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

    /// Takes `count` bytes from the bandwidth limits and waits as long as they say (ending at the time limit); the
    /// wait is no stall for `clock` either (a connection's own).
    func waitForBandwidth(_ count: Int, clock: ActivityClock? = nil) async throws {
        let now = ContinuousClock.now
        let delay = max(bandwidth?.take(count, now: now) ?? .zero, ownBandwidth?.take(count, now: now) ?? .zero)
        guard delay > .zero else { return }
        var until = now + delay
        if let deadline, until >= deadline { until = deadline }
        lastActivity.waits(until: until)
        clock?.waits(until: until)
        try await Task.sleep(until: until, clock: .continuous)
        if let deadline, ContinuousClock.now >= deadline {
            throw AttemptFailure.permanent(timedOutError(after: "the transfer was still running"))
        }
    }

    /// The key requests are paced by: the host name, whatever the scheme and port.
    static func hostKey(_ url: URL) -> String {
        url.host(percentEncoded: false)?.lowercased() ?? ""
    }

    /// Gives up continuing the file another tool left (the server will not send its rest): the conflict policy
    /// decides what happens to it now. Returns `true` when that leaves the download done (skipped).
    private func abandonContinuation(because reason: String) throws -> Bool {
        guard continuation != nil, let destinationPath else { return false }
        continuation = nil
        do {
            skippedResult = try checkDestination(destinationPath)
        } catch {
            guard error.code == .destinationExists else { throw AttemptFailure.permanent(error) }
            throw AttemptFailure.permanent(
                DownloadError(
                    .destinationExists,
                    message:
                        "cannot continue '\(destinationPath)': \(reason); left untouched (choose skip, overwrite or "
                        + "rename)", url: error.url, path: error.path))
        }
        return skippedResult != nil
    }

    /// Starts the partial of a continued file with a copy of the `size` bytes at the destination, which the server's
    /// rest is appended to; the whole replaces the file when it is published.
    private func startContinuation(at size: Int64, url: URL) throws {
        guard let destinationPath else { return }
        writer = try endingForGood { () throws(DownloadError) in
            let file = try PartialFile(
                creatingAt: PartialFile.partialPath(forDestination: destinationPath), url: request.url)
            try file.append(copyOf: destinationPath, count: size, url: request.url)
            return try BackgroundWriter(
                resuming: file, algorithm: request.expectedDigest?.algorithm,
                computesSHA256: configuration.computesSHA256, url: request.url)
        }
        continuation = nil
        replacesDestination = true
        logger.debug("continuing a file another tool left", metadata: ["bytes": "\(size)"])
    }

    private func followRedirect(
        _ head: HTTPResponse, from url: URL, visited: inout Set<String>, count: inout Int
    ) throws -> URL {
        let target: URL
        switch HTTPRules.redirectTarget(location: head.headerFields[.location], from: url) {
        case .success(let resolved): target = resolved
        case .failure(let error): throw AttemptFailure.permanent(error)
        }
        guard count < configuration.maxRedirects else {
            throw AttemptFailure.permanent(
                DownloadError(
                    .tooManyRedirects, message: "more than \(configuration.maxRedirects) redirects", url: target))
        }
        guard visited.insert(target.absoluteString).inserted else {
            throw AttemptFailure.permanent(
                DownloadError(
                    .redirectLoop, message: "redirect loop: '\(target.redactedString)' was already visited", url: url))
        }
        count += 1
        return target
    }

    func statusFailure(
        _ head: HTTPResponse, url: URL, proxy: Proxy?, sentCredentials: Bool
    ) -> AttemptFailure {
        let status = head.status.code
        let answered = "\(status) \(head.status.reasonPhrase)"
        // In absolute form to an HTTP proxy with credentials: a proxy that refuses them with a 401 (tinyproxy) cannot
        // be told from the server.
        let forwardingProxy = proxy.flatMap { proxy in
            proxy.credentials != nil && proxy.takesRequestsInAbsoluteForm(secure: HTTPRules.isSecure(url))
                ? proxy : nil
        }
        let message =
            switch (status, forwardingProxy) {
            case (401, let proxy?):
                "the server or the proxy \(proxy) answered \(answered): "
                    + (sentCredentials ? "the credentials sent were refused" : "none were sent to the server")
                    + ", or the proxy refused the user and password given for it"
            case (401, nil) where sentCredentials:
                "server answered \(answered): the credentials sent were refused"
            case (401, nil):
                "server answered \(answered): it needs credentials (a user and password in the URL, the request's "
                    + "credentials or a credential provider such as a netrc file); none were sent"
            case (407, _):
                proxy?.authenticationFailure(answered: answered) ?? "server answered \(answered)"
            default:
                "server answered \(answered)"
            }
        let error = DownloadError(.httpStatus, message: message, url: url, status: status)
        guard configuration.retryPolicy.retryableStatuses.contains(status) else { return .permanent(error) }
        return .transient(error, retryAfter: HTTPRules.retryAfter(head.headerFields[.retryAfter]))
    }

    /// The options for a request to `url`: the downloader's, with the proxy its configuration picks for `url` and
    /// the receive window of the request's own bandwidth limit.
    func options(for url: URL) -> TransportOptions {
        guard configuration.proxy != .none || request.maxBytesPerSecond != nil else { return transportOptions }
        var options = transportOptions
        if configuration.proxy != .none { options.proxy = configuration.proxy.proxy(for: url) }
        if let own = request.maxBytesPerSecond {
            options.receiveWindow = min(options.receiveWindow ?? .max, Downloader.receiveWindow(forRate: own))
        }
        return options
    }

    /// The request's own header fields for a request to `source`: without its credential fields (`Authorization`,
    /// `Cookie`, `Proxy-Authorization`) for a mirror at another origin than the request's URL.
    func fields(for source: URL) -> HTTPFields {
        var fields = request.headerFields
        if HTTPRules.origin(of: source) != HTTPRules.origin(of: request.url) {
            for name in HTTPRules.credentialFields { fields[name] = nil }
        }
        return fields
    }

    /// `fields` with the credentials and cookies for a request to `url` added: `Authorization: Basic` with the
    /// request's own credentials on the origin of its URL (on no other), else those of the credential provider (not
    /// over plain `http` when an earlier hop was `https`, `afterHTTPS`); the cookie jar's cookies for `url` after any
    /// `Cookie` of the request's own. Fields the caller set win.
    func withCredentialsAndCookies(_ fields: HTTPFields, for url: URL, afterHTTPS: Bool = false) -> HTTPFields {
        if request.credentials == nil && configuration.credentials == nil && configuration.cookies == nil {
            return fields
        }
        var fields = fields
        if fields[.authorization] == nil {
            let credentials: Credentials? =
                if let own = request.credentials, HTTPRules.origin(of: url) == HTTPRules.origin(of: request.url) {
                    own
                } else if afterHTTPS && !HTTPRules.isSecure(url) {
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
            try await writer?.restart(url: finalURL)
        } catch {
            throw AttemptFailure.permanent(error)
        }
        validator = nil
        recordedPartial = false
    }

    private func chooseDestinationName(from head: HTTPResponse) throws {
        guard case .directory(let directory, _) = request.destination else { return }
        let suggested = head.headerFields[.contentDisposition].flatMap(FileNaming.name(fromContentDisposition:))
        guard let name = suggested ?? FileNaming.name(for: request.url) else {
            throw AttemptFailure.permanent(
                DownloadError(
                    .unsafeName, message: "no safe file name in the URL or Content-Disposition; give one explicitly",
                    url: request.url))
        }
        let path = (directory.path as NSString).appendingPathComponent(name)
        skippedResult = try endingForGood { () throws(DownloadError) in try checkDestination(path) }
        destinationPath = path
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
        guard writer == nil, let destinationPath else { return }
        // A small body that nobody would resume (see the journal write above) and that must not replace a file
        // goes to an unnamed file where the system has them: one directory change to publish, not three.
        let small =
            (totalBytes ?? .max) <= Self.restartableLimit && request.conflictPolicy != .overwrite
            && !replacesDestination
        let file: PartialFile
        if small, let unnamed = PartialFile(unnamedFor: destinationPath) {
            file = unnamed
        } else {
            file = try endingForGood { () throws(DownloadError) in
                try PartialFile(creatingAt: PartialFile.partialPath(forDestination: destinationPath), url: request.url)
            }
        }
        writer = BackgroundWriter(
            file: file, algorithm: request.expectedDigest?.algorithm, computesSHA256: configuration.computesSHA256)
    }

    /// The first `Content-Length` (HTTP parsers reject differing repeats).
    static func contentLength(_ head: HTTPResponse) -> Int64? {
        head.headerFields.first(.contentLength).flatMap { Int64($0) }
    }
}

extension DownloadRun {
    /// After the last segment: the whole file is the partial a one-stream download would have, and is verified and
    /// published as one (its digest read from the file, in order).
    func finishSegments() throws {
        guard let segmented else { return }
        bytesTransferred += segmentBytes.exchange(0, ordering: .relaxed)
        servedBy = segmented.state.withLock { $0.sources.max { $0.bytes < $1.bytes }?.given }
        if configuration.usesRemoteModificationTime, lastModified == nil {
            lastModified = segmented.state.withLock { $0.lastModified }
        }
        writer = try endingForGood { () throws(DownloadError) in
            try BackgroundWriter(
                resuming: segmented.file, algorithm: request.expectedDigest?.algorithm,
                computesSHA256: configuration.computesSHA256, url: request.url)
        }
        self.segmented = nil
    }

    /// Gives segments up for one stream from zero: the partial is emptied, so no byte of another version stays.
    func abandonSegments(_ abandoned: SegmentsAbandoned) async throws {
        guard let segmented else { return }
        bytesTransferred += segmentBytes.exchange(0, ordering: .relaxed)
        logger.info("segments given up; one stream from zero", metadata: ["reason": "\(abandoned.reason)"])
        try endingForGood { () throws(DownloadError) in try segmented.file.truncate(url: request.url) }
        writer = BackgroundWriter(
            file: segmented.file, algorithm: request.expectedDigest?.algorithm,
            computesSHA256: configuration.computesSHA256)
        self.segmented = nil
        segmentsAbandoned = true
        validator = nil
        recordedPartial = false
        configuration.journal?.remove(partialKey)
    }
}
