import Synchronization

/// What the owner of a download (a ``DownloadQueue``) may change or ask of it while it runs: its own speed limit,
/// and whether stopping it is a pause. Shared by the owner and the download's run; every field is safe to read and
/// change from any thread, and none takes a lock: one is made per queued download, most of which never use it.
final class DownloadControl: Sendable {
    /// The download's own bandwidth limit (by its request, or set by its owner).
    private let limit: BandwidthLimit
    /// Whether stopping the download is a pause: asked by the owner before it cancels the download's task
    /// (``requestPause()``), then taken by the run as it stops (``takePause()``), or withdrawn by the owner
    /// (``withdrawPause()``). One atomic step each, so that a cancellation racing a pause either wins before the run
    /// keeps its partial, or learns that it did and has the partial discarded.
    private let pause = Atomic<UInt8>(PauseState.none)
    /// The extra connections of a segmented transfer open now (the download's own is not counted).
    let extraConnections = Atomic<Int>(0)
    /// The request the download ended with, when its owner gave it another while it waited (its handles' status then
    /// shows it rather than the request as added). A `Mutex` kept inside this object: no object of its own per
    /// download.
    private let endedRequest = Mutex<DownloadRequest?>(nil)

    init(maxBytesPerSecond: Int64?) {
        limit = BandwidthLimit(bytesPerSecond: maxBytesPerSecond)
    }

    private enum PauseState {
        static let none: UInt8 = 0
        static let requested: UInt8 = 1
        /// The run kept its partial (and the journal's record of its request) for the pause.
        static let taken: UInt8 = 2
    }

    /// Asks that the cancellation about to come is a pause.
    func requestPause() { pause.store(PauseState.requested, ordering: .releasing) }

    /// Called by the run that stops on a cancellation: `true` when the cancellation is a pause, which the run then
    /// keeps its partial for (as it would with ``Downloader/Configuration/keepsPartialOnCancel``), leaving the
    /// journal's record of the request as it is.
    func takePause() -> Bool {
        pause.compareExchange(
            expected: PauseState.requested, desired: PauseState.taken, ordering: .acquiringAndReleasing
        ).exchanged
    }

    /// Withdraws a pause (a cancellation wins over it, or the download is back in the waiting order): returns whether
    /// the run had already taken it, so that a partial was kept for it.
    func withdrawPause() -> Bool {
        pause.exchange(PauseState.none, ordering: .acquiringAndReleasing) == PauseState.taken
    }

    /// The download's own limit, once it has had one (its rate may be none now).
    var bandwidth: TokenBucket? { limit.current }

    /// Sets the download's own limit in bytes per second, or lifts it (`nil`).
    func setMaxBytesPerSecond(_ bytesPerSecond: Int64?) { limit.set(bytesPerSecond) }

    /// The limit in bytes per second, if there is one.
    var maxBytesPerSecond: Int64? { limit.bytesPerSecond }

    /// Keeps `request` as the one the download ended with.
    func end(with request: DownloadRequest) { endedRequest.withLock { $0 = request } }

    /// The request the download ended with, if its owner had replaced the one it was added with.
    var requestAtEnd: DownloadRequest? { endedRequest.withLock { $0 } }
}
