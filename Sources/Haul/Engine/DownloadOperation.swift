import Foundation
public import HaulOperations

/// One download as an `Operation`: it stays executing until the file is published (or the download failed),
/// so a queue of width 1 downloads strictly one file after another, and a completion operation that depends
/// on the downloads runs after the last one.
///
/// ```swift
/// let queue = OperationQueue()
/// queue.maxConcurrentOperationCount = 1
/// let downloads = urls.map { DownloadOperation(DownloadRequest(url: $0, destination: .directory(dir)),
///                                              downloader: downloader) }
/// let group = OperationGroup(downloads)
/// group.onMemberFinished = { done, total in print("\(done) / \(total) files downloaded") }
/// queue.addOperations(downloads + [group.completionOperation { print("all done") }])
/// ```
///
/// Its result is the ``DownloadResult`` or the ``DownloadError``; cancelling the operation cancels the transfer
/// and leaves nothing at the destination. Progress and other events go to `onEvent`.
public final class DownloadOperation: ResultOperation<DownloadResult>, @unchecked Sendable {
    // unchecked Sendable: immutable lets of Sendable types; the rest of the state is in the base classes.

    /// The request this operation downloads.
    public let request: DownloadRequest
    private let perform:
        @Sendable (_ added: @Sendable (DownloadHandle) -> Void) async throws(DownloadError) -> DownloadResult
    private let added = Locked<DownloadHandle?>(nil)

    /// The download in its ``DownloadQueue``, once the operation has started and added it (operations made with
    /// ``init(_:queue:name:)`` only): to pause, resume, move it, change its speed limit or read its status while the
    /// operation runs. A paused download keeps its operation executing until it is resumed and ends.
    public var handle: DownloadHandle? { added.withLock { $0 } }

    /// Creates an operation that downloads `request` with `downloader` when a queue starts it.
    public init(
        _ request: DownloadRequest, downloader: Downloader, name: String? = nil,
        onEvent: (@Sendable (DownloadEvent) -> Void)? = nil
    ) {
        self.request = request
        perform = { _ async throws(DownloadError) -> DownloadResult in
            try await downloader.download(request, onEvent: onEvent)
        }
        super.init(name: name ?? request.url.redactedString)
    }

    /// Creates an operation that, when an `OperationQueue` starts it, adds `request` to `queue` and finishes
    /// when that download ends: the operation takes part in dependencies and completion operations, while the
    /// download queue's global and per-host limits still apply. Events go to ``DownloadQueue/events``.
    ///
    /// ```swift
    /// let fetch = DownloadOperation(request, queue: downloads)
    /// let unzip = AsyncBlockOperation(name: "unzip", consuming: fetch) { result in try unzip(result.fileURL) }
    /// operationQueue.addOperations([fetch, unzip])
    /// ```
    public init(_ request: DownloadRequest, queue: DownloadQueue, name: String? = nil) {
        self.request = request
        perform = { added async throws(DownloadError) -> DownloadResult in
            try await queue.download(request, added: added)
        }
        super.init(name: name ?? request.url.redactedString)
    }

    /// Starts the download; called by the queue.
    public override func execute() {
        let task = Task { [perform, added] in
            do {
                finish(returning: try await perform { handle in added.withLock { $0 = handle } })
            } catch {
                finish(throwing: error)
            }
        }
        onCancel { task.cancel() }
    }
}

extension DownloadQueue {
    /// One ``DownloadOperation`` per request, running through this queue, in the same order.
    ///
    /// ```swift
    /// let downloads = queue.operations(for: requests)
    /// let group = OperationGroup(downloads)
    /// group.onMemberFinished = { done, total in print("\(done) / \(total) files downloaded") }
    /// operationQueue.addOperations(downloads + [group.completionOperation { print("all done") }])
    /// ```
    public func operations(for requests: [DownloadRequest]) -> [DownloadOperation] {
        requests.map { DownloadOperation($0, queue: self) }
    }
}

/// A cancelled download's error is a cancellation to ``OperationGroup`` and to a consumer of a `DownloadOperation`,
/// not a failure.
extension DownloadError: CancellationReporting {}
