import Foundation
import HTTPTypes
import HaulOperations
import Logging
import Synchronization

/// One download from request to published file: the attempt loop with retries and backoff, destination
/// rules, verification and publishing. One instance per call to ``Downloader/download(_:onEvent:)``.
final class DownloadRun: @unchecked Sendable {
    // unchecked Sendable: the mutable state is used by one task at a time — the run's own task, or the
    // transfer child of the current attempt while the run's task awaits that child.

    /// Bodies known to be at most this large are fetched again whole when interrupted: no partial is kept or
    /// journaled for them, and on Linux they are written to an unnamed file (one directory change to publish, not
    /// three). Above it a kill loses only what was in flight. Below it a kill wastes at most this much per download
    /// in flight, which keeps the loss small while the batches of small files that the fast path is for (4-16 KiB)
    /// keep it.
    static let restartableLimit: Int64 = 64 << 10

    let request: DownloadRequest
    let configuration: Downloader.Configuration
    let transport: any HTTPTransport
    let interruptibleTransport: (any InterruptibleHTTPTransport)?
    let baseFields: HTTPFields
    let transportOptions: TransportOptions
    let stallWatch: StallWatch
    let emit: @Sendable (DownloadEvent) -> Void
    let logger: Logger
    /// The request's time limit, else the downloader's.
    let timeLimit: Duration?
    /// When the download's time limit runs out, if it has one: set when the run is made, once for all attempts.
    let deadline: ContinuousClock.Instant?
    /// The request's minimum speed, else the downloader's.
    let minimumSpeed: MinimumSpeed?
    /// The request's own bandwidth limit, for a download without an owner (under a queue it is the ``control``'s).
    let requestBandwidth: TokenBucket?
    /// What the download's owner may change or ask while it runs (``DownloadQueue``); `nil` for a lone download.
    let control: DownloadControl?
    /// The limit all the downloader's downloads share, which may change while this one runs.
    let sharedLimit: BandwidthLimit
    let pacer: RequestPacer
    /// Grants the extra connections of a segmented download; `nil`: they open at once.
    let connections: (any ConnectionBroker)?
    /// Under a queue, the origin the download's own slot counts against (``moveSlot(to:watched:)``), once it
    /// went on to another source or a redirect's target; `nil` while it counts against its request's.
    let slotOrigin = Locked<HTTPRules.Origin?>(nil)
    /// Body bytes the connections of a segmented transfer received, added to the tally when it ends.
    let segmentBytes = Atomic<Int64>(0)
    let lastActivity = ActivityClock()
    /// The destination path, known to have been absent shortly before this run (not looked up again).
    let absentPath: String?

    // The run's state: what it holds of the file, what the responses said of it, where it goes, and what the result
    // reports; and the sources it is fetched from.

    /// What the run holds of the file.
    var phase = Phase.planning
    /// What the responses said of the file, and what the journal knows of the bytes held.
    var facts = FileFacts()
    /// Where the file goes, and what may be replaced there.
    var target = Target()
    /// What the result reports.
    var tally: Tally
    /// The request's URL and its mirrors: which one the next request goes to, and how each has failed.
    var sources: SourceList
    /// The request's key in the journal, made once (most downloads have no journal, or never ask).
    lazy var journalKey = JournalKey(request)

    /// What a run holds of the file: one of these at a time, so that a partial written in order and one written in
    /// segments can never both be there.
    enum Phase {
        /// Nothing held: the next response decides where its body goes.
        case planning
        /// The file another tool left at the destination, of `size` bytes, to be continued with `Range`
        /// (``DownloadRequest/continuesExistingFile``) until the server answers.
        case continuing(size: Int64)
        /// A partial written in order.
        case streaming(BackgroundWriter)
        /// A partial written in place over several connections.
        case segmented(SegmentedTransfer)
    }

    /// What the responses said of the file, and what the journal knows of the bytes held.
    struct FileFacts {
        /// Validator of the bytes held (strong ETag or Last-Modified), needed to resume them.
        var validator: String?
        /// The full size of the file, once a response said it.
        var total: Int64?
        /// The `Last-Modified` of the response whose body is held, kept when the file is to get the server's time.
        var lastModified: String?
        /// Whether the journal holds a partial record for the bytes held (so a later run can resume them).
        var recorded = false
        /// Set when segments were given up (the file changed, or the server sends no ranges after all), or never
        /// start: one stream from then on.
        var oneStream = false
    }

    /// Where the file goes, and what may be replaced there.
    struct Target {
        /// The destination path once known (for `.directory(useContentDisposition: true)`, after the first head).
        var path: String?
        var replaces = Replacement.nothing
        /// Whether publishing replaces the file at the destination whatever the conflict policy: the file is the one
        /// being revalidated or continued.
        var replacesFile: Bool { if case .nothing = replaces { false } else { true } }
        /// Whether this run may replace a file an earlier run completed and the journal records as Haul's: the
        /// completed record stays as it is until the new copy is published, and the new copy's partial is recorded
        /// beside it (``partialKey``), so a failure leaves the file Haul's and the new copy resumable.
        var replacesCompleted: Bool { if case .completedFile = replaces { true } else { false } }
        /// The revalidation of the completed file, if one is asked for.
        var revalidation: Revalidation? {
            if case .completedFile(let revalidation, _) = replaces { revalidation } else { nil }
        }
        /// The stamp the journal recorded for Haul's completed file when it is to be replaced.
        var completedStamp: FileStamp? {
            if case .completedFile(_, let stamp) = replaces { stamp } else { nil }
        }
    }

    /// What may be replaced at the destination, whatever the conflict policy.
    enum Replacement {
        /// Nothing: the conflict policy decides about a file there.
        case nothing
        /// The file another tool left, continued by this download (or fetched again when it cannot be).
        case foreignFile
        /// Haul's own completed file, with the revalidation that asks whether it is current (none: it is fetched
        /// again), and the stamp the journal recorded for it: a file that no longer has it when the new copy is
        /// published was changed meanwhile (by the user), and is not replaced unasked.
        case completedFile(Revalidation?, stamp: FileStamp)
    }

    /// What a revalidation needs of the completed file.
    struct Revalidation {
        var path: String
        var validator: String
        var size: Int64
        var sha256: String?
        var stamp: FileStamp
        /// Whether the server has answered with a new copy (later attempts resume it, unconditionally).
        var answered = false
    }

    /// What the result reports.
    struct Tally {
        var attempts = 0
        var bytesTransferred: Int64 = 0
        var finalURL: URL
        /// The source most of a segmented file's bytes came from, once its segments are in.
        var servedBy: URL?
        var meter: ProgressMeter
    }

    /// The partial written in order, if that is what the run holds.
    var writer: BackgroundWriter? { if case .streaming(let writer) = phase { writer } else { nil } }
    /// The file being fetched in segments over several connections, if it is.
    var segmented: SegmentedTransfer? { if case .segmented(let transfer) = phase { transfer } else { nil } }
    /// The size of the file another tool left, while it is to be continued.
    var continuation: Int64? { if case .continuing(let size) = phase { size } else { nil } }
    /// The key the partial of this run's file is recorded under.
    var partialKey: JournalKey { target.replacesCompleted ? journalKey.newCopy : journalKey }

    init(
        request: DownloadRequest, downloader: Downloader, absentPath: String? = nil,
        connections: (any ConnectionBroker)? = nil, control: DownloadControl? = nil,
        emit: @escaping @Sendable (DownloadEvent) -> Void
    ) {
        self.request = request
        self.connections = connections
        self.control = control
        self.absentPath = absentPath
        var configuration = downloader.configuration
        var transportOptions = downloader.transportOptions
        request.overriding(&configuration, &transportOptions)
        self.configuration = configuration
        self.transportOptions = transportOptions
        transport = downloader.transport
        interruptibleTransport = downloader.interruptibleTransport
        baseFields = downloader.baseFields
        stallWatch = downloader.stallWatch
        sharedLimit = downloader.bandwidth
        pacer = downloader.pacer
        requestBandwidth = control == nil ? request.maxBytesPerSecond.map { TokenBucket(bytesPerSecond: $0) } : nil
        timeLimit = request.timeLimit ?? downloader.configuration.timeLimit
        deadline = timeLimit.map { .now + $0 }
        minimumSpeed = request.minimumSpeed ?? downloader.configuration.minimumSpeed
        self.emit = emit
        var logger = downloader.configuration.logger
        logger[metadataKey: "url"] = .stringConvertible(request.url)  // rendered only if something is logged
        self.logger = logger
        tally = Tally(finalURL: request.url, meter: ProgressMeter(interval: downloader.configuration.progressInterval))
        sources = SourceList(request)
    }

    func execute() async throws(DownloadError) -> DownloadResult {
        try validateRequest()
        target.path = absentPath ?? request.plannedPath
        if target.path == nil, case .directory(_, false) = request.destination {
            throw DownloadError(
                .unsafeName, message: "no safe file name in the URL; give one explicitly", url: request.url)
        }
        if let journal = configuration.journal, let done = try resume(from: journal) { return done }
        if absentPath == nil, target.revalidation == nil, let destinationPath = target.path {
            if request.continuesExistingFile, case .regularFile(let size) = PathKind(at: destinationPath) {
                // A partial from the journal is this continuation's own, begun in an earlier run; an empty file has
                // nothing to continue.
                if writer == nil && size > 0 { phase = .continuing(size: size) } else { target.replaces = .foreignFile }
            } else if let skipped = try checkDestination(destinationPath) {
                return skipped
            }
        }

        var skipped: DownloadResult?
        while true {
            // A download paused or cancelled before it began (between its admission and its run) never says it
            // started: nothing would say it stopped.
            if Task.isCancelled { throw cancelledError() }
            tally.attempts += 1
            emit(.started(attempt: tally.attempts, resumingAt: segmented?.written ?? writer?.size ?? 0))
            do {
                skipped = try await attemptWithWatchdog()
                break
            } catch {
                try await prepareRetry(after: error)
            }
        }
        // Skipped, or unchanged: nothing was written to publish.
        if let skipped { return skipped }
        return try await verifyAndPublish()
    }

    /// Decides what follows a failed attempt: the same source again after a backoff, the next source at once, or the
    /// end of the download (the error is thrown).
    private func prepareRetry(after failure: AttemptFailure) async throws(DownloadError) {
        if Task.isCancelled { throw cancelledError() }
        var next = sources.next(after: failure, maxRetries: configuration.retryPolicy.maxRetries)
        // A file fetched in segments spreads its connections over the sources itself, dropping those that fail; the
        // run only tries the whole again.
        if segmented != nil, case .next = next { next = .giveUp(failure.error) }
        switch next {
        case .giveUp(var error):
            error.isTransient = failure.isTransient
            error.retryAfter = failure.retryAfter
            throw error
        case .next(let dropped, let reason, let url):
            logger.info(
                "source dropped",
                metadata: ["url": "\(dropped.redactedString)", "reason": "\(reason)", "next": "\(url.redactedString)"])
            emit(.sourceDropped(url: dropped, reason: reason, next: url))
            // Under a queue the download counts against the origin it fetches from.
            if !(await moveSlot(to: url)) { throw cancelledError() }
        case .retry(let failures):
            let delay = configuration.retryPolicy.delay(
                beforeRetry: failures, retryAfter: failure.retryAfter, random: configuration.random)
            if let deadline, .now + delay >= deadline {
                throw timedOutError(after: "the next attempt would start after it (\(failure.error.message))")
            }
            logger.info(
                "retrying",
                metadata: [
                    "attempt": "\(tally.attempts + 1)", "delay": "\(delay)", "reason": "\(failure.error.message)",
                ])
            emit(.retrying(attempt: tally.attempts + 1, after: delay, error: failure.error))
            do {
                try await configuration.backoffClock.sleep(for: delay)
            } catch {
                throw cancelledError()
            }
        }
        if Task.isCancelled { throw cancelledError() }
    }

    /// Under a queue, moves the download's own slot to the origin of `url` unless it counts there already
    /// (``ConnectionBroker/move(to:)``); a wait for a free slot there is no stall for `watched` (the clock of the
    /// request that waits). Returns `false` when the task was cancelled first.
    func moveSlot(to url: URL, watched: ActivityClock? = nil) async -> Bool {
        guard let connections else { return true }
        let current = slotOrigin.withLock { $0 }
        // Most requests go where the download was added for: that costs no parsing.
        if current == nil, url == request.url { return true }
        let origin = HTTPRules.origin(of: url)
        if origin == (current ?? HTTPRules.origin(of: request.url)) { return true }
        watched?.setStallsWatchedElsewhere(true)
        defer { watched?.setStallsWatchedElsewhere(false) }
        guard await connections.move(to: url) else { return false }
        slotOrigin.withLock { $0 = origin }
        return true
    }

    private func validateRequest() throws(DownloadError) {
        guard let scheme = request.url.scheme?.utf8,
            scheme.equalsIgnoringCase("http") || scheme.equalsIgnoringCase("https"),
            request.url.host(percentEncoded: true)?.isEmpty == false
        else {
            throw DownloadError(
                .invalidRequest,
                message: "unsupported URL: only http:// and https:// URLs with a host can be downloaded",
                url: request.url)
        }
        // A limit of none is `nil`: 0 or below would otherwise run at 1 byte a second, without a word.
        if let limit = request.maxBytesPerSecond, limit < 1 {
            throw DownloadError(
                .invalidRequest,
                message: "maxBytesPerSecond must be at least 1 byte per second (nil for none), not \(limit)",
                url: request.url)
        }
        if let limit = sharedLimit.refusedRate {
            throw DownloadError(
                .invalidRequest,
                message:
                    "the downloader's maxBytesPerSecond must be at least 1 byte per second (nil for none), not \(limit)",
                url: request.url)
        }
    }

    /// Refuses `path` when a directory between ``Downloader/Configuration/containingDirectory`` and it is a symbolic
    /// link or not a directory now (walked without following links, nothing remembered from an earlier walk).
    func checkContainment(_ path: String) throws(DownloadError) {
        // A file right in the directory (the usual case) has no directory of its own to walk.
        guard let prefix = configuration.containingPrefix, path.hasPrefix(prefix),
            path.utf8.dropFirst(prefix.utf8.count).contains(UInt8(ascii: "/"))
        else { return }
        let base = String(prefix.dropLast())
        let directories = path.dropFirst(prefix.count).split(separator: "/").dropLast()
        if directories.contains(where: { $0 == ".." || $0 == "." }) {
            throw DownloadError(
                .unsafePath, message: "refusing '\(path)': its path is not plainly under '\(base)'", url: request.url,
                path: path)
        }
        guard let problem = ContainedDirectories(base: base).walk(directories, making: false) else { return }
        throw DownloadError(
            .unsafePath,
            message: "refusing to write through '\(problem.path)': "
                + (problem.finding == .symbolicLink ? "a symbolic link" : "not a directory") + " under '\(base)'",
            url: request.url, path: path)
    }

    /// Applies the conflict policy before any byte is fetched. Returns a result when the policy is `skip` and
    /// the file exists.
    func checkDestination(_ path: String) throws(DownloadError) -> DownloadResult? {
        try checkContainment(path)
        switch PathKind(at: path) {
        case .missing:
            return nil
        case .other:
            throw PartialFile.unsafePathError(path, request.url)
        case .regularFile(let size):
            switch request.conflictPolicy {
            case .fail:
                throw DownloadError(
                    .destinationExists,
                    message: "'\(path)' already exists; left untouched (choose skip, overwrite or rename)",
                    url: request.url, path: path)
            case .skip:
                var result = try existingFileResult(path: path, size: size, sha256: nil, finalURL: request.url)
                result.keptExisting = true
                return result
            case .overwrite, .rename:
                return nil
            }
        }
    }

    /// The result for a file left as it is at `path` (skipped): its SHA-256 is `sha256`, or is read from the file
    /// when the downloader reports one.
    func existingFileResult(
        path: String, size: Int64, sha256: String?, finalURL: URL, notModified: Bool = false
    ) throws(DownloadError) -> DownloadResult {
        let digest = try checkExisting(path: path, knownSHA256: sha256)
        var result = DownloadResult(
            path: path, size: size, sha256: digest, finalURL: finalURL, attempts: tally.attempts, bytesTransferred: 0,
            skipped: true)
        result.source = sources.url
        result.notModified = notModified
        return result
    }

    /// The SHA-256 of a file left as it is (a skip), when the downloader reports one (`knownSHA256`, the digest the
    /// journal recorded, else read from the file); and a check of the digest the request asks for, which a file left
    /// as it is must have as much as a fetched one: from the recorded SHA-256 when that is the algorithm, else read.
    /// - Throws: ``DownloadError/Code/checksumMismatch`` naming the file when it does not have the digest asked for.
    func checkExisting(path: String, knownSHA256: String?) throws(DownloadError) -> String? {
        let expected = request.expectedDigest
        var sha256 = knownSHA256
        var requested: [UInt8]?
        if let expected, expected.algorithm == .sha256, let sha256 {
            requested = try? Digest(algorithm: .sha256, hex: sha256).bytes
        }
        if (configuration.computesSHA256 && sha256 == nil) || (expected != nil && requested == nil) {
            var digest = RunningDigest(sha256: configuration.computesSHA256, also: expected?.algorithm)
            do {
                try digest.update(fileAt: path)
            } catch {
                throw DownloadError(
                    .fileSystem, message: "cannot read '\(path)': \(error)", url: request.url, path: path,
                    underlying: error)
            }
            let (fileSHA256, fileRequested) = digest.finalize(for: expected?.algorithm)
            if sha256 == nil { sha256 = fileSHA256?.hexString }
            requested = fileRequested
        }
        if let expected, requested != expected.bytes {
            throw DownloadError(
                .checksumMismatch,
                message: "'\(path)' is there already, but its \(expected.algorithm.rawValue) is "
                    + "\((requested ?? []).hexString), expected \(expected.hex); left untouched (the overwrite policy "
                    + "fetches it again)",
                url: request.url, path: path)
        }
        return sha256
    }

    func timedOutError(after detail: String) -> DownloadError {
        DownloadError(
            .timedOut, message: "gave up at the time limit of \(timeLimit ?? .zero): \(detail)", url: request.url,
            bytesReceived: writer?.size)
    }

    private func verifyAndPublish() async throws(DownloadError) -> DownloadResult {
        guard let writer, let destinationPath = target.path else {
            throw DownloadError(.fileSystem, message: "internal error: no file was written", url: request.url)
        }
        try await writer.drain()
        let partial = writer.file
        let size = writer.size
        if let expected = request.expectedSize, expected != size {
            throw DownloadError(
                .sizeMismatch, message: "got \(size) bytes, expected \(expected)", url: tally.finalURL,
                bytesReceived: size)
        }
        let (digest, requested) = writer.finalizeDigest()
        let sha256 = digest?.hexString
        if let expected = request.expectedDigest, requested != expected.bytes {
            throw DownloadError(
                .checksumMismatch,
                message: "\(expected.algorithm.rawValue) is \((requested ?? []).hexString), expected \(expected.hex)",
                url: tally.finalURL, bytesReceived: size)
        }
        if let lastModified = facts.lastModified, let seconds = HTTPRules.secondsSince1970(httpDate: lastModified) {
            partial.setModificationTime(secondsSince1970: seconds)
        }
        await configuration.hooks.beforePublish?()
        if Task.isCancelled { throw cancelledError() }
        let published: String
        do {
            published = try await recordAndPublish(partial, at: destinationPath, size: size, sha256: sha256)
        } catch  where error.code == .destinationExists && request.conflictPolicy == .skip {
            // A file appeared at the destination after it was found absent: skipped, as if it had been there then.
            guard let skipped = try checkDestination(destinationPath) else { throw error }
            partial.remove()
            phase = .planning
            return skipped
        }
        logger.debug("published", metadata: ["path": "\(published)", "size": "\(size)"])
        var result = DownloadResult(
            path: published, size: size, sha256: sha256, finalURL: tally.finalURL, attempts: tally.attempts,
            bytesTransferred: tally.bytesTransferred)
        result.source = tally.servedBy ?? sources.url
        return result
    }

    /// Publishes `partial`, recording it in the journal first: rename and link keep the inode and modification
    /// time, so the sealed partial's stamp is the published file's, and the record can be written before publishing
    /// (a crash between the two leaves a record whose file is absent or another one, which counts as not done). Only
    /// the rename policy, whose final name may turn out another, then records the name it published under.
    private func recordAndPublish(
        _ partial: PartialFile, at path: String, size: Int64, sha256: String?
    ) async throws(DownloadError) -> String {
        guard let journal = configuration.journal else { return try publish(partial, to: path) }
        let key = journalKey
        try partial.seal(durable: configuration.durability == .powerLoss, url: tally.finalURL)
        let stamp = partial.stamp()
        // What the record said before: another process that won the race to publish this file recorded it there.
        let before = journal.record(for: key)
        if let stamp {
            await journal.commit(
                JournalRecord(
                    key: key, path: path,
                    state: .completed(size: size, sha256: sha256, stamp: stamp, validator: facts.validator)))
        }
        let published: String
        do {
            published = try publish(partial, to: path)
        } catch  where error.code == .destinationExists {
            // Someone else's file is there now. The record written for this one must not stay, nor erase another's.
            // When the winner holds the very bytes fetched here (another run of this download, whose own record this
            // one's may have replaced), the record becomes the winner's file's; otherwise it is undone while it is
            // still this one's (a journal that does not answer its own writes answers nothing: undone too).
            if let stamp {
                if partial.holdsSameBytes(asFileAt: path), let theirs = FileStamp(ofFileAt: path) {
                    await journal.commit(
                        JournalRecord(
                            key: key, path: path,
                            state: .completed(size: size, sha256: sha256, stamp: theirs, validator: facts.validator)))
                } else if Self.isOwn(journal.record(for: key), stamp: stamp) {
                    if let before { await journal.commit(before) } else { journal.remove(key) }
                }
            }
            throw error
        }
        // The new copy is the file now: its partial's record goes.
        if target.replacesCompleted { journal.remove(partialKey) }
        if published != path || stamp == nil, let stamp = FileStamp(ofFileAt: published) {
            await journal.commit(
                JournalRecord(
                    key: key, path: published,
                    state: .completed(size: size, sha256: sha256, stamp: stamp, validator: facts.validator)))
        }
        return published
    }

    /// Whether `record` is still the completed record of the file sealed with `stamp` (or, from a journal that does
    /// not answer its own writes, nothing).
    private static func isOwn(_ record: JournalRecord?, stamp: FileStamp) -> Bool {
        guard let record else { return true }
        if case .completed(_, _, stamp, _) = record.state { return true }
        return false
    }

    private func publish(_ partial: PartialFile, to path: String) throws(DownloadError) -> String {
        let durable = configuration.durability == .powerLoss
        try partial.seal(durable: durable, url: tally.finalURL)
        try checkContainment(path)
        var policy = target.replacesFile ? .overwrite : request.conflictPolicy
        // Haul's own file is replaced only while it is the one the journal recorded: changed since (an edit saved
        // while its new copy came), it is the user's, and the conflict policy decides as for any file Haul did not
        // write.
        if target.replacesCompleted, let stamp = target.completedStamp, FileStamp(ofFileAt: path) != stamp {
            policy = request.conflictPolicy
        }
        switch policy {
        case .overwrite:
            if case .other = PathKind(at: path) {
                throw DownloadError(
                    .unsafePath, message: "refusing to replace a symbolic link or special file at '\(path)'",
                    url: request.url, path: path)
            }
            try partial.move(to: path, replace: true, durable: durable, url: tally.finalURL)
            return path
        case .rename:
            let directory = (path as NSString).deletingLastPathComponent
            let name = (path as NSString).lastPathComponent
            for number in 0..<10_000 {
                let candidate =
                    number == 0
                    ? path : (directory as NSString).appendingPathComponent(FileNaming.numbered(name, number))
                do {
                    try partial.move(to: candidate, replace: false, durable: durable, url: tally.finalURL)
                    return candidate
                } catch  where error.code == .destinationExists {
                    continue
                }
            }
            throw DownloadError(
                .destinationExists, message: "no free name like '\(name) (n)'", url: request.url,
                path: path)
        case .fail, .skip:
            try partial.move(to: path, replace: false, durable: durable, url: tally.finalURL)
            return path
        }
    }

    /// Removes what this run wrote, unless the run should keep its partial for a later resume (cancelled, or failed
    /// with its bytes still good, as the configuration says; either needs the partial recorded in the journal, with
    /// a validator to resume against: small bodies never are), and tells the journal: a failure that kept nothing
    /// is recorded with its request, a cancellation that kept nothing is forgotten (the caller gave up on it).
    func cleanUp(after error: DownloadError) {
        // The partial and the journal record belong to the download that holds the lock; and a destination found
        // taken says nothing about this download that a record should keep (another run may have just recorded the
        // file there as its own, completed: a failure written over that would make the next run refuse it).
        if error.code == .destinationBusy { return }
        if error.code == .destinationExists, writer == nil { return }
        // A file left as it is that lacks the digest asked for: its record, if it has one, still describes it.
        if error.code == .checksumMismatch, writer == nil, segmented == nil { return }
        let cancelled = error.isCancellation
        // A pause is a cancellation that is to be resumed.
        let pausing = cancelled && control?.takePause() == true
        let keeps =
            cancelled
            ? configuration.keepsPartialOnCancel || pausing
            : configuration.keepsPartialOnFailure && error.leavesResumableBytes
        if keeps, facts.recorded, writer != nil || segmented != nil {
            // The journal's partial record (with its request) stays: the next run resumes it; a segmented one with
            // the ranges still missing now.
            if let segmented { storeSegments(segmented) }
            if !cancelled {
                logger.info(
                    "kept the partial for a later run",
                    metadata: ["bytes": "\(segmented?.written ?? writer?.size ?? 0)"])
            }
            return
        }
        writer?.file.remove()
        segmented?.file.remove()
        phase = .planning
        // A file that appeared at the destination while this one was fetched: its record, if any, is its own (the
        // record of a new copy of Haul's completed file, now removed, is this download's).
        if error.code == .destinationExists {
            if target.replacesCompleted { configuration.journal?.remove(partialKey) }
            return
        }
        guard let journal = configuration.journal else { return }
        if target.replacesCompleted {
            // The file at the destination is untouched and still the one the completed record describes: only the
            // new copy's record goes.
            journal.remove(partialKey)
            return
        }
        if cancelled {
            // Paused, the request's record (the queue's, if it keeps one) stays for the download to come back to.
            if !pausing { journal.remove(journalKey) }
        } else {
            journal.store(
                JournalRecord(
                    key: journalKey, path: target.path ?? "", state: .failed(message: error.message),
                    request: request))
        }
    }

    /// Applies what the journal knows: returns a result when an earlier run completed this download and the file
    /// is unchanged; otherwise continues a partial an earlier run left, if its validator is known.
    private func resume(from journal: any Journal) throws(DownloadError) -> DownloadResult? {
        let own = journal.record(for: journalKey)
        // Nothing of its own on disk: what another URL left for the same file may be.
        guard let record = own?.state.isFile == true ? own : target.path.flatMap({ takeOver(at: $0, in: journal) }),
            isInDestinationDirectory(record.path)
        else { return nil }
        // A name chosen from Content-Disposition in the earlier run is the name to look at now.
        if target.path == nil { target.path = record.path }
        // Under the rename policy the earlier run may have published under a numbered name: that file, if it is
        // unchanged, is this download done.
        if record.path != target.path {
            guard request.conflictPolicy == .rename, case .completed = record.state else { return nil }
        }
        switch record.state {
        case .completed(let size, let sha256, let stamp, let validator):
            guard FileStamp(ofFileAt: record.path) == stamp else { break }
            if configuration.revalidatesCompletedFiles {
                // Haul's own file, unchanged: the server's answer decides whether it is replaced; without a validator
                // to ask with, it is fetched again.
                target.path = record.path
                target.replaces = .completedFile(
                    validator.map {
                        Revalidation(path: record.path, validator: $0, size: size, sha256: sha256, stamp: stamp)
                    }, stamp: stamp)
                try resumeNewCopy(from: journal, at: record.path)
                return nil
            }
            // Skipped, with its digest (the one recorded, else the file's, for a downloader that reports one) and the
            // digest asked for checked.
            do {
                return try existingFileResult(path: record.path, size: size, sha256: sha256, finalURL: request.url)
            } catch  where error.code == .checksumMismatch && request.conflictPolicy == .overwrite {
                // The file is Haul's but not the one asked for: fetched again, and replaced once verified.
                target.path = record.path
                target.replaces = .completedFile(nil, stamp: stamp)
                return nil
            }
        case .requested, .failed:
            break  // handled above
        case .partial(let validator, let total?, let missing?):
            // Fetched in segments: the partial has the file's length, and the ranges missing are resumed each.
            guard
                let file = try PartialFile(
                    resumingAt: PartialFile.partialPath(forDestination: record.path), appending: false, url: request.url
                )
            else { return nil }
            guard file.size == total else {
                file.remove()
                return nil
            }
            let transfer = makeTransfer(
                file: file, total: total, missing: missing,
                primary: firstHop(to: sources.url))
            let left = missing.reduce(Int64(0)) { $0 + ($1.upperBound - $1.lowerBound) }
            let count = plannedConnections(total: total, from: total - left)
            transfer.state.withLock { state in
                state.sources[0].validator = validator
                state.primaryVouched = false
                // One range left (a run killed before its first checkpoint): cut up ahead, as a new transfer is. Its
                // first connection asks for the whole of its segment while alone, which would leave others nothing.
                state.table.split(into: count)
            }
            phase = .segmented(transfer)
            facts.validator = validator
            facts.total = total
            facts.recorded = true
            logger.debug("resuming segments from an earlier run", metadata: ["missing": "\(missing.count)"])
        case .partial(let validator, let total, _):
            guard try reopenPartial(of: record.path, validator: validator, total: total) else { return nil }
            logger.debug("resuming a partial from an earlier run", metadata: ["bytes": "\(writer?.size ?? 0)"])
        }
        return nil
    }

    /// Whether `path`, which the journal names as this download's file, is a file of the directory the download
    /// writes into: the journal's word is not enough to resume, skip or replace a file elsewhere (a damaged or foreign
    /// journal may name any path).
    private func isInDestinationDirectory(_ path: String) -> Bool {
        // A directory's path as the engine joins a name to it (with or without its trailing `/`).
        let directory =
            switch request.destination {
            case .file(let file): FileNaming.split(path: file.path).directory
            case .directory(let url, _): FileNaming.split(path: FileNaming.path("-", in: url.path)).directory
            }
        let (recordDirectory, name) = FileNaming.split(path: path)
        return recordDirectory == directory && !name.isEmpty && name != "." && name != ".."
    }

    /// Reopens the partial written in order beside `path` that an earlier run left, to go on from its size with
    /// `validator` (`If-Range`); `false` when there is none, or it is empty.
    private func reopenPartial(of path: String, validator: String, total: Int64?) throws(DownloadError) -> Bool {
        guard let file = try PartialFile(resumingAt: PartialFile.partialPath(forDestination: path), url: request.url),
            file.size > 0
        else { return false }
        phase = .streaming(
            try BackgroundWriter(
                resuming: file, algorithm: request.expectedDigest?.algorithm,
                computesSHA256: configuration.computesSHA256, url: request.url))
        facts.validator = validator
        facts.total = total
        facts.recorded = true
        return true
    }

    /// Reopens the partial of a new copy an earlier revalidation of the file at `path` left (it failed, or was
    /// stopped), to be resumed with `Range` and `If-Range` after the revalidation's condition: the server answers
    /// `304` if the file is still current, the rest if the new copy is, the whole if there is yet another. A new copy
    /// that was being fetched in segments is fetched again.
    private func resumeNewCopy(from journal: any Journal, at path: String) throws(DownloadError) {
        guard case .partial(let validator, let total, nil)? = journal.record(for: partialKey)?.state,
            try reopenPartial(of: path, validator: validator, total: total)
        else { return }
        logger.debug("resuming the new copy an earlier revalidation left", metadata: ["bytes": "\(writer?.size ?? 0)"])
    }

    /// A `304` to a revalidation: the file stays, its record takes the validator the `304` carries if it is another
    /// (RFC 9111 4.3.4), and the partial of a new copy an earlier revalidation left goes (the server says the file is
    /// current).
    func keepAfterNotModified(_ revalidation: Revalidation, head: HTTPResponse) {
        writer?.file.remove()
        phase = .planning
        guard let journal = configuration.journal else { return }
        if facts.recorded { journal.remove(partialKey) }
        if let fresh = HTTPRules.validator(of: head), fresh != revalidation.validator {
            journal.store(
                JournalRecord(
                    key: journalKey, path: revalidation.path,
                    state: .completed(
                        size: revalidation.size, sha256: revalidation.sha256, stamp: revalidation.stamp,
                        validator: fresh)))
        }
    }

    /// The record of the file at `path` that a download of another URL left, which this download takes over (the
    /// record moves to its key, so a file has one record): a partial, whatever its URL, since the validator it is
    /// resumed with (`If-Range`) makes a server that has another file send it whole; a completed file that is still as
    /// it was published, when this request's URL differs from that download's only in its query (a signed or expiring
    /// URL's new token) and the file may be kept: under ``ConflictPolicy/overwrite`` the query may as well select
    /// another file (`report?month=2`), and the user asked for the one at this URL. A completed file of another
    /// resource is not this download's: the conflict policy decides.
    private func takeOver(at path: String, in journal: any Journal) -> JournalRecord? {
        let records = journal.records(forFileAt: path).filter { $0.key != journalKey }
        guard !records.isEmpty else { return nil }
        let stamp = FileStamp(ofFileAt: path)
        let completed = records.first { record in
            if case .completed(_, _, let recorded, _) = record.state { recorded == stamp } else { false }
        }
        let taken: JournalRecord
        if let completed {
            guard request.conflictPolicy != .overwrite, let url = URL(string: completed.key.url),
                Self.sameResource(url, request.url)
            else { return nil }
            taken = JournalRecord(key: journalKey, path: path, state: completed.state)
            // The partial of a new copy of that file goes with it.
            if let newCopy = records.first(where: { $0.key == completed.key.newCopy }) {
                journal.store(
                    JournalRecord(key: journalKey.newCopy, path: path, state: newCopy.state, request: request))
            }
        } else if let partial = records.first(where: { if case .partial = $0.state { true } else { false } }) {
            taken = JournalRecord(key: journalKey, path: path, state: partial.state, request: request)
        } else {
            return nil
        }
        journal.store(taken)
        journal.remove(records.map(\.key))
        logger.debug("taking over the journal's record of the file", metadata: ["path": "\(path)"])
        return taken
    }

    /// Whether `a` and `b` name the same resource: the same origin and path, whatever their queries say.
    static func sameResource(_ a: URL, _ b: URL) -> Bool {
        HTTPRules.origin(of: a) == HTTPRules.origin(of: b)
            && a.path(percentEncoded: true) == b.path(percentEncoded: true)
    }

    func cancelledError() -> DownloadError {
        DownloadError(.cancelled, message: "cancelled", url: request.url, bytesReceived: writer?.size)
    }
}

/// Why an attempt ended early, and whether another attempt may help.
struct AttemptFailure: Error {
    var error: DownloadError
    var isTransient: Bool
    var retryAfter: Duration?

    static func permanent(_ error: DownloadError) -> AttemptFailure {
        AttemptFailure(error: error, isTransient: false)
    }

    static func transient(_ error: DownloadError, retryAfter: Duration? = nil) -> AttemptFailure {
        AttemptFailure(error: error, isTransient: true, retryAfter: retryAfter)
    }
}

/// When the transfer last made progress, and how many body bytes it has received; read by the stall watch. A time in
/// the future is a wait the download chose (a bandwidth limit, a request's turn): not a stall until it has passed.
final class ActivityClock: Sendable {
    private struct State {
        var last = ContinuousClock.now
        var bytes: Int64 = 0
        var stallsWatchedElsewhere = false
    }
    private let state = Locked(State())
    func touch(_ now: ContinuousClock.Instant = .now) { state.withLock { $0.last = now } }
    /// Records `count` body bytes received now.
    func received(_ count: Int, now: ContinuousClock.Instant = .now) {
        state.withLock { state in
            state.last = max(state.last, now)
            state.bytes += Int64(count)
        }
    }
    /// Marks the transfer as waiting by its own choice until `until`.
    func waits(until: ContinuousClock.Instant) { state.withLock { $0.last = max($0.last, until) } }
    /// While `true`, silence on this clock is no stall (``StallWatch``): the connections of a segmented transfer are
    /// each watched on their own, and the stall of one drops its source for the others (a mirror) to go on, which the
    /// same silence seen on the whole download would stop first. Set back, the clock counts from now.
    func setStallsWatchedElsewhere(_ elsewhere: Bool) {
        state.withLock { state in
            state.stallsWatchedElsewhere = elsewhere
            state.last = max(state.last, .now)
        }
    }
    var reading: (last: ContinuousClock.Instant, bytes: Int64, stallsWatchedElsewhere: Bool) {
        state.withLock { ($0.last, $0.bytes, $0.stallsWatchedElsewhere) }
    }
}
