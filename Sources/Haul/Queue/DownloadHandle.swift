import HaulOperations

/// One download added to a ``DownloadQueue``: await its result, follow its events, cancel, pause or resume it,
/// change its priority or place while it waits and its speed limit while it runs, read where it stands.
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
    /// The download's control, which keeps the request it ended with when its owner replaced the one added.
    private let control: DownloadControl
    private let cancelled = Locked(false)

    init(
        id: DownloadID, request: DownloadRequest, box: ResultBox<DownloadQueue.Outcome>, control: DownloadControl,
        queue: DownloadQueue
    ) {
        self.id = id
        self.request = request
        self.box = box
        self.control = control
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

    /// This download's events from now on, ending with `.finished` or `.failed` (at once if it has ended), or
    /// earlier when ``DownloadQueue/finishEvents()`` ends every sequence (the outcome is then in ``outcome`` or
    /// ``result``).
    public var events: AsyncStream<DownloadEvent> { queue.events(of: id, box: box) }

    /// Cancels the download: a waiting one never starts, a running one stops and leaves nothing at its
    /// destination. When duplicates were joined, the transfer stops only once every handle has cancelled.
    /// Calling it again through the same handle does nothing.
    public func cancel() {
        if markCancelled() { queue.cancel(id) }
    }

    /// Notes that this handle cancelled its download; `false` when it had already.
    func markCancelled() -> Bool {
        cancelled.withLock { wasCancelled in
            defer { wasCancelled = true }
            return !wasCancelled
        }
    }

    /// Changes the priority of a waiting download (higher starts first; it goes behind others of the new
    /// priority). Returns `false` when it is no longer waiting.
    @discardableResult
    public func setPriority(_ priority: Int) -> Bool {
        queue.setPriority(priority, of: id)
    }

    /// Pauses the download (``DownloadQueue/pause(_:)``); `false` once it has ended.
    @discardableResult
    public func pause() -> Bool { queue.pause(id) }

    /// Resumes the paused download (``DownloadQueue/resume(_:)``); `false` once it has ended.
    @discardableResult
    public func resume() -> Bool { queue.resume(id) }

    /// Moves the waiting or paused download in the waiting order (``DownloadQueue/move(_:toPosition:)``); returns its
    /// new position, or `nil` when it is not waiting or paused.
    @discardableResult
    public func move(toPosition position: Int) -> Int? { queue.move(id, toPosition: position) }

    /// Sets or lifts the download's own speed limit, also while it runs
    /// (``DownloadQueue/setMaxBytesPerSecond(_:of:)``); `false` once it has ended.
    @discardableResult
    public func setMaxBytesPerSecond(_ limit: Int64?) -> Bool { queue.setMaxBytesPerSecond(limit, of: id) }

    /// Where the download stands: waiting, running or paused (``DownloadQueue/status(of:)``), or finished, with its
    /// outcome.
    public var status: DownloadStatus {
        if let status = queue.status(of: id) { return status }
        // Not in the queue: it has ended (the outcome is stored before the entry goes, under the queue's lock).
        let outcome = box.value
        var status = DownloadStatus(
            id: id, request: control.requestAtEnd ?? request, state: .finished, outcome: outcome)
        switch outcome {
        case .success(let result)?:
            status.progress = DownloadProgress(bytesWritten: result.size, totalBytes: result.size, bytesPerSecond: 0)
        case .failure(let error)?:
            // How far its last attempt got.
            status.progress = DownloadProgress(
                bytesWritten: error.bytesReceived ?? 0, totalBytes: error.totalBytes, bytesPerSecond: 0)
        case nil:
            break
        }
        return status
    }
}
