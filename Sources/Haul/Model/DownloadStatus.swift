import Foundation

/// Where one download of a ``DownloadQueue`` stands, as a value: what a dashboard or an RPC answer shows of it.
///
/// ```swift
/// for status in queue.statuses() where status.state == .running {
///     print(status.id, status.progress.bytesWritten, status.connections)
/// }
/// ```
public struct DownloadStatus: Sendable {
    /// The download's state.
    public enum State: Sendable, Hashable {
        /// Waiting for a slot.
        case waiting
        /// Admitted and transferring (or waiting for a retry).
        case running
        /// Paused by the caller (``DownloadQueue/pause(_:)``): not admitted until resumed. A download paused while it
        /// ran is in this state from the call on, while its transfer stops.
        case paused
        /// Ended: ``DownloadStatus/outcome`` says how.
        case finished
    }

    /// The download's identity in its queue.
    public var id: DownloadID
    /// The request as added.
    public var request: DownloadRequest
    /// Waiting, running, paused or finished.
    public var state: State
    /// Its place in the queue's waiting order (0 is admitted first), while it is waiting or paused; see
    /// ``DownloadQueue/move(_:toPosition:)``.
    public var position: Int?
    /// How far it has come: the bytes written and the total once known; the speed while it runs (0 otherwise).
    public var progress: DownloadProgress
    /// The connections it has open: 1 while it runs, more while it fetches segments over several; 0 otherwise.
    public var connections: Int
    /// Its own speed limit in bytes per second, if it has one (``DownloadQueue/setMaxBytesPerSecond(_:of:)``).
    public var maxBytesPerSecond: Int64?
    /// How it ended, once ``state`` is ``State/finished``.
    public var outcome: Result<DownloadResult, DownloadError>?

    /// Creates a status value.
    public init(
        id: DownloadID, request: DownloadRequest, state: State, position: Int? = nil,
        progress: DownloadProgress = DownloadProgress(bytesWritten: 0, totalBytes: nil, bytesPerSecond: 0),
        connections: Int = 0, maxBytesPerSecond: Int64? = nil, outcome: Result<DownloadResult, DownloadError>? = nil
    ) {
        self.id = id
        self.request = request
        self.state = state
        self.position = position
        self.progress = progress
        self.connections = connections
        self.maxBytesPerSecond = maxBytesPerSecond
        self.outcome = outcome
    }
}

/// One host's share of a ``DownloadQueue`` (``DownloadQueue/hostStatuses()``).
public struct HostStatus: Sendable, Hashable {
    /// The host's key: its origin, `scheme://host:port` (``DownloadQueue/hostKey(for:)``).
    public var host: String
    /// Its downloads running (a segmented download's extra connections counted).
    public var running: Int
    /// Its downloads waiting for a slot (paused ones not counted).
    public var waiting: Int
    /// Its own limit (``DownloadQueue/setLimit(_:forHost:)``), or `nil` when ``DownloadQueue/perHostLimit``
    /// applies.
    public var ownLimit: Int?
    /// The limit that applies to it, or `nil` for none.
    public var limit: Int?

    /// Whether its downloads are held back (its own limit is 0).
    public var isPaused: Bool { ownLimit == 0 }

    /// A host's share.
    public init(host: String, running: Int, waiting: Int, ownLimit: Int?, limit: Int?) {
        self.host = host
        self.running = running
        self.waiting = waiting
        self.ownLimit = ownLimit
        self.limit = limit
    }
}
