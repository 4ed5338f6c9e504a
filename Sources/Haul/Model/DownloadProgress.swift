import Foundation

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
