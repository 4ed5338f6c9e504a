import Foundation
import HTTPTypes
import HaulOperations
import Logging
import Synchronization

/// The shared state of one file fetched over several connections: the partial file, written in place, and behind a
/// lock the segment table, the sources (the request's URL and its mirrors) and what each connection is doing.
final class SegmentedTransfer: @unchecked Sendable {
    // unchecked Sendable: `file` is only used for positional writes, which the kernel orders (each connection
    // writes its own bytes), and by the run's task once every connection has ended; the rest is behind `state`.

    let file: PartialFile
    let total: Int64
    /// The most bytes one request of a connection asks for.
    let pieceSize: Int64

    /// A URL the file is fetched from.
    struct Source {
        /// Where requests go (the URL given, or where it redirected to), with the fields and credential rules the
        /// hops that led there left (``Hops``).
        var hops: Hops
        var url: URL { hops.url }
        /// The URL given (the request's URL or a mirror), for messages.
        let given: URL
        /// The validator this source gave for the file (the request's URL: the first response's), sent with
        /// `If-Range`: a source that changed answers with the whole file instead of a range.
        var validator: String?
        /// Why it is no longer used, once dropped.
        var dropped: String?
        var connections = 0
        var isPrimary: Bool
        /// Body bytes written from it.
        var bytes: Int64 = 0
        /// Failed requests in a row, over all its connections.
        var failures = 0
    }

    /// What one connection is doing, for telling a slow source from a fast one.
    struct Connection {
        var source: Int
        var segment: Int?
        var since: ContinuousClock.Instant
        var bytes: Int64 = 0

        /// Bytes per second since it started, once it has run long enough for that to say something.
        func speed(now: ContinuousClock.Instant) -> Double? {
            let elapsed = (now - since).seconds
            return elapsed >= 2 ? Double(bytes) / elapsed : nil
        }
    }

    struct State {
        var table: SegmentTable
        var sources: [Source]
        var connections: [Int: Connection] = [:]
        var meter: ProgressMeter
        /// Bytes written since the journal last recorded the missing ranges.
        var unrecorded: Int64 = 0
        /// The primary source's `Last-Modified`, for a transfer resumed from the journal (no first response).
        var lastModified: String?
        /// Connections waiting for a slot, cancelled once a connection finds nothing left to take: a download must
        /// not hold its own slot waiting for extra ones that have no work (two such downloads would wait for each
        /// other's slots).
        var waiting: [Int: Task<(@Sendable () -> Void)?, Never>] = [:]
        var noMoreWork = false
        /// When the current run of the connections began, and the bytes written then: how fast the file comes.
        var runStart: (time: ContinuousClock.Instant, written: Int64) = (.now, 0)
        /// Set when the stream that started the file found it slow enough: more connections open at once.
        var worthMore = false
        /// Whether the primary has vouched for the bytes held. A transfer resumed from an earlier run's bytes has
        /// only their validator, the primary's: until a range from the primary is accepted against it, nothing says
        /// that the mirrors (whose validators are their own) have that version, and a primary dropped before then
        /// gives the segments up rather than leave the held bytes to be completed from a mirror.
        var primaryVouched = true

        /// The progress the written bytes make, to tell.
        var progress: DownloadProgress {
            DownloadProgress(bytesWritten: table.written, totalBytes: table.total, bytesPerSecond: meter.bytesPerSecond)
        }
    }

    let state: Locked<State>

    /// A transfer into `file` of what `table` says is missing, from `sources`, a request at most `pieceSize` bytes.
    init(file: PartialFile, table: SegmentTable, sources: [Source], pieceSize: Int64, meter: ProgressMeter) {
        self.file = file
        total = table.total
        self.pieceSize = pieceSize
        state = Locked(State(table: table, sources: sources, meter: meter))
    }

    var missing: [Range<Int64>] { state.withLock { $0.table.missing } }
    var written: Int64 { state.withLock { $0.table.written } }
    var isComplete: Bool { state.withLock { $0.table.isComplete } }
}

/// The rest of a response whose first bytes came as one stream, handed over to the first connection of the segments:
/// read from where the stream stopped.
final class BodyRest: @unchecked Sendable {
    // unchecked Sendable: one task at a time iterates it (the stream's, then the first connection's).
    let body: ResponseBody
    var chunks: ResponseBody.AsyncIterator

    init(_ body: ResponseBody, _ chunks: ResponseBody.AsyncIterator) {
        self.body = body
        self.chunks = chunks
    }
}

/// What the connections of a segmented transfer tell the run's task, which alone emits events and writes the journal.
enum SegmentNote: Sendable {
    case event(DownloadEvent)
    /// Enough bytes were written since the journal last recorded the missing ranges.
    case checkpoint
}

/// Why a segmented transfer ends before its file is whole, found by one of its connections and carried up to the run
/// as a value.
enum SegmentsStop: Sendable {
    /// The file changed on the server, or the primary source sends no ranges after all: the download goes on as one
    /// stream from zero.
    case abandon(because: String)
    /// The sources disagree about the file: the download fails.
    case disagree(DownloadError)
}

/// One connection of a segmented transfer, as its functions see it: its number, the transfer, and the stream it tells
/// the run's task what happens on.
struct ConnectionContext: Sendable {
    let index: Int
    let transfer: SegmentedTransfer
    let sink: AsyncStream<SegmentNote>.Continuation
    /// The queue slot its requests count against: the download's own for the first connection; `nil` for another
    /// without a queue.
    let slot: DownloadRun.SlotToMove?

    /// Tells the run's task, which alone emits events.
    @Sendable func tell(_ event: DownloadEvent) { sink.yield(.event(event)) }
}

/// What a connection works on: a segment, from a source.
struct SegmentWork {
    var segment: Int
    var source: Int
    /// The source's URL when the connection took the segment.
    var url: URL
    /// Where the segment started then (its `.finished` event's range starts there).
    var start: Int64
}

/// The queue slot an extra connection of a segmented transfer holds, at the origin it fetches from: a redirect to
/// another host moves it there, as it moves the download's own.
final class ConnectionSlot: Sendable {
    private struct Held {
        var origin: String
        var release: (@Sendable () -> Void)?
    }
    private let held: Locked<Held>

    /// A slot granted at the origin of `url`; `release` gives it back.
    init(at url: URL, release: @escaping @Sendable () -> Void) {
        held = Locked(Held(origin: DownloadQueue.originKey(for: url), release: release))
    }

    /// Moves the slot to the origin of `url` unless it counts there already: gives it back, then waits for one there
    /// (it never holds one slot while it waits for another), a wait that is no stall for `watched`. Returns `false`
    /// when the task was cancelled first, the slot then given back.
    func move(to url: URL, through broker: any ConnectionBroker, watched: ActivityClock) async -> Bool {
        let origin = DownloadQueue.originKey(for: url)
        let given = held.withLock { held -> (@Sendable () -> Void)?? in
            guard held.origin != origin else { return .none }
            defer { held.release = nil }
            return .some(held.release)
        }
        guard let given else { return true }
        given?()
        watched.setStallsWatchedElsewhere(true)
        defer { watched.setStallsWatchedElsewhere(false) }
        guard let release = await broker.acquire(for: url) else { return false }
        held.withLock { $0 = Held(origin: origin, release: release) }
        return true
    }

    /// Gives the slot back (once).
    func release() {
        held.withLock { held in
            defer { held.release = nil }
            return held.release
        }?()
    }
}
