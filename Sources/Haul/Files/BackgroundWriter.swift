import DequeModule
import Dispatch
import Foundation
import HaulOperations

/// Writes a body's chunks to its partial file, and hashes them when a digest is asked for.
///
/// The first ``inlineLimit`` bytes are written on the receiving task as they come. Past that, writing moves to a
/// thread of its own, so that reading the network and writing the disk overlap (bench/compare, s1); that thread
/// writes the chunks one by one as they were read, while each is still in the processor's cache (gathering them into
/// larger writes made the copy into the page cache slower). At most ``maxPending`` bytes wait in memory: `write` suspends the
/// reader beyond that, which keeps memory bounded by back-pressure, not by file size (ARCHITECTURE.md,
/// "Invariants" 2).
final class BackgroundWriter: @unchecked Sendable {
    // unchecked Sendable: `queue` and `inlineBytes` are only touched by the one task that writes (the download's);
    // `file` and `digest` by that task until `queue` exists, then only on `queue` (or after `drain()`, when nothing
    // is queued); `state` is a Locked.

    /// Enough to cover the page cache's short stalls; a TLS chunk can hold more memory than its bytes, so more waiting
    /// is what takes peak RSS up on a fast link (bench/compare, s1s).
    static let maxPending = 2 << 20
    /// Bytes of a body written on the receiving task before writing moves to a thread: for a body this small the
    /// overlap gains less than handing each chunk over costs (bench/compare, s2w1 and s2w8).
    static let inlineLimit: Int64 = 4 << 20

    let file: PartialFile
    private var digest: RunningDigest
    private let algorithm: Digest.Algorithm?
    private let computesSHA256: Bool
    /// Where writes happen once the body has passed ``inlineLimit``; `nil` until then.
    private var queue: DispatchQueue?
    private var inlineBytes: Int64 = 0

    private struct State {
        var waiting = Deque<any ByteChunk>()
        /// Bytes handed over and not yet written.
        var pending = 0
        /// Whether the thread is writing (or about to): a chunk handed over then needs no new turn of the queue.
        var draining = false
        var failure: DownloadError?
        var waiters: [(limit: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = Locked(State())

    init(file: PartialFile, algorithm: Digest.Algorithm?, computesSHA256: Bool) {
        self.file = file
        self.algorithm = algorithm
        self.computesSHA256 = computesSHA256
        digest = RunningDigest(sha256: computesSHA256, also: algorithm)
    }

    /// A writer that continues `file`, a partial an earlier run left: when a digest is asked for, its bytes are read
    /// once to seed it, so the finished file is still verified as a whole.
    convenience init(
        resuming file: PartialFile, algorithm: Digest.Algorithm?, computesSHA256: Bool, url: URL
    ) throws(DownloadError) {
        self.init(file: file, algorithm: algorithm, computesSHA256: computesSHA256)
        guard !digest.isEmpty else { return }
        do {
            try digest.update(fileAt: file.path, count: file.size)
        } catch {
            throw DownloadError(
                .fileSystem, message: "cannot read the partial file '\(file.path)': \(error)", url: url,
                path: file.path, underlying: error)
        }
    }

    /// Writes `chunk`, or hands it to the writing thread. Throws the first write error (e.g. a full disk) seen so far.
    func write(_ chunk: any ByteChunk, url: URL) async throws(DownloadError) {
        try throwIfFailed()
        let queue: DispatchQueue
        if let existing = self.queue {
            queue = existing
        } else if inlineBytes + Int64(chunk.count) <= Self.inlineLimit {
            // Nothing is queued and one task writes: no lock needed.
            try file.write(chunk, url: url)
            chunk.withUnsafeBytes { digest.update($0) }
            inlineBytes += Int64(chunk.count)
            return
        } else {
            queue = DispatchQueue(label: "haul.writer")
            self.queue = queue
        }
        let turn = state.withLock { state -> Bool in
            state.waiting.append(chunk)
            state.pending += chunk.count
            defer { state.draining = true }
            return !state.draining
        }
        if turn { queue.async { [self] in drainWaiting(url: url) } }
        await waitUntil(pendingAtMost: Self.maxPending)
        try throwIfFailed()
    }

    /// On `queue`: writes what waits, in order, until nothing does.
    private func drainWaiting(url: URL) {
        while true {
            let next = state.withLock { state -> (any ByteChunk)? in
                if state.waiting.isEmpty { state.draining = false }
                return state.waiting.popFirst()
            }
            guard let chunk = next else { return }
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
    }

    /// Waits until everything handed over is on disk (not cancellable: a write in progress always ends soon, and
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
        // Nothing handed over (always so while writing inline): no checked continuation to make and resume at once,
        // and no lock either; `drain()` runs twice per download.
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
