import Foundation

/// Something that happened in a ``DownloadQueue``: what a progress display draws from.
public enum QueueEvent: Sendable {
    /// A download was added; it waits for a slot.
    case queued(DownloadID, DownloadRequest)
    /// Something happened to one download: started, progress, redirected, revalidated, throttled, a segment, a source
    /// dropped, retrying, finished or failed.
    /// A cancellation is `.failed` with ``DownloadError/Code/cancelled``.
    case download(DownloadID, DownloadEvent)
    /// The batch's counters (throttled to ``DownloadQueue/Configuration/progressInterval``; a last one
    /// always follows the end of the batch).
    case batchProgress(BatchProgress)
    /// A download was paused (``DownloadQueue/pause(_:)``): it keeps its place in the waiting order and is not
    /// admitted until resumed. Published when asked; a running one's transfer stops after it.
    case paused(DownloadID)
    /// A paused download was resumed (``DownloadQueue/resume(_:)``): it waits for a slot again.
    case resumed(DownloadID)

    /// What an event is about, to subscribe to some kinds only (``DownloadQueue/events(including:)``).
    public enum Kind: Hashable, Sendable, CaseIterable {
        /// ``QueueEvent/queued(_:_:)``.
        case queued
        /// A download's ``DownloadEvent/started(attempt:resumingAt:)``.
        case started
        /// A download's ``DownloadEvent/progress(_:)``.
        case progress
        /// A download's ``DownloadEvent/redirected(from:to:status:)``.
        case redirected
        /// A download's ``DownloadEvent/retrying(attempt:after:error:)``.
        case retrying
        /// A download's ``DownloadEvent/revalidated(modified:)``.
        case revalidated
        /// A download's ``DownloadEvent/throttled(reason:delay:)``.
        case throttled
        /// A download's ``DownloadEvent/segment(_:)``.
        case segment
        /// A download's ``DownloadEvent/sourceDropped(url:reason:next:)``.
        case sourceDropped
        /// A download's ``DownloadEvent/finished(_:)`` (skipped ones included).
        case finished
        /// A download's ``DownloadEvent/failed(_:)``, cancellations included.
        case failed
        /// ``QueueEvent/batchProgress(_:)``.
        case batchProgress
        /// ``QueueEvent/paused(_:)``.
        case paused
        /// ``QueueEvent/resumed(_:)``.
        case resumed

        /// The kinds a download event can be.
        public init(_ event: DownloadEvent) {
            switch event {
            case .started: self = .started
            case .progress: self = .progress
            case .redirected: self = .redirected
            case .retrying: self = .retrying
            case .revalidated: self = .revalidated
            case .throttled: self = .throttled
            case .segment: self = .segment
            case .sourceDropped: self = .sourceDropped
            case .finished: self = .finished
            case .failed: self = .failed
            }
        }

        /// This kind's bit in ``DownloadQueue/interestBits``.
        var bit: UInt16 {
            switch self {
            case .queued: 1 << 0
            case .started: 1 << 1
            case .progress: 1 << 2
            case .redirected: 1 << 3
            case .retrying: 1 << 4
            case .finished: 1 << 5
            case .failed: 1 << 6
            case .batchProgress: 1 << 7
            case .revalidated: 1 << 8
            case .throttled: 1 << 9
            case .segment: 1 << 10
            case .sourceDropped: 1 << 11
            case .paused: 1 << 12
            case .resumed: 1 << 13
            }
        }

        /// Every kind.
        public static let all = Set(allCases)
        /// How each download ended: ``finished`` and ``failed``.
        public static let outcomes: Set<Kind> = [.finished, .failed]
    }

    /// This event's kind.
    public var kind: Kind {
        switch self {
        case .queued: .queued
        case .download(_, let event): Kind(event)
        case .batchProgress: .batchProgress
        case .paused: .paused
        case .resumed: .resumed
        }
    }
}
