public import Foundation

/// Something that happened to a download: what the CLI's bars, `--json` and `--verbose` all render.
public enum DownloadEvent: Sendable {
    /// An attempt started (1 for the first; `resumingAt` bytes already on disk when it resumes).
    case started(attempt: Int, resumingAt: Int64)
    /// Bytes arrived (throttled: at most ``Downloader/Configuration/progressInterval`` apart, plus the last).
    case progress(DownloadProgress)
    /// The server redirected; the next request goes to `to`.
    case redirected(from: URL, to: URL, status: Int)
    /// A transient failure; the next attempt starts after `delay`.
    case retrying(attempt: Int, after: Duration, error: DownloadError)
    /// The file is at its destination, verified.
    case finished(DownloadResult)
    /// The download failed for good; nothing is at the destination.
    case failed(DownloadError)
}
