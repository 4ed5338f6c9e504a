/// Identifies one download in a ``DownloadQueue`` (joined duplicates share one).
public struct DownloadID: Hashable, Sendable, Comparable, CustomStringConvertible {
    let rawValue: UInt64

    /// The number: 1 for the queue's first download, then counting up in the order added.
    public var number: UInt64 { rawValue }

    /// `#N`, numbered in the order downloads were added.
    public var description: String { "#\(rawValue)" }

    /// Earlier-added downloads sort first.
    public static func < (lhs: DownloadID, rhs: DownloadID) -> Bool { lhs.rawValue < rhs.rawValue }
}
