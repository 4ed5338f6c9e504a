public import Foundation

extension DownloadQueue {
    /// Adds `request` and waits for its result. Cancelling the calling task cancels the download and returns once it
    /// has stopped, with ``DownloadError/Code/cancelled`` (or its result, if it had finished first); when another
    /// caller shares the download, which goes on for it, this call returns ``DownloadError/Code/cancelled`` at once.
    ///
    /// ```swift
    /// for url in urls {                        // one after another, stoppable at any point
    ///     try await queue.download(DownloadRequest(url: url, destination: .directory(dir)))
    /// }
    /// ```
    /// - Throws: ``DownloadError``; nothing of this download is left at its destination.
    @discardableResult
    public func download(_ request: DownloadRequest) async throws(DownloadError) -> DownloadResult {
        try await download(request, added: { _ in })
    }

    /// ``download(_:)``, telling `added` the download's handle as soon as it is in the queue.
    func download(
        _ request: DownloadRequest, added: (DownloadHandle) -> Void
    ) async throws(DownloadError) -> DownloadResult {
        let handle = add(request)
        added(handle)
        // This caller's outcome: the download's, which a cancellation ends (a file published before it stays, and
        // its result is returned). A download joined by another caller goes on for it, so this caller stops waiting
        // at once; nothing of it is this caller's alone.
        let mine = ResultBox<Outcome>()
        let forwarder = Task { mine.resolve(await handle.finalOutcome()) }
        // The outcome is awaited as a value: withTaskCancellationHandler does not carry typed throws.
        let outcome = await withTaskCancellationHandler {
            await mine.wait()
        } onCancel: {
            if !cancel([handle]).isEmpty {
                mine.resolve(.failure(DownloadError(.cancelled, message: "cancelled", url: request.url)))
            }
        }
        _ = forwarder  // ends with the download
        return try outcome.get()
    }

    /// Adds every request and waits until all have ended; the results are in the order of `requests`.
    /// Cancelling the calling task cancels them all. With `FailurePolicy.cancelOthers` the first failure
    /// cancels the rest, which report ``DownloadError/Code/cancelled``.
    public func downloadAll(_ requests: [DownloadRequest]) async -> [Result<DownloadResult, DownloadError>] {
        let handles = add(requests)
        return await withTaskCancellationHandler {
            var results: [Result<DownloadResult, DownloadError>] = []
            results.reserveCapacity(handles.count)
            for handle in handles { results.append(await handle.finalOutcome()) }
            return results
        } onCancel: {
            cancel(handles)
        }
    }

    /// Downloads `urls` into `directory` (names from the URLs, made safe), results in the order of `urls`.
    public func download(
        _ urls: [URL], into directory: URL, conflictPolicy: ConflictPolicy = .fail
    ) async -> [Result<DownloadResult, DownloadError>] {
        await downloadAll(
            urls.map { DownloadRequest(url: $0, destination: .directory(directory), conflictPolicy: conflictPolicy) })
    }
}
