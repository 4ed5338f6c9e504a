import Foundation
import HTTPTypes
import HaulOperations

/// The engine's rule book for a response to a one-stream request (a first piece included): from what was asked, what
/// is held of the file and the response head, what to do. No I/O, no clock, no lock; the run carries the answer out
/// (`DownloadRun+Stream.swift`). Redirects are the hop's (``Hops/follow(_:limit:)``) and never come here; a segment's
/// response is judged by ``SegmentDecision``.
struct ResponseDecision {
    /// What the request asked for, and what the run holds of the file.
    struct Asked: Equatable {
        /// Where the request's range started (0: no range, or a first piece from the start).
        var from: Int64 = 0
        /// The validator of the bytes held, which the request's `If-Range` carried (a range from ``from`` > 0).
        var validator: String?
        /// A first piece's end (exclusive): the request asked for a closed range to try segments with.
        var pieceEnd: Int64?
        /// Whether the request carried a revalidation's condition not answered yet.
        var revalidating = false
        /// Whether the request asked for the rest of a file another tool left (not copied into a partial yet).
        var continuing = false
        /// Bytes held in the partial.
        var held: Int64 = 0
        /// The file's total, if an earlier response said it.
        var knownTotal: Int64?
    }

    /// The body is the file's (or a part of it): what writing it means.
    struct Write {
        /// Whether the body is a range (`206`) continuing at ``Asked/from``; else the whole file from zero.
        var isRange: Bool
        /// The most bytes the body may bring (its range, else its `Content-Length`); more is a lying server.
        var expected: Int64?
        /// Its `Content-Length`, which a body that ends early falls short of.
        var bodyLength: Int64?
        /// The file's total, if the response says it.
        var total: Int64?
        /// The validator to resume these bytes with: a strong ETag, else `Last-Modified`.
        var validator: String?
        var lastModified: String?
        /// Whether this answers a revalidation with a new copy.
        var newCopy = false
        /// A first piece that came whole (`200`): the server sends no ranges, so no segments.
        var endsPieces = false
        /// The rest of a file another tool left, coming as asked: the file is copied into the partial first.
        var startsContinuation = false
        /// The whole file where the rest of another tool's file was asked for: the conflict policy decides about
        /// that file before a byte is written.
        var abandonsContinuation = false
        /// The whole file while bytes are held: they go (a 200 to a Range request is never appended).
        var discardsHeld = false
        /// A total over the request's size limit: the download fails for good (after the above).
        var refusal: DownloadError?
    }

    enum Action {
        /// A `304` to the revalidation: the file stays as it is.
        case notModified
        /// A `416` to a first piece (an empty file, or a server that refuses such ranges): the plain request instead.
        case askWithoutPiece
        /// A `416` stating the total the held bytes already are: every byte is here.
        case complete(total: Int64)
        /// A `416` stating the size of the file another tool left: it is complete as it is (skipped).
        case foreignFileComplete(size: Int64)
        /// The held bytes cannot be continued (a `416` of another total, a range that does not continue them): from
        /// zero, without a range (a file another tool left: the conflict policy decides first).
        case startOver(because: String)
        /// A `206` that contradicts itself or what is known: from zero, and the attempt fails with the failure
        /// (transient). A file another tool left is copied into the partial first, and replaced.
        case misfit(AttemptFailure)
        /// The attempt fails; `holdHost` is how long every request to the host waits first (the host asked for time).
        case fail(AttemptFailure, holdHost: Duration?)
        /// The body is written.
        case write(Write)
    }

    /// What the request was sent with, for naming who refused what.
    struct Sent {
        var proxy: Proxy?
        var credentials: Bool
    }

    var policy: RetryPolicy
    var maxSize: Int64?

    /// What to do with the response `head` from `url` to a request that asked `asked`, sent as `sent`.
    func decide(_ head: HTTPResponse, from url: URL, asked: Asked, sent: Sent) -> Action {
        let status = head.status.code
        if status == 304, asked.revalidating { return .notModified }
        if status == 416, asked.pieceEnd != nil { return .askWithoutPiece }
        if status == 416, asked.from > 0 {
            let complete = HTTPRules.unsatisfiedRangeLength(head.headerFields.first(.contentRange))
            // The held bytes are the whole file only if its total is the one they were part of: a server whose file
            // shrank to their size (and that ignores If-Range) would have the start of the old version published.
            guard let complete, complete == asked.from, asked.knownTotal.map({ $0 == complete }) ?? true else {
                return .startOver(because: "the server cannot send the rest of it")
            }
            return asked.continuing ? .foreignFileComplete(size: complete) : .complete(total: complete)
        }
        guard (200..<300).contains(status) else {
            let failure = HTTPRules.statusFailure(
                head, url: url, proxy: sent.proxy, sentCredentials: sent.credentials, policy: policy)
            // The host asked for time: every download to it waits, not only this one.
            return .fail(failure, holdHost: policy.hostHold(status: status, retryAfter: failure.retryAfter))
        }
        if let coding = HTTPRules.unaskedTransferCoding(of: head) {
            return .fail(.permanent(Self.codedBody(coding, url: url, status: status)), holdHost: nil)
        }
        let bodyLength = head.headerFields.first(.contentLength).flatMap { Int64($0) }
        var write = Write(
            isRange: status == 206, expected: bodyLength, bodyLength: bodyLength, total: bodyLength,
            validator: HTTPRules.validator(of: head), lastModified: head.headerFields.first(.lastModified),
            newCopy: asked.revalidating)
        if status == 206 {
            guard asked.from > 0 || asked.pieceEnd != nil,
                let range = HTTPRules.contentRange(head.headerFields.first(.contentRange)),
                range.first == asked.from
            else {
                if asked.from == 0 {
                    return .fail(
                        .permanent(
                            DownloadError(
                                .httpStatus, message: "server sent 206 Partial Content to a request without Range",
                                url: url, status: status)), holdHost: nil)
                }
                return .startOver(because: "the server sent another range")
            }
            // A server that ignores If-Range sends the rest of another version: appended, it would publish a file
            // of two versions. A 206 without a validator (which RFC 9110 15.3.7 says it must repeat) cannot show it is
            // the rest of the same one.
            if asked.from > 0, let sent = asked.validator, write.validator != sent {
                return .startOver(because: "the file changed on the server")
            }
            if let problem = Self.misfit(range, bodyLength: bodyLength, knownTotal: asked.knownTotal) {
                return .misfit(
                    .transient(
                        DownloadError(
                            .invalidResponse,
                            message: "the server's Content-Range 'bytes \(range.first)-\(range.last)/"
                                + "\(range.complete.map(String.init) ?? "*")' does not fit: \(problem); starting over",
                            url: url, status: 206)))
            }
            // `bytes 0-99/*`: a total the server does not know. Without one known from before, the end of the range
            // would pass for the end of the file: a first piece is asked for again without a range (the whole file
            // comes), held bytes are given up for the whole file.
            guard let total = range.complete ?? asked.knownTotal else {
                if asked.pieceEnd != nil { return .askWithoutPiece }
                return .startOver(because: "the server does not say how long the file is")
            }
            write.startsContinuation = asked.continuing
            write.total = total
            write.expected = range.last - range.first + 1
        } else {
            write.endsPieces = asked.pieceEnd != nil
            write.abandonsContinuation = asked.continuing
            write.discardsHeld = asked.held > 0
        }
        if let maxSize, let total = write.total, total > maxSize {
            write.refusal = DownloadError(
                .sizeLimitExceeded, message: "the file is \(total) bytes, over the limit of \(maxSize)", url: url)
        }
        return .write(write)
    }

    /// The failure of a body sent in a transfer coding Haul did not ask for (see
    /// ``HTTPRules/unaskedTransferCoding(of:)``): permanent, as the server answers alike every time.
    static func codedBody(_ coding: String, url: URL, status: Int) -> DownloadError {
        DownloadError(
            .invalidResponse,
            message: "the server sent the body in transfer coding '\(coding)', which Haul did not ask for and does not "
                + "decode", url: url, status: status)
    }

    /// What is wrong with a `206` before any of its bytes are appended: the range must lie inside the total it
    /// states, its body must be as long as the range, and the total must be the one earlier responses stated.
    /// Appending such a body would publish a file of the wrong size or bytes.
    static func misfit(_ range: HTTPRules.ContentRange, bodyLength: Int64?, knownTotal: Int64?) -> String? {
        let length = range.last - range.first + 1
        if let complete = range.complete ?? knownTotal, range.last >= complete {
            return range.complete == nil
                ? "a range past the total an earlier response said" : "a range past the total it states"
        } else if let bodyLength, bodyLength != length {
            return "a body of \(bodyLength) bytes for a range of \(length)"
        } else if let known = knownTotal, let complete = range.complete, known != complete {
            return "a total of \(complete) bytes where an earlier response said \(known)"
        }
        return nil
    }
}

/// The rule book for the response to one segment's range request: from what the segment asked, what is known of the
/// file and of the source, and the response head, what to do. No I/O.
struct SegmentDecision {
    /// What the request asked, and what the transfer knows.
    struct Asked {
        var offset: Int64
        /// The file's total.
        var total: Int64
        /// The given URL of the source (for messages), and of the primary source.
        var given: URL
        var primary: URL
        var isPrimary: Bool
        /// The validator the source gave for the file so far, if any.
        var validator: String?
        /// Whether the request carried `If-Range`.
        var sentIfRange: Bool
    }

    enum Action {
        /// The range continues the segment: write it. `validator` is the source's validator to keep when it had
        /// none; `lastModified` the primary's.
        case write(validator: String?, lastModified: String?)
        /// The file changed on the server, or the server sends no ranges after all: one stream from zero.
        case abandonSegments(because: String)
        /// The sources disagree about the file: the download fails.
        case disagree(DownloadError)
        /// This request fails (the source's retries, or another source, decide what follows); `holdHost` is how
        /// long every request to the host waits first (the host asked for time), as after a one-stream response.
        case fail(AttemptFailure, holdHost: Duration?)
    }

    var policy: RetryPolicy

    func decide(_ head: HTTPResponse, from url: URL, asked: Asked, sent: ResponseDecision.Sent) -> Action {
        let status = head.status.code
        if (200..<300).contains(status), let coding = HTTPRules.unaskedTransferCoding(of: head) {
            return .fail(.permanent(ResponseDecision.codedBody(coding, url: url, status: status)), holdHost: nil)
        }
        if status == 206, let range = HTTPRules.contentRange(head.headerFields.first(.contentRange)),
            range.first == asked.offset
        {
            if let complete = range.complete, complete != asked.total {
                // The primary's file is what the download is of: a new size is a new version, fetched whole.
                if asked.isPrimary {
                    return .abandonSegments(because: "the file changed on the server (now \(complete) bytes)")
                }
                return .disagree(
                    DownloadError(
                        .invalidResponse,
                        message: "the sources disagree on the size: \(asked.primary.redactedString) has \(asked.total) "
                            + "bytes, \(asked.given.redactedString) has \(complete)", url: url, status: status))
            }
            let received = HTTPRules.validator(of: head)
            // Mirrors make their own validators (an ETag is often a server's own): only the primary's change counts.
            // A primary's 206 without one cannot show it is of the same version (as for one stream).
            if asked.isPrimary, let known = asked.validator, received != known {
                return .abandonSegments(because: "the file changed on the server")
            }
            return .write(
                validator: asked.validator == nil ? received : nil,
                lastModified: asked.isPrimary ? head.headerFields.first(.lastModified) : nil)
        }
        if (200..<300).contains(status) || status == 416 {
            // The whole file (or no range at all): it changed since the first response, or the source ignores Range.
            let reason =
                status == 416
                ? "it refused the range (416)"
                : asked.sentIfRange
                    ? "it sent the whole file to a range request with If-Range: the file changed or it ignores Range"
                    : "it ignores Range"
            if asked.isPrimary { return .abandonSegments(because: reason) }
            return .fail(
                .permanent(
                    DownloadError(
                        .invalidResponse, message: "\(asked.given.redactedString): \(reason)", url: url,
                        status: status)),
                holdHost: nil)
        }
        let failure = HTTPRules.statusFailure(
            head, url: url, proxy: sent.proxy, sentCredentials: sent.credentials, policy: policy)
        return .fail(failure, holdHost: policy.hostHold(status: status, retryAfter: failure.retryAfter))
    }
}
