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
    private let downloader: Downloader
    private let onEvent: (@Sendable (DownloadEvent) -> Void)?

    /// Creates an operation that downloads `request` with `downloader` when a queue starts it.
    public init(
        _ request: DownloadRequest, downloader: Downloader, name: String? = nil,
        onEvent: (@Sendable (DownloadEvent) -> Void)? = nil
    ) {
        self.request = request
        self.downloader = downloader
        self.onEvent = onEvent
        super.init(name: name ?? request.url.absoluteString)
    }

    /// Starts the download; called by the queue.
    public override func execute() {
        let task = Task { [request, downloader, onEvent] in
            do {
                finish(returning: try await downloader.download(request, onEvent: onEvent))
            } catch {
                finish(throwing: error)
            }
        }
        onCancel { task.cancel() }
    }
}
