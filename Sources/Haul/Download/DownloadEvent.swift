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

/// How far a download has come.
public struct DownloadProgress: Sendable, Equatable {
    /// Bytes of the file on disk so far (including bytes kept from earlier attempts).
    public var bytesWritten: Int64
    /// The file's full size, when the server said it.
    public var totalBytes: Int64?
    /// Recent transfer speed in bytes per second (smoothed over about a second).
    public var bytesPerSecond: Double

    /// Creates a progress value.
    public init(bytesWritten: Int64, totalBytes: Int64?, bytesPerSecond: Double) {
        self.bytesWritten = bytesWritten
        self.totalBytes = totalBytes
        self.bytesPerSecond = bytesPerSecond
    }

    /// `bytesWritten / totalBytes`, when the total is known.
    public var fractionCompleted: Double? {
        guard let totalBytes, totalBytes > 0 else { return nil }
        return Double(bytesWritten) / Double(totalBytes)
    }
}

/// A finished download.
public struct DownloadResult: Sendable, Equatable {
    /// Where the file is.
    public var fileURL: URL
    /// Its size in bytes.
    public var size: Int64
    /// Its SHA-256, in hex (always computed while writing).
    public var sha256: String
    /// The URL the bytes finally came from, after redirects.
    public var finalURL: URL
    /// How many attempts it took (1 when nothing had to be retried).
    public var attempts: Int
    /// Body bytes received over all attempts (more than `size` when an attempt had to start over).
    public var bytesTransferred: Int64
    /// `true` when nothing was downloaded: the file already existed and the conflict policy was `skip`, or
    /// the journal shows Haul completed it in an earlier run and it is unchanged.
    public var skipped: Bool

    /// Creates a result.
    public init(
        fileURL: URL, size: Int64, sha256: String, finalURL: URL, attempts: Int, bytesTransferred: Int64,
        skipped: Bool = false
    ) {
        self.fileURL = fileURL
        self.size = size
        self.sha256 = sha256
        self.finalURL = finalURL
        self.attempts = attempts
        self.bytesTransferred = bytesTransferred
        self.skipped = skipped
    }

    /// A result for the file at `path`.
    init(
        path: String, size: Int64, sha256: String, finalURL: URL, attempts: Int, bytesTransferred: Int64,
        skipped: Bool = false
    ) {
        self.init(
            fileURL: URL(fileURLWithPath: path, isDirectory: false), size: size, sha256: sha256, finalURL: finalURL,
            attempts: attempts, bytesTransferred: bytesTransferred, skipped: skipped)
    }
}
