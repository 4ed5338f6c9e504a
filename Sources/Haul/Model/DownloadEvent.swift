public import Foundation

/// Something that happened to a download: what the CLI's bars, `--json` and `--verbose` all render.
public enum DownloadEvent: Sendable {
    /// An attempt started (1 for the first; `resumingAt` bytes already on disk when it resumes).
    case started(attempt: Int, resumingAt: Int64)
    /// Bytes arrived (throttled: at most ``Downloader/Configuration/progressInterval`` apart, plus the last).
    case progress(DownloadProgress)
    /// The server redirected; the next request goes to `to`.
    case redirected(from: URL, to: URL, status: Int)
    /// The server answered the conditional request that revalidates a file completed in an earlier run
    /// (``Downloader/Configuration/revalidatesCompletedFiles``): `modified == false` is `304 Not Modified` (the file
    /// is kept; ``finished(_:)`` follows with ``DownloadResult/notModified`` set), `true` a new copy, which replaces
    /// the file once it is complete and verified.
    case revalidated(modified: Bool)
    /// The next request waits `delay` before it starts, for `reason`: a request rate, a wait between requests to
    /// one host, or a host that asked for time with `Retry-After`.
    case throttled(reason: ThrottleReason, delay: Duration)
    /// One of the connections of a download fetched over several (``DownloadRequest/maxConnections``,
    /// ``DownloadRequest/mirrors``) started or finished a segment, failed, or dropped a source.
    case segment(SegmentEvent)
    /// A source of the file (the request's URL or one of its ``DownloadRequest/mirrors``) failed for good, for
    /// `reason`: it is not asked again, and the next attempt goes to `next`, at once. A download fetched in segments
    /// reports the sources its connections drop with ``segment(_:)`` instead.
    case sourceDropped(url: URL, reason: String, next: URL)
    /// A transient failure; the next attempt starts after `delay`.
    case retrying(attempt: Int, after: Duration, error: DownloadError)
    /// The file is at its destination, verified.
    case finished(DownloadResult)
    /// The download failed for good; nothing is at the destination.
    case failed(DownloadError)
}

/// Why a request waits before it starts (``DownloadEvent/throttled(reason:delay:)``).
public enum ThrottleReason: String, Sendable, Hashable, CaseIterable {
    /// The run's or the host's request rate (``RequestPacing/rate``, ``RequestPacing/perHostRate``).
    case requestRate
    /// The wait between two requests to one host (``RequestPacing/perHostWait``).
    case hostWait
    /// The host answered `429` or `503` with `Retry-After`: every download to it waits that long.
    case retryAfter
}

/// What happened to one segment of a download fetched over several connections (``DownloadEvent/segment(_:)``).
public struct SegmentEvent: Sendable {
    /// What happened.
    public enum Change: Sendable {
        /// The connection asked for the segment's bytes.
        case started
        /// The segment's bytes are all in the file.
        case finished
        /// The connection failed; its segment is left to be fetched again (by it after a backoff, or by another).
        case failed(DownloadError)
        /// The source at ``SegmentEvent/url`` is not used for the rest of the file (it failed, ignored `Range`, or was
        /// much slower than the others); its segments move to the other sources.
        case sourceDropped(reason: String)
    }

    /// Which connection of the download (0 is the first).
    public var connection: Int
    /// The bytes of the file the segment covers (for ``Change/sourceDropped(reason:)``, what was left of it).
    public var range: Range<Int64>
    /// The source the connection fetches from.
    public var url: URL
    /// What happened.
    public var change: Change

    /// Creates an event.
    public init(connection: Int, range: Range<Int64>, url: URL, change: Change) {
        self.connection = connection
        self.range = range
        self.url = url
        self.change = change
    }
}
