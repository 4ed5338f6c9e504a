import Foundation
import Haul

/// What happened to a download while it ran, for a look at one download (the dashboard's detail):
/// `haul.tellDetail`.
extension Daemon {
    /// The events a trail keeps: those worth a look, not every progress report.
    static let trailKinds: Set<QueueEvent.Kind> = [
        .started, .redirected, .retrying, .throttled, .segment, .sourceDropped, .finished, .failed, .paused, .resumed,
    ]

    /// A download's noteworthy events (retries, redirects, dropped sources, waits a host asked for, failed
    /// connections), its segments when it is fetched over several connections, and the sources that sent its bytes.
    /// Kept in memory while the download is: a download read back from the store (after a restart, or long stopped)
    /// has none, nor has one nothing happened to but its start and end (its status says all).
    struct Trail {
        struct Event {
            /// When it happened (the wall clock, to be shown).
            var time: Date
            var kind: String
            var message: String
        }

        struct Segment {
            var connection: Int
            var range: Range<Int64>
            var source: String
            /// `running`, `done` or `failed`.
            var state: String
        }

        /// The newest ``limit`` events, oldest first.
        var events: [Event] = []
        var segments: [Segment] = []
        /// The source the next request goes to, as far as the events tell (credentials left out).
        var current: String?
        /// The sources that sent bytes of the file, in the order they first did (credentials left out).
        var servedBy: [String] = []

        /// The most events kept for one download.
        static let limit = 100

        mutating func note(_ kind: String, _ message: String) {
            events.append(Event(time: Date(), kind: kind, message: message))
            if events.count > Self.limit { events.removeFirst(events.count - Self.limit) }
        }

        mutating func served(by source: String) {
            if !servedBy.contains(source) { servedBy.append(source) }
        }

        /// Takes in `event`, about a download first sent to `firstSource`.
        mutating func record(_ event: DownloadEvent, firstSource: String) {
            if current == nil, !firstSource.isEmpty { current = firstSource }
            switch event {
            case .started(let attempt, let resumingAt):
                guard attempt > 1 || resumingAt > 0 else { return }
                note(
                    "started",
                    "attempt \(attempt) started" + (resumingAt > 0 ? ", resuming at byte \(resumingAt)" : ""))
            case .redirected(let from, let to, let status):
                current = to.redactedString
                note("redirected", "\(status) from \(from.redactedString) to \(to.redactedString)")
            case .retrying(let attempt, let delay, let error):
                // `attempt` is the one to come.
                note(
                    "retrying",
                    "attempt \(attempt - 1) failed: \(error.message); attempt \(attempt) in \(Self.seconds(delay))")
            case .throttled(let reason, let delay):
                // A host's own request to wait is worth a look; the run's own pacing is not news.
                guard reason == .retryAfter else { return }
                note("waiting", "the host asked for \(Self.seconds(delay)) (Retry-After)")
            case .sourceDropped(let url, let reason, let next):
                current = next.redactedString
                note("source dropped", "\(url.redactedString): \(reason); now \(next.redactedString)")
            case .segment(let segment):
                record(segment)
            case .finished(let result):
                if segments.isEmpty, let current { served(by: current) }
                note("finished", "\(result.size) bytes" + (result.notModified ? ", not modified" : ""))
            case .failed(let error):
                note("failed", error.message)
            default:
                break
            }
        }

        private mutating func record(_ event: SegmentEvent) {
            let source = event.url.redactedString
            let index = segments.firstIndex {
                $0.connection == event.connection && $0.range.lowerBound == event.range.lowerBound
            }
            switch event.change {
            case .started:
                let segment = Segment(
                    connection: event.connection, range: event.range, source: source, state: "running")
                if let index { segments[index] = segment } else { segments.append(segment) }
            case .finished:
                if let index { segments[index].state = "done" }
                served(by: source)
            case .failed(let error):
                if let index { segments[index].state = "failed" }
                note(
                    "connection failed",
                    "connection \(event.connection), bytes \(event.range.lowerBound)-\(event.range.upperBound - 1) "
                        + "from \(source): \(error.message)")
            case .sourceDropped(let reason):
                note("source dropped", "\(source): \(reason)")
            }
        }

        static func seconds(_ duration: Duration) -> String {
            let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
            return seconds < 10 ? String(format: "%.1f s", seconds) : String(format: "%.0f s", seconds)
        }
    }

    /// Takes `event` of the queue's download `id` into its trail (made for it on its first noteworthy event).
    static func recordTrail(_ event: DownloadEvent, of id: DownloadID, in state: Locked<State>) {
        if case .started(attempt: 1, resumingAt: 0) = event { return }
        state.withLock { state in
            guard let gid = state.byDownload[id], let item = state.items[gid] else { return }
            let first = item.uris.first.flatMap(URL.init(string:))?.redactedString ?? ""
            state.trails[gid, default: Trail()].record(event, firstSource: first)
        }
    }

    /// Notes `message` in the trail of the queue's download `id`, once it has started (a pause of thousands of
    /// downloads that never ran is no news about any of them).
    static func noteTrail(_ kind: String, _ message: String, of id: DownloadID, in state: Locked<State>) {
        state.withLock { state in
            guard let gid = state.byDownload[id], let item = state.items[gid], item.started else { return }
            state.trails[gid, default: Trail()].note(kind, message)
        }
    }

    /// `haul.tellDetail(gid)`: what happened to the download while it ran, as far as the daemon saw it since it
    /// started: `{"events": [{"time": ms since 1970, "kind", "message"}], "segments": [{"connection", "from", "to",
    /// "uri", "state"}], "servedBy": [URIs]}`, numbers as strings and no credentials in any URI.
    func tellDetail(_ arguments: Arguments) throws(RPCError) -> JSON {
        let gid = try gid(arguments)
        guard try item(gid) != nil else { throw RPCError("GID \(gid) is not found") }
        let trail = state.withLock { $0.trails[gid] } ?? Trail()
        return [
            "events": .array(
                trail.events.map { event in
                    [
                        "time": .string(String(Int64(event.time.timeIntervalSince1970 * 1000))),
                        "kind": .string(event.kind), "message": .string(event.message),
                    ]
                }),
            "segments": .array(
                trail.segments.sorted { $0.range.lowerBound < $1.range.lowerBound }.map { segment in
                    [
                        "connection": .string(String(segment.connection)),
                        "from": .string(String(segment.range.lowerBound)),
                        "to": .string(String(segment.range.upperBound)), "uri": .string(segment.source),
                        "state": .string(segment.state),
                    ]
                }),
            "servedBy": .array(trail.servedBy.map(JSON.string)),
        ]
    }
}
