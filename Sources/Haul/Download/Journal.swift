import Foundation

/// Remembers, across processes, what downloads left behind: partial files that can be resumed, and files
/// Haul published and may skip when they are still unchanged. Give one to ``Downloader/Configuration/journal``.
///
/// The engine calls it synchronously from the downloading task, a few times per download and never per chunk:
/// one lookup at the start; a write when a partial of more than 256 KiB gains a validator; one write just before
/// publishing (two with the `rename` conflict policy); a removal when a download fails for good. Implementations
/// must be thread-safe, and a write must be durable enough for the caller's purpose when the call returns
/// (`SQLiteJournal`: it survives the process being killed).
public protocol Journal: Sendable {
    /// The last record stored for `key`, if any.
    func record(for key: JournalKey) -> JournalRecord?
    /// Stores `record`, replacing any earlier record for its key.
    func store(_ record: JournalRecord)
    /// Forgets `key` (the download failed for good; nothing of it is left to resume).
    func remove(_ key: JournalKey)
}

/// Identifies one download across runs: its URL and its destination as requested (a directory destination
/// stays a directory, so a name chosen from `Content-Disposition` is found again).
public struct JournalKey: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The requested URL, before redirects.
    public var url: String
    /// The requested destination: a file path, or a directory path ending in `/`.
    public var destination: String

    /// Creates a key.
    public init(url: String, destination: String) {
        self.url = url
        self.destination = destination
    }

    /// The key of `request`.
    public init(_ request: DownloadRequest) {
        url = request.url.absoluteString
        switch request.destination {
        case .file(let file): destination = file.path
        case .directory(let directory, let useContentDisposition):
            destination = directory.path + (useContentDisposition ? "/?content-disposition" : "/")
        }
    }

    /// `URL -> destination`.
    public var description: String { "\(url) -> \(destination)" }
}

/// What a ``Journal`` knows about one download.
public struct JournalRecord: Sendable, Hashable, Codable {
    /// Where a download stands.
    public enum State: Sendable, Hashable, Codable {
        /// Bytes are in the partial file of `path`; they may be resumed while the server's validator (strong
        /// ETag or Last-Modified) still matches.
        case partial(validator: String, totalBytes: Int64?)
        /// The file is complete and verified and about to be published at `path` (a crash may have hit the
        /// rename): a file there with this size and SHA-256 is this download's.
        case verified(size: Int64, sha256: String)
        /// The file was published at `path` (or is about to be: the engine records it just before the rename,
        /// with the stamp the rename keeps); it counts as there only while a file at `path` has this size,
        /// modification time and inode.
        case completed(size: Int64, sha256: String, stamp: FileStamp)
    }

    /// The download this is about.
    public var key: JournalKey
    /// The destination file path (for a directory destination, the name chosen inside it).
    public var path: String
    /// Where it stands.
    public var state: State

    /// Creates a record.
    public init(key: JournalKey, path: String, state: State) {
        self.key = key
        self.path = path
        self.state = state
    }
}

/// What tells a file apart from a changed or replaced one without reading it: size, modification time and
/// inode (the same test rsync and make rely on).
public struct FileStamp: Sendable, Hashable, Codable {
    /// Size in bytes.
    public var size: Int64
    /// Modification time, in nanoseconds since 1970.
    public var modifiedNanoseconds: Int64
    /// The inode number.
    public var inode: UInt64

    /// Creates a stamp.
    public init(size: Int64, modifiedNanoseconds: Int64, inode: UInt64) {
        self.size = size
        self.modifiedNanoseconds = modifiedNanoseconds
        self.inode = inode
    }

}
