import Foundation

/// Remembers, across processes, what downloads left behind: requests a queue had not finished, partial files
/// that can be resumed, files Haul published and may skip when they are still unchanged, and failures. Give one
/// to ``Downloader/Configuration/journal``; a ``DownloadQueue`` on that downloader records what it is given and
/// re-admits it after a restart (``DownloadQueue/resumeUnfinished(includingFailed:)``).
///
/// The engine calls it from the downloading task, a few times per download and never per chunk: one lookup at
/// the start; a write (``commit(_:)``) when a partial of more than 64 KiB gains a validator (smaller bodies are
/// fetched again whole); one just before publishing (two with the `rename` conflict policy); a write when a
/// download fails for good, a removal when it is cancelled with nothing kept. A queue adds one batch write per
/// ``DownloadQueue/add(_:)-([DownloadRequest])`` call. Implementations must be thread-safe, and a write must be
/// durable enough for the caller's purpose when the call returns (`SQLiteJournal`: it survives the process being
/// killed).
public protocol Journal: Sendable {
    /// The last record stored for `key`, if any. An implementation may answer a key written since it was opened as
    /// unknown (never with an older record); `SQLiteJournal` does so for `haul get`.
    func record(for key: JournalKey) -> JournalRecord?
    /// Stores `record`, replacing any earlier record for its key.
    func store(_ record: JournalRecord)
    /// Stores `record` like ``store(_:)-(JournalRecord)``, suspending instead of blocking a thread until it is
    /// durable. The engine uses it for the records it writes while downloading, so an implementation may commit
    /// the records of downloads that finish together in one write. The default calls
    /// ``store(_:)-(JournalRecord)``.
    func commit(_ record: JournalRecord) async
    /// Stores `records` in one write (all or none survive a crash), each replacing any earlier record for its
    /// key. The default stores them one by one.
    func store(_ records: [JournalRecord])
    /// Forgets `key`.
    func remove(_ key: JournalKey)
    /// Forgets `keys` in one write. The default forgets them one by one.
    func remove(_ keys: [JournalKey])
    /// Every record, in the order their keys were first stored (what a queue re-admits keeps its order).
    func allRecords() -> [JournalRecord]
    /// The records of a partial or completed file at `path` (``JournalRecord/path``), under any key: a download is
    /// about its file, and one to `path` whose own key the journal does not know takes over what another URL left
    /// there (a token in the query that changed, a mirror). An implementation may answer without the records written
    /// since it was opened, like ``record(for:)``. Called before a download whose key the journal does not know, so it
    /// must cost about what ``record(for:)`` costs. The default answers none: such a download then starts afresh.
    func records(forFileAt path: String) -> [JournalRecord]
}

extension Journal {
    /// Stores `record` (blocking).
    public func commit(_ record: JournalRecord) async {
        store(record)
    }

    /// Stores `records` one by one.
    public func store(_ records: [JournalRecord]) {
        for record in records { store(record) }
    }

    /// Forgets `keys` one by one.
    public func remove(_ keys: [JournalKey]) {
        for key in keys { remove(key) }
    }

    /// None: a journal that cannot look its records up by path cheaply has downloads whose key it does not know
    /// start afresh (reading every record for each download would cost the journal's size per download).
    public func records(forFileAt path: String) -> [JournalRecord] { [] }
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

    /// The key of the partial of a new copy of this key's completed file, which a revalidation is fetching: it sits
    /// beside the completed record until the new copy is published. Its URL is no request's (`new-copy:` and the URL).
    var newCopy: JournalKey { JournalKey(url: "new-copy:" + url, destination: destination) }
}

/// What a ``Journal`` knows about one download.
public struct JournalRecord: Sendable, Hashable, Codable {
    /// Where a download stands.
    public enum State: Sendable, Hashable, Codable {
        /// A queue was given the request and has not finished it; nothing of it is on disk yet.
        case requested
        /// Bytes are in the partial file of `path`; they may be resumed while the server's validator (strong
        /// ETag or Last-Modified) still matches. `missingRanges` is set for a file fetched in segments over several
        /// connections (its partial has the file's full length): the byte ranges not yet written, each resumed from
        /// its start; `nil` for a partial written in order, which resumes at its size.
        case partial(validator: String, totalBytes: Int64?, missingRanges: [Range<Int64>]? = nil)
        /// The file was published at `path` (or is about to be: the engine records it just before publishing, with
        /// the stamp the rename or link keeps); it counts as there only while a file at `path` has this size,
        /// modification time and inode. `sha256` is its digest in hex when the download computed one; `validator`
        /// the server's strong ETag or `Last-Modified` for it, which a later run revalidates it with
        /// (``Downloader/Configuration/revalidatesCompletedFiles``).
        case completed(size: Int64, sha256: String?, stamp: FileStamp, validator: String? = nil)
        /// The download failed for good with this message; nothing of it was kept.
        case failed(message: String)

        /// Whether the download failed for good.
        public var isFailure: Bool {
            if case .failed = self { true } else { false }
        }

        /// Whether the record is about a file on disk: a partial or a completed one.
        public var isFile: Bool {
            switch self {
            case .partial, .completed: true
            case .requested, .failed: false
            }
        }

        /// Whether a queue should run the download again after a restart: it was requested and not finished,
        /// or has a partial to resume.
        public var isUnfinished: Bool {
            switch self {
            case .requested, .partial: true
            case .completed, .failed: false
            }
        }
    }

    /// The download this is about.
    public var key: JournalKey
    /// The destination file path (for a directory destination, the name chosen inside it); empty for a
    /// ``State/requested`` download, which has written nothing yet.
    public var path: String
    /// Where it stands.
    public var state: State
    /// The whole request, kept while it may have to run again (``State/requested``,
    /// ``State/partial(validator:totalBytes:missingRanges:)``, ``State/failed(message:)``): what a queue re-admits
    /// after a restart. A journal that stores it in a file
    /// stores it encoded, which leaves out its credentials and its `Authorization`, `Cookie` and
    /// `Proxy-Authorization` fields (see ``DownloadRequest/encode(to:)``).
    public var request: DownloadRequest?

    /// Creates a record.
    public init(key: JournalKey, path: String, state: State, request: DownloadRequest? = nil) {
        self.key = key
        self.path = path
        self.state = state
        self.request = request
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
