/// How far a ``DownloadQueue``'s current batch has come: files, bytes, speed and time remaining.
///
/// A batch begins when a download is added to an idle queue (nothing waiting or running) and lasts until the
/// queue is idle again, so "k / n files" counts the downloads of the batch in progress.
///
/// ```swift
/// for await event in queue.events {
///     if case .batchProgress(let batch) = event {
///         print("\(batch.completedFiles) / \(batch.totalFiles) files, \(batch.bytesWritten) bytes")
///     }
/// }
/// ```
public struct BatchProgress: Sendable, Equatable {
    /// Downloads added in this batch (joined duplicates count once).
    public var totalFiles = 0
    /// Downloads that finished with a file at their destination (including ones skipped as already there).
    public var finishedFiles = 0
    /// Downloads that failed for good (not counting cancellations).
    public var failedFiles = 0
    /// Downloads cancelled before they finished.
    public var cancelledFiles = 0
    /// Downloads transferring now.
    public var runningFiles = 0

    /// Bytes on disk for this batch: finished files' sizes plus what running downloads have written.
    public var bytesWritten: Int64 = 0
    /// The batch's total size, when every download's size is known (from `Content-Length` or the request's
    /// `expectedSize`); `nil` while any is unknown.
    public var totalBytes: Int64?
    /// Current speed: the sum of the running downloads' smoothed speeds, in bytes per second.
    public var bytesPerSecond: Double = 0
    /// Time left at the current speed. When some sizes are unknown they are estimated from the average size
    /// of the files whose size is known; `nil` while nothing is known or nothing moves.
    public var estimatedTimeRemaining: Duration?

    /// Creates an empty progress value.
    public init() {}

    /// Downloads that have ended, whichever way.
    public var completedFiles: Int { finishedFiles + failedFiles + cancelledFiles }

    /// `bytesWritten / totalBytes`, when the total is known.
    public var fractionCompleted: Double? {
        guard let totalBytes, totalBytes > 0 else { return nil }
        return Double(bytesWritten) / Double(totalBytes)
    }
}

extension DownloadProgress {
    /// Time left at the current speed; `nil` when the total is unknown or nothing moves.
    public var estimatedTimeRemaining: Duration? {
        guard let totalBytes, bytesPerSecond > 0 else { return nil }
        return .seconds(Double(max(0, totalBytes - bytesWritten)) / bytesPerSecond)
    }
}
