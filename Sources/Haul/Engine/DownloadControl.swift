import Synchronization

/// What the owner of a download (a ``DownloadQueue``) may change or ask of it while it runs: its own speed limit,
/// and whether stopping it is a pause. Shared by the owner and the download's run; every field is safe to read and
/// change from any thread, and none takes a lock: one is made per queued download, most of which never use it.
final class DownloadControl: Sendable {
    /// The download's own bandwidth limit, made when it first has one (by its request, or set by its owner).
    private let limit = AtomicLazyReference<TokenBucket>()
    /// Set before the download's task is cancelled to pause it: the run keeps its partial as it would with
    /// ``Downloader/Configuration/keepsPartialOnCancel``, and leaves the journal's record of the request as it is.
    let pausing = Atomic<Bool>(false)
    /// The extra connections of a segmented transfer open now (the download's own is not counted).
    let extraConnections = Atomic<Int>(0)

    init(maxBytesPerSecond: Int64?) {
        if let maxBytesPerSecond { _ = limit.storeIfNil(TokenBucket(bytesPerSecond: maxBytesPerSecond)) }
    }

    var isPausing: Bool { pausing.load(ordering: .acquiring) }

    /// The download's own limit, once it has had one (its rate may be none now).
    var bandwidth: TokenBucket? { limit.load() }

    /// Sets the download's own limit in bytes per second, or lifts it (`nil`).
    func setMaxBytesPerSecond(_ bytesPerSecond: Int64?) {
        if bytesPerSecond == nil, limit.load() == nil { return }
        limit.storeIfNil(TokenBucket(bytesPerSecond: nil)).setRate(bytesPerSecond)
    }

    /// The limit in bytes per second, if there is one.
    var maxBytesPerSecond: Int64? { limit.load()?.bytesPerSecond }
}
