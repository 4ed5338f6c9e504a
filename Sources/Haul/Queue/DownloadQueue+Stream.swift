extension DownloadQueue {
    /// Downloads the requests of an asynchronous sequence as the queue has room for them, and delivers each result
    /// as it finishes: for lists of any length, in memory that grows with `window`, not with the list.
    ///
    /// Nothing happens until the results are iterated. Iterating reads `requests` only while fewer than `window`
    /// of its downloads are held: added to the queue (waiting or running) or finished but not yet taken by the
    /// loop. So a slow loop holds the list back too, and the sequence is never read further ahead than `window`.
    /// The downloads are added in the sequence's order and the queue admits them as it admits any download: its
    /// limits (global and per host) and priorities hold, and ties start in the order read.
    ///
    /// Results come in the order downloads end, each with its request. When `requests` throws, no more are read:
    /// the downloads already added run to their end and are delivered, then the iteration throws that error.
    /// Cancelling the iterating task (or leaving the loop) cancels the downloads it still holds; once they have
    /// ended (their files handled as the downloader's configuration says), the iteration throws
    /// `CancellationError`. Iterate the results once: a second iteration reads `requests` again.
    ///
    /// ```swift
    /// let requests = lines.compactMap { URL(string: $0) }.map { DownloadRequest(url: $0, destination: .directory(dir)) }
    /// for try await finished in queue.downloads(requests) {      // `lines`: e.g. `FileHandle.bytes.lines`
    ///     if case .failure(let error) = finished.result { print("\(finished.request.url): \(error)") }
    /// }
    /// ```
    /// - Parameters:
    ///   - requests: the downloads, read as room frees up.
    ///   - window: how many of its downloads the iteration holds at most (at least 1). Below the queue's
    ///     ``DownloadQueue/Configuration/maxConcurrentDownloads`` it leaves slots idle; larger windows let
    ///     downloads of other hosts go ahead of ones waiting for a per-host slot. Each held download costs about
    ///     2 KB.
    public func downloads<Requests: AsyncSequence & Sendable>(
        _ requests: Requests, window: Int = 1024
    ) -> DownloadResults where Requests.Element == DownloadRequest {
        DownloadResults(window: max(1, window)) { run in await self.feed(run, from: requests) }
    }

    /// Downloads the requests of an asynchronous sequence as the queue has room for them, as
    /// ``downloads(_:window:)`` does, handing each result to `onResult` as its download ends; returns once every
    /// download read has ended and its result was handed over.
    ///
    /// `onResult` runs on the thread that ended the download, possibly on several at once: keep it short and
    /// thread-safe (the download its end lets start begins once it returns, so that with one slot results come in
    /// the order the downloads ran). Every download read gets its result, a cancelled one too. For a program that
    /// only counts or logs results, this costs no task switch per download, where a loop over
    /// ``downloads(_:window:)`` waits for each result (bench/compare, list rows: the `haul get` command runs this
    /// way).
    /// - Throws: the error `requests` threw (after every download read before it has ended), or
    ///   `CancellationError` when the calling task was cancelled (once the downloads it held have ended).
    public func download<Requests: AsyncSequence & Sendable>(
        _ requests: Requests, window: Int = 1024, onResult: @escaping @Sendable (FinishedDownload) -> Void
    ) async throws where Requests.Element == DownloadRequest {
        let run = StreamRun(window: max(1, window), sink: onResult)
        run.start { run in await self.feed(run, from: requests) }
        let closer = StreamRun.Closer(run)
        while try await run.next() != nil {}
        withExtendedLifetime(closer) {}
    }

    /// Reads `requests` into the queue as `run` has room.
    private func feed<Requests: AsyncSequence & Sendable>(
        _ run: StreamRun, from requests: Requests
    ) async where Requests.Element == DownloadRequest {
        var iterator = requests.makeAsyncIterator()
        var listing = DestinationSnapshot.Listing()
        do {
            // Room is taken before reading, so the sequence is never read ahead of the window.
            reading: while true {
                let room = await run.reserve()
                guard room > 0 else { break }
                for _ in 0..<room {
                    guard !Task.isCancelled, let request = try await iterator.next() else { break reading }
                    run.track(add(request, absentPath: listing.absentPath(of: request)))
                }
            }
        } catch {
            run.sourceFailed(error)
        }
        run.feederEnded()
    }
}

/// A download that ended, as ``DownloadQueue/downloads(_:window:)`` delivers it.
public struct FinishedDownload: Sendable {
    /// Its identity in the queue.
    public let id: DownloadID
    /// The request as read from the sequence.
    public let request: DownloadRequest
    /// What came of it: the result, or the error it failed with.
    public let result: Result<DownloadResult, DownloadError>
}

/// The results of ``DownloadQueue/downloads(_:window:)``, in the order the downloads end. Iterating it runs the
/// downloads; see that method.
public struct DownloadResults: AsyncSequence, Sendable {
    /// One ended download.
    public typealias Element = FinishedDownload
    /// The sequence's own error, or `CancellationError`.
    public typealias Failure = any Error

    let window: Int
    let feed: @Sendable (StreamRun) async -> Void

    init(window: Int, feed: @escaping @Sendable (StreamRun) async -> Void) {
        self.window = window
        self.feed = feed
    }

    /// Starts the downloads.
    public func makeAsyncIterator() -> Iterator {
        let run = StreamRun(window: window)
        run.start(feed)
        return Iterator(run: run, closer: StreamRun.Closer(run))
    }

    /// Takes the results one at a time, making room for the next download as each is taken.
    public struct Iterator: AsyncIteratorProtocol {
        let run: StreamRun
        /// Ends the run when the loop lets go of the iterator before the end.
        let closer: StreamRun.Closer

        /// The next ended download; `nil` once every download read has been delivered.
        /// - Throws: the error the request sequence threw (after every earlier result), or `CancellationError`
        ///   when the iterating task was cancelled.
        public mutating func next() async throws -> FinishedDownload? {
            try await run.next()
        }
    }
}
