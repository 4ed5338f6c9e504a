import HaulOperations

/// One download added to a ``DownloadQueue``: await its result, follow its events, cancel it or change its
/// priority while it waits.
///
/// ```swift
/// let handle = queue.add(DownloadRequest(url: url, destination: .directory(dir)))
/// handle.setPriority(10)                                   // jump ahead while it waits
/// let result = try await handle.result
/// ```
public final class DownloadHandle: Sendable {
    /// The download's identity in its queue (shared by joined duplicates).
    public let id: DownloadID
    /// The request as added.
    public let request: DownloadRequest
    /// The queue it belongs to.
    public let queue: DownloadQueue
    private let box: ResultBox<DownloadQueue.Outcome>
    private let cancelled = Locked(false)

    init(id: DownloadID, request: DownloadRequest, box: ResultBox<DownloadQueue.Outcome>, queue: DownloadQueue) {
        self.id = id
        self.request = request
        self.box = box
        self.queue = queue
    }

    /// The result, once the download has ended. Like `Task.value`, cancelling the awaiting task does not
    /// cancel the download; call ``cancel()`` for that (``DownloadQueue/download(_:)`` does both).
    /// - Throws: ``DownloadError`` (``DownloadError/Code/cancelled`` after a cancellation).
    public var result: DownloadResult {
        get async throws(DownloadError) {
            try await box.wait().get()
        }
    }

    /// Waits for the download to end and returns how it ended.
    func finalOutcome() async -> DownloadQueue.Outcome { await box.wait() }

    /// Calls `body` with how the download ended, once it has (never under the queue's lock).
    func whenEnded(_ body: @escaping @Sendable (DownloadQueue.Outcome) -> Void) { box.whenResolved(body) }

    /// The result if the download has ended, else `nil`.
    public var outcome: Result<DownloadResult, DownloadError>? { box.value }

    /// This download's events from now on, ending with `.finished` or `.failed` (at once if it has ended).
    public var events: AsyncStream<DownloadEvent> { queue.events(of: id, box: box) }

    /// Cancels the download: a waiting one never starts, a running one stops and leaves nothing at its
    /// destination. When duplicates were joined, the transfer stops only once every handle has cancelled.
    /// Calling it again through the same handle does nothing.
    public func cancel() {
        let first = cancelled.withLock { wasCancelled in
            defer { wasCancelled = true }
            return !wasCancelled
        }
        if first { queue.cancel(id) }
    }

    /// Changes the priority of a waiting download (higher starts first; it goes behind others of the new
    /// priority). Returns `false` when it is no longer waiting.
    @discardableResult
    public func setPriority(_ priority: Int) -> Bool {
        queue.setPriority(priority, of: id)
    }
}
