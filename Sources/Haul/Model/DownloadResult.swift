public import Foundation

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
