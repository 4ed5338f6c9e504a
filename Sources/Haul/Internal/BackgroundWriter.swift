import Dispatch
import Foundation
import HaulOperations

/// Writes body chunks (and hashes them, when a digest is asked for) on a thread of its own, so that reading the network and writing the disk
/// overlap (the engine otherwise alternates between the two: bench/compare, s1).
/// At most `maxPending` bytes wait in memory: `write` suspends the reader beyond that, which keeps memory
/// bounded by back-pressure, not by file size (ARCHITECTURE.md, "Invariants" 2).
final class BackgroundWriter: @unchecked Sendable {
    // unchecked Sendable: `file` and `digest` are only touched on `queue` (or after `drain()`, when nothing is
    // queued; or, with no queue, by the one task that writes); `state` is a Locked.

    /// Enough to cover the page cache's short stalls; a TLS chunk can hold more memory than its bytes, so more waiting
    /// is what takes peak RSS up on a fast link (bench/compare, s1s).
    static let maxPending = 2 << 20
    /// Bodies known to be at most this large are written inline on the receiving task: for them the overlap
    /// gains nothing and the thread hop per chunk would be most of the engine's own cost (bench/compare, s3).
    static let inlineLimit: Int64 = 256 << 10

    let file: PartialFile
    private var digest: RunningDigest
    private let algorithm: Digest.Algorithm?
    private let computesSHA256: Bool
    /// Where writes happen; `nil` when they happen on the caller (see ``inlineLimit``): making a queue for every
    /// small file that never gave it work showed in profiles of batches of 4 KiB files.
    private let queue: DispatchQueue?

    private struct State {
        var pending = 0
        var failure: DownloadError?
        var waiters: [(limit: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = Locked(State())

    init(file: PartialFile, algorithm: Digest.Algorithm?, computesSHA256: Bool, expectedSize: Int64?) {
        self.file = file
        self.algorithm = algorithm
        self.computesSHA256 = computesSHA256
        let inline = expectedSize.map { $0 <= Self.inlineLimit } ?? false
        queue = inline ? nil : DispatchQueue(label: "haul.writer")
        digest = RunningDigest(sha256: computesSHA256, also: algorithm)
    }

    /// A writer that continues `file`, a partial an earlier run left: when a digest is asked for, its bytes are read
    /// once to seed it, so the finished file is still verified as a whole.
    convenience init(
        resuming file: PartialFile, algorithm: Digest.Algorithm?, computesSHA256: Bool, expectedSize: Int64?, url: URL
    ) throws(DownloadError) {
        self.init(file: file, algorithm: algorithm, computesSHA256: computesSHA256, expectedSize: expectedSize)
        guard !digest.isEmpty else { return }
        do {
            try digest.update(fileAt: file.path, count: file.size)
        } catch {
            throw DownloadError(
                .fileSystem, message: "cannot read the partial file '\(file.path)': \(error)", url: url,
                path: file.path, underlying: error)
        }
    }

    /// Queues `chunk` to be written and hashed. Throws the first write error (e.g. a full disk) seen so far.
    func write(_ chunk: any ByteChunk, url: URL) async throws(DownloadError) {
        try throwIfFailed()
        guard let queue else {
            // One task writes at a time (the download's), and nothing is ever queued, so no lock is needed.
            try file.write(chunk, url: url)
            chunk.withUnsafeBytes { digest.update($0) }
            return
        }
        state.withLock { $0.pending += chunk.count }
        queue.async { [self] in
            var failure: DownloadError?
            if state.withLock({ $0.failure }) == nil {
                do throws(DownloadError) {
                    try file.write(chunk, url: url)
                    chunk.withUnsafeBytes { digest.update($0) }
                } catch {
                    failure = error
                }
            }
            let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.pending -= chunk.count
                if let failure, state.failure == nil { state.failure = failure }
                let pending = state.pending
                let ready = state.waiters.filter { pending <= $0.limit }.map(\.continuation)
                state.waiters.removeAll { pending <= $0.limit }
                return ready
            }
            for continuation in ready { continuation.resume() }
        }
        await waitUntil(pendingAtMost: Self.maxPending)
        try throwIfFailed()
    }

    /// Waits until everything queued is on disk (not cancellable: a write in progress always ends soon, and
    /// the caller must not touch the file before it has).
    func drain() async throws(DownloadError) {
        await waitUntil(pendingAtMost: 0)
        try throwIfFailed()
    }

    /// Empties the file and the digest, for an attempt that starts over.
    func restart(url: URL) async throws(DownloadError) {
        try await drain()
        let result: Result<Void, DownloadError> = serialized {
            do throws(DownloadError) {
                try file.truncate(url: url)
                digest = RunningDigest(sha256: computesSHA256, also: algorithm)
                return .success(())
            } catch {
                return .failure(error)
            }
        }
        try result.get()
    }

    /// Bytes on disk (call after ``drain()`` for an exact figure).
    var size: Int64 { serialized { file.size } }

    /// The digests of everything written (call after ``drain()``).
    func finalizeDigest() -> (sha256: [UInt8]?, requested: [UInt8]?) {
        serialized { digest.finalize(for: algorithm) }
    }

    /// `body` on the queue, or right here when there is none.
    private func serialized<Value>(_ body: () -> Value) -> Value {
        if let queue { queue.sync(execute: body) } else { body() }
    }

    private func throwIfFailed() throws(DownloadError) {
        if let failure = state.withLock({ $0.failure }) { throw failure }
    }

    private func waitUntil(pendingAtMost limit: Int) async {
        // Nothing queued (always so for an inline writer): no checked continuation to make and resume at once, and
        // for an inline writer no lock either; `drain()` runs twice per download.
        if queue == nil || state.withLock({ $0.pending <= limit }) { return }
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.pending <= limit { return true }
                state.waiters.append((limit, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }
}
