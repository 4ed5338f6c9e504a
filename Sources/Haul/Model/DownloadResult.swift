public import Foundation

/// A finished download.
public struct DownloadResult: Sendable, Equatable {
    /// Where the file is.
    public var fileURL: URL {
        get {
            switch location {
            case .path(let path): URL(fileURLWithPath: path, isDirectory: false)
            case .url(let url): url
            }
        }
        set { location = .url(newValue) }
    }
    /// The file's path: ``fileURL``'s, without making the URL.
    public var filePath: String {
        switch location {
        case .path(let path): path
        case .url(let url): url.path
        }
    }
    /// The engine's results keep the file's path and make its URL when asked: most results of a large batch are
    /// only counted, and a file URL percent-encodes its path (bench/compare, s3).
    private var location: Location

    private enum Location: Sendable {
        case path(String)
        case url(URL)
    }
    /// Its size in bytes.
    public var size: Int64
    /// Its SHA-256 in hex, when it was computed: the request expected a SHA-256 digest, or the downloader computes
    /// one for every file (``Downloader/Configuration/computesSHA256``); `nil` otherwise.
    public var sha256: String?
    /// The URL the bytes finally came from, after redirects.
    public var finalURL: URL
    /// The source that served the file, before redirects: the request's URL, or the mirror
    /// (``DownloadRequest/mirrors``) it went on from when the sources before failed; for a file fetched in segments
    /// over several sources, the one most of its bytes came from. For a skipped file, the request's URL.
    public var source: URL
    /// How many attempts it took (1 when nothing had to be retried).
    public var attempts: Int
    /// Body bytes received over all attempts (more than `size` when an attempt had to start over).
    public var bytesTransferred: Int64
    /// `true` when nothing was downloaded: the file already existed and the conflict policy was `skip`, or
    /// the journal shows Haul completed it in an earlier run and it is unchanged.
    public var skipped: Bool
    /// `true` when the server answered the conditional request that revalidated the file with `304 Not Modified`
    /// (``Downloader/Configuration/revalidatesCompletedFiles``): the file was kept as it was (``skipped`` is `true`
    /// too).
    public var notModified = false
    /// `true` when the file was skipped because one was already at the destination and the conflict policy is
    /// ``ConflictPolicy/skip``: the result describes whatever file was there, which nothing shows this download
    /// wrote (``skipped`` is `true` too). `false` for a file the journal shows complete.
    public var keptExisting = false

    /// Creates a result.
    public init(
        fileURL: URL, size: Int64, sha256: String?, finalURL: URL, attempts: Int, bytesTransferred: Int64,
        skipped: Bool = false
    ) {
        self.init(
            location: .url(fileURL), size: size, sha256: sha256, finalURL: finalURL, attempts: attempts,
            bytesTransferred: bytesTransferred, skipped: skipped)
    }

    /// A result for the file at `path`, its URL made when first asked for.
    init(
        path: String, size: Int64, sha256: String?, finalURL: URL, attempts: Int, bytesTransferred: Int64,
        skipped: Bool = false
    ) {
        self.init(
            location: .path(path), size: size, sha256: sha256, finalURL: finalURL, attempts: attempts,
            bytesTransferred: bytesTransferred, skipped: skipped)
    }

    private init(
        location: Location, size: Int64, sha256: String?, finalURL: URL, attempts: Int, bytesTransferred: Int64,
        skipped: Bool
    ) {
        self.location = location
        self.size = size
        self.sha256 = sha256
        self.finalURL = finalURL
        source = finalURL
        self.attempts = attempts
        self.bytesTransferred = bytesTransferred
        self.skipped = skipped
    }

    /// Equal when every property is (a result made from a path equals one made from that path's file URL).
    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.size == rhs.size && lhs.sha256 == rhs.sha256 && lhs.finalURL == rhs.finalURL
            && lhs.source == rhs.source && lhs.attempts == rhs.attempts && lhs.bytesTransferred == rhs.bytesTransferred
            && lhs.skipped == rhs.skipped && lhs.notModified == rhs.notModified && lhs.keptExisting == rhs.keptExisting
            && lhs.fileURL == rhs.fileURL
    }
}
