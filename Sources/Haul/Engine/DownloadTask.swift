import Foundation

/// A download running in its own task: its events as an `AsyncSequence`, its result, and `cancel()`.
///
/// ```swift
/// let task = downloader.start(request)
/// for await event in task.events {
///     if case .progress(let progress) = event { print(progress.bytesWritten) }
/// }
/// let result = try await task.result
/// ```
public final class DownloadTask: Sendable {
    /// The request being downloaded.
    public let request: DownloadRequest
    /// Every event of the download, ending after `.finished` or `.failed`. Events are buffered until read;
    /// progress events come at most every ``Downloader/Configuration/progressInterval``.
    public let events: AsyncStream<DownloadEvent>
    private let task: Task<DownloadResult, any Error>

    init(request: DownloadRequest, downloader: Downloader) {
        self.request = request
        let (stream, continuation) = AsyncStream<DownloadEvent>.makeStream(bufferingPolicy: .unbounded)
        events = stream
        task = Task(executorPreference: downloader.preferredExecutor(for: request)) {
            defer { continuation.finish() }
            return try await downloader.download(request) { event in continuation.yield(event) }
        }
    }

    /// The result, once the download has ended.
    /// - Throws: ``DownloadError`` (``DownloadError/Code/cancelled`` after ``cancel()``).
    public var result: DownloadResult {
        get async throws(DownloadError) {
            do {
                return try await task.value
            } catch let error as DownloadError {
                throw error
            } catch {
                throw DownloadError(.cancelled, message: "cancelled", url: request.url)
            }
        }
    }

    /// Cancels the download: the transfer stops and no file is left at the destination.
    public func cancel() {
        task.cancel()
    }
}
