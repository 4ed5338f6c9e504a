import Synchronization

/// What the owner of a download (a ``DownloadQueue``) may change or ask of it while it runs: its own speed limit,
/// and whether stopping it is a pause. Shared by the owner and the download's run; every field is safe to read and
/// change from any thread.
final class DownloadControl: Sendable {
    /// The download's own bandwidth limit; none unless its request or its owner sets one.
    let bandwidth: TokenBucket
    /// Set before the download's task is cancelled to pause it: the run keeps its partial as it would with
    /// ``Downloader/Configuration/keepsPartialOnCancel``, and leaves the journal's record of the request as it is.
    let pausing = Atomic<Bool>(false)
    /// The extra connections of a segmented transfer open now (the download's own is not counted).
    let extraConnections = Atomic<Int>(0)

    init(maxBytesPerSecond: Int64?) {
        bandwidth = TokenBucket(bytesPerSecond: maxBytesPerSecond)
    }

    var isPausing: Bool { pausing.load(ordering: .acquiring) }
}
