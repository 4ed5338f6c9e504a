import Foundation

/// Identifies one download in a ``DownloadQueue`` (joined duplicates share one).
public struct DownloadID: Hashable, Sendable, Comparable, CustomStringConvertible {
    let rawValue: UInt64

    /// The number: 1 for the queue's first download, then counting up in the order added.
    public var number: UInt64 { rawValue }

    /// `#N`, numbered in the order downloads were added.
    public var description: String { "#\(rawValue)" }

    /// Earlier-added downloads sort first.
    public static func < (lhs: DownloadID, rhs: DownloadID) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Something that happened in a ``DownloadQueue``: what a progress display draws from.
public enum QueueEvent: Sendable {
    /// A download was added; it waits for a slot.
    case queued(DownloadID, DownloadRequest)
    /// Something happened to one download: started, progress, redirected, retrying, finished or failed.
    /// A cancellation is `.failed` with ``DownloadError/Code/cancelled``.
    case download(DownloadID, DownloadEvent)
    /// The batch's counters (throttled to ``DownloadQueue/Configuration/progressInterval``; a last one
    /// always follows the end of the batch).
    case batchProgress(BatchProgress)
}

extension DownloadQueue {
    /// Every event from now on, in one order for all subscribers. Each access makes a new subscription, which
    /// ends when the sequence's consumer stops iterating (or the queue is gone). Events are buffered until
    /// read, so a slow reader misses nothing.
    ///
    /// ```swift
    /// for await event in queue.events {
    ///     switch event {
    ///     case .download(let id, .progress(let progress)): draw(id, progress)
    ///     case .batchProgress(let batch): drawTotals(batch)
    ///     default: break
    ///     }
    /// }
    /// ```
    public var events: AsyncStream<QueueEvent> {
        let (stream, continuation) = AsyncStream<QueueEvent>.makeStream(bufferingPolicy: .unbounded)
        let key = state.withLock { state in
            state.nextSubscriber += 1
            state.subscribers[state.nextSubscriber] = continuation
            return state.nextSubscriber
        }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { _ = $0.subscribers.removeValue(forKey: key) }
        }
        return stream
    }

    /// The events of one download, ending with its `.finished` or `.failed`. Subscribes now: events before
    /// this call are not repeated, but the sequence ends at once if the download has already ended.
    func events(of id: DownloadID, box: ResultBox<Outcome>) -> AsyncStream<DownloadEvent> {
        let all = events
        return AsyncStream { continuation in
            let forwarder = Task {
                if let outcome = box.value {
                    continuation.yield(outcome.terminalEvent)
                    continuation.finish()
                    return
                }
                for await event in all {
                    guard case .download(id, let downloadEvent) = event else { continue }
                    continuation.yield(downloadEvent)
                    if downloadEvent.isTerminal { break }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in forwarder.cancel() }
        }
    }
}

extension Result where Success == DownloadResult, Failure == DownloadError {
    var terminalEvent: DownloadEvent {
        switch self {
        case .success(let result): .finished(result)
        case .failure(let error): .failed(error)
        }
    }
}

extension DownloadEvent {
    /// `.finished` or `.failed`: nothing follows it.
    package var isTerminal: Bool {
        switch self {
        case .finished, .failed: true
        default: false
        }
    }
}
