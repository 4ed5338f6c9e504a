import Foundation

/// The ways to one file: the request's URL, then its mirrors (``DownloadRequest/mirrors``), asked one at a time by a
/// download that comes as one stream. A value with no I/O: the run asks it what to do after each failed attempt.
///
/// Each source has its own retries: a transient failure (a `5xx`, a cut, a stall, a refused connection) is tried again
/// on the same source while its retries last; a source whose retries are used up, or that fails in a way another
/// attempt would meet again (a `4xx`, a refused certificate, no such host), is dropped, and the next live one is asked
/// at once. The download fails only when every source has failed, with a message naming each and its reason.
struct SourceList {
    struct Source: Equatable {
        /// The URL given: the request's URL or a mirror.
        let url: URL
        /// Failed attempts on this source.
        var failures = 0
        /// Why it was dropped, once it is.
        var dropped: String?
    }

    private(set) var sources: [Source]
    /// The source the next request goes to.
    private(set) var current = 0

    init(_ request: DownloadRequest) {
        sources = [Source(url: request.url)]
        guard !request.mirrors.isEmpty else { return }
        var seen: Set<URL> = [request.url]
        for mirror in request.mirrors where seen.insert(mirror).inserted {
            sources.append(Source(url: mirror))
        }
    }

    /// The URL of the source the next request goes to.
    var url: URL { sources[current].url }
    /// Whether the next request goes to the request's own URL.
    var isFirst: Bool { current == 0 }

    /// The sources not dropped, the current one first: what a download fetched in segments spreads its connections
    /// over.
    var live: [URL] {
        [url] + sources.indices.filter { $0 != current && sources[$0].dropped == nil }.map { sources[$0].url }
    }

    /// What the download does after a failed attempt.
    enum Next {
        /// Try the same source again; this is its `failures`-th failure (the backoff grows with it).
        case retry(failures: Int)
        /// `dropped` is not asked again (for `reason`); the next attempt goes to `next`, at once.
        case next(dropped: URL, reason: String, next: URL)
        /// Every source has failed, or the failure is the download's own, not a source's: the download ends with
        /// `error`.
        case giveUp(DownloadError)
    }

    /// Counts `failure` against the current source and decides what comes next, with `maxRetries` retries per source.
    mutating func next(after failure: AttemptFailure, maxRetries: Int) -> Next {
        sources[current].failures += 1
        let failures = sources[current].failures
        if failure.isTransient, failures <= maxRetries { return .retry(failures: failures) }
        guard Self.blamesSource(failure.error.code) else { return .giveUp(failure.error) }
        sources[current].dropped = failure.error.message
        let dropped = sources[current].url
        // The next live source after this one, else one before it (never asked yet only if it was skipped).
        let order = Array(sources.indices[(current + 1)...]) + Array(sources.indices[..<current])
        guard let following = order.first(where: { sources[$0].dropped == nil }) else {
            return .giveUp(everySourceFailed(last: failure.error))
        }
        current = following
        return .next(dropped: dropped, reason: failure.error.message, next: sources[following].url)
    }

    /// Whether a failure with `code` is the source's (another source may do better) rather than the download's own
    /// (its time limit, its size limit, the file system, a checksum).
    static func blamesSource(_ code: DownloadError.Code) -> Bool {
        switch code {
        case .httpStatus, .transport, .truncated, .stalled, .tooSlow, .invalidResponse, .tooManyRedirects,
            .redirectLoop, .redirectRefused:
            true
        default:
            false
        }
    }

    /// The error of a download whose sources all failed: `last` for a download with one source (its message as it
    /// is), else `last` with a message naming each source (without its credentials) and why it was dropped.
    private func everySourceFailed(last: DownloadError) -> DownloadError {
        guard sources.count > 1 else { return last }
        let reasons = sources.map { "\($0.url.redactedString): \($0.dropped ?? "not tried")" }
        return DownloadError(
            last.code, message: "every source failed: " + reasons.joined(separator: "; "), url: sources[0].url,
            status: last.status, bytesReceived: last.bytesReceived, underlying: last.underlying)
    }
}
