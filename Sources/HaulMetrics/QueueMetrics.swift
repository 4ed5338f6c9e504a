public import CoreMetrics
import Foundation
public import Haul
import HaulOperations

/// What a `DownloadQueue` does, recorded as swift-metrics counters, gauges and a timer made by the factory it is given
/// (a `PrometheusMetricsFactory` for `/metrics`, or any other backend):
///
/// | metric | kind | what |
/// |---|---|---|
/// | `haul_downloads_started_total` | counter | downloads whose first attempt started |
/// | `haul_downloads_finished_total{outcome}` | counter | ended: `completed`, `skipped`, `failed`, `cancelled` |
/// | `haul_received_bytes_total` | counter | bytes received (running downloads' taken at each ``refresh()``) |
/// | `haul_retries_total` | counter | attempts started again after a transient failure |
/// | `haul_queue_wait_seconds` | timer (histogram) | time from being queued to the first start |
/// | `haul_downloads_running{host}` | gauge | running per host: the busiest hosts, the rest as `other` |
/// | `haul_queue_downloads{state}` | gauge | by state (the `depth` given at creation), at each ``refresh()`` |
///
/// It observes the queue's events of the kinds it needs only (no progress events), counting each as the queue sends
/// it: a batch of small files pays one call per start and per end, and wakes no task for them. Host labels are
/// bounded (the `hostLabels` busiest hosts and `other`), so a crawl of a million hosts does not make a million series.
public final class QueueMetrics: Sendable {
    /// Outcomes of ``QueueMetrics`` `haul_downloads_finished_total`.
    public static let outcomes = ["completed", "skipped", "failed", "cancelled"]

    private let queue: DownloadQueue
    private let factory: any MetricsFactory
    private let hostLabels: Int
    private let depth: @Sendable () async -> [(state: String, count: Int)]
    private let started: Counter
    private let finished: [String: Counter]
    private let received: Counter
    private let retries: Counter
    private let wait: CoreMetrics.Timer
    private let depthGauges: DepthGauges
    private let state = Locked(State())
    private let observer = Locked<EventObservation?>(nil)

    private struct State {
        /// When each download not started yet was queued.
        var queuedAt: [DownloadID: ContinuousClock.Instant] = [:]
        /// Bytes of each running download counted so far, and where its current attempt started.
        var counted: [DownloadID: Int64] = [:]
        /// The downloads counted as started, until they end.
        var begun: Set<DownloadID> = []
        var hostGauges: [String: Gauge] = [:]
    }

    /// Records what `queue` does from ``start()`` on, with metrics made by `factory`; `hostLabels` hosts get a label
    /// of their own in `haul_downloads_running`. `depth` counts downloads by state for `haul_queue_downloads`
    /// (default: the queue's `running` and `waiting`).
    public init(
        queue: DownloadQueue, factory: any MetricsFactory, hostLabels: Int = 10,
        depth: (@Sendable () async -> [(state: String, count: Int)])? = nil
    ) {
        self.queue = queue
        self.factory = factory
        self.hostLabels = max(0, hostLabels)
        self.depth =
            depth ?? { [queue] in [("running", queue.runningCount), ("waiting", queue.waitingCount)] }
        started = Counter(label: "haul_downloads_started_total", factory: factory)
        finished = Dictionary(
            uniqueKeysWithValues: Self.outcomes.map {
                ($0, Counter(label: "haul_downloads_finished_total", dimensions: [("outcome", $0)], factory: factory))
            })
        received = Counter(label: "haul_received_bytes_total", factory: factory)
        retries = Counter(label: "haul_retries_total", factory: factory)
        wait = CoreMetrics.Timer(label: "haul_queue_wait_seconds", factory: factory)
        depthGauges = DepthGauges(factory: factory)
    }

    /// Starts recording: observes the queue's events. Downloads queued before are counted from their start on.
    public func start() {
        let observation = queue.observe(including: [.queued, .started, .retrying, .finished, .failed]) {
            [weak self] event in self?.record(event)
        }
        let previous = observer.withLock { observer in
            defer { observer = observation }
            return observer
        }
        previous?.cancel()
    }

    /// Stops recording (the metrics keep their values).
    public func stop() {
        observer.withLock { $0 }?.cancel()
    }

    /// Counts one event, as the queue sends it (one at a time).
    func record(_ event: QueueEvent) {
        switch event {
        case .queued(let id, _):
            let now = ContinuousClock.now
            state.withLock { $0.queuedAt[id] = now }
        case .download(let id, .started(_, let resumingAt)):
            let now = ContinuousClock.now
            let (queuedAt, first, fresh) = state.withLock { state in
                // A later attempt, or the download resumed after a pause, continues from bytes this process received
                // and may not have counted yet (none since the last scrape); then counts from where it starts.
                let fresh = state.counted[id].map { max(0, resumingAt - $0) } ?? 0
                state.counted[id] = resumingAt
                return (state.queuedAt.removeValue(forKey: id), state.begun.insert(id).inserted, fresh)
            }
            if fresh > 0 { received.increment(by: fresh) }
            // Counted once, queued before these metrics started (restored by a daemon at its start) or not.
            if first { started.increment() }
            if let queuedAt { wait.recordNanoseconds(Int64((now - queuedAt) / .nanoseconds(1))) }
        case .download(_, .retrying):
            retries.increment()
        case .download(let id, .finished(let result)):
            let counted = forget(id)
            let fresh = result.skipped ? 0 : max(0, result.size - (counted ?? (result.size - result.bytesTransferred)))
            if fresh > 0 { received.increment(by: fresh) }
            finished[result.skipped || result.notModified ? "skipped" : "completed"]?.increment()
        case .download(let id, .failed(let error)):
            _ = forget(id)
            finished[error.isCancellation ? "cancelled" : "failed"]?.increment()
        default:
            break
        }
    }

    private func forget(_ id: DownloadID) -> Int64? {
        state.withLock { state in
            state.queuedAt.removeValue(forKey: id)
            state.begun.remove(id)
            return state.counted.removeValue(forKey: id)
        }
    }

    /// Brings the gauges and the running downloads' received bytes up to date: call it before each scrape.
    public func refresh() async {
        let running = queue.runningStatuses()
        let hosts = queue.hostStatuses()
        let counts = await depth()
        var fresh: Int64 = 0
        state.withLock { state in
            for status in running {
                guard let counted = state.counted[status.id] else { continue }
                let now = status.progress.bytesWritten
                if now > counted {
                    fresh += now - counted
                    state.counted[status.id] = now
                }
            }
        }
        if fresh > 0 { received.increment(by: fresh) }
        setHosts(hosts)
        depthGauges.record(counts)
    }

    /// `haul_downloads_running{host}`: the busiest hosts by name, the others summed as `other`; a host that left
    /// the busiest loses its series.
    private func setHosts(_ hosts: [HostStatus]) {
        let busy = hosts.filter { $0.running > 0 }.sorted {
            ($0.running, $1.host) > ($1.running, $0.host)
        }
        var values: [String: Int] = [:]
        for (index, host) in busy.enumerated() {
            values[index < hostLabels ? host.host : "other", default: 0] += host.running
        }
        // The factory is the caller's code: called with no lock held.
        let (gone, known) = state.withLock { state in
            let gone = state.hostGauges.filter { values[$0.key] == nil }
            for host in gone.keys { state.hostGauges[host] = nil }
            return (gone, state.hostGauges)
        }
        for gauge in gone.values { gauge.destroy() }
        for (host, value) in values {
            let gauge =
                known[host] ?? Gauge(label: "haul_downloads_running", dimensions: [("host", host)], factory: factory)
            if known[host] == nil { state.withLock { $0.hostGauges[host] = gauge } }
            gauge.record(value)
        }
    }

}

/// `haul_queue_downloads{state}`: a queue's downloads by state, as last counted.
public final class DepthGauges: Sendable {
    private let factory: any MetricsFactory
    private let gauges = Locked<[String: Gauge]>([:])

    /// Gauges made by `factory`.
    public init(factory: any MetricsFactory) {
        self.factory = factory
    }

    /// Sets each state's gauge to its count; a state not counted this time keeps its last value.
    public func record(_ counts: [(state: String, count: Int)]) {
        let known = gauges.withLock { $0 }
        for (name, count) in counts {
            // The factory is the caller's code: called with no lock held.
            let gauge =
                known[name] ?? Gauge(label: "haul_queue_downloads", dimensions: [("state", name)], factory: factory)
            if known[name] == nil { gauges.withLock { $0[name] = gauge } }
            gauge.record(count)
        }
    }
}
