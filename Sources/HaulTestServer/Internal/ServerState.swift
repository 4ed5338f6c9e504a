import NIOCore
import HaulOperations

/// Everything the connections of one server share: statistics, rules, gates and per-path counters.
/// One lock guards it; promise completions happen after the lock is released.
final class ServerState: Sendable {
    /// The faults that count requests per path (`fail`, `cutTimes`, `rateTimes`, `dropTimes`, `changeAfterFirst`).
    enum PerPathCounter: Hashable {
        case fail, cut, rate, drop, version
    }

    private struct Guarded {
        var stats = TestServerStats()
        var rules: [FaultRule] = []
        var openGates: Set<String> = []
        var gateWaiters: [String: [EventLoopPromise<Void>]] = [:]
        // Per-path counters: how many requests asked for the fault so far.
        var counters: [PerPathCounter: [String: Int]] = [:]
        var contentCache: [String: GeneratedContent] = [:]
    }

    private let guarded = Locked(Guarded())
    private let maxRecordedRequests: Int
    private let countsRequestsByPath: Bool

    init(maxRecordedRequests: Int, countsRequestsByPath: Bool = true) {
        self.maxRecordedRequests = maxRecordedRequests
        self.countsRequestsByPath = countsRequestsByPath
    }

    var snapshot: TestServerStats { guarded.withLock { $0.stats } }

    func reset() {
        // Re-arming gates releases nobody: waiters stay held until their gate opens again.
        guarded.withLock { state in
            let held = state.stats.heldByGate
            let inFlight = state.stats.inFlight
            let inFlightByHost = state.stats.inFlightByHost
            state.stats = TestServerStats()
            state.stats.heldByGate = held
            state.stats.inFlight = inFlight
            state.stats.maxInFlight = inFlight
            state.stats.inFlightByHost = inFlightByHost
            state.stats.maxInFlightByHost = inFlightByHost
            state.openGates = []
            state.counters = [:]
        }
    }

    // MARK: Requests

    /// Records a request head and returns the rule fault that applies to it, if any.
    func requestStarted(_ request: RecordedRequest) -> Fault? {
        guarded.withLock { state in
            state.stats.requestCount += 1
            if countsRequestsByPath { state.stats.requestsByPath[request.path, default: 0] += 1 }
            if state.stats.requests.count < maxRecordedRequests {
                state.stats.requests.append(request)
            }
            state.stats.inFlight += 1
            state.stats.maxInFlight = max(state.stats.maxInFlight, state.stats.inFlight)
            let host = request.host ?? ""
            let hostCount = state.stats.inFlightByHost[host, default: 0] + 1
            state.stats.inFlightByHost[host] = hostCount
            state.stats.maxInFlightByHost[host] = max(state.stats.maxInFlightByHost[host] ?? 0, hostCount)
            return state.rules.first { rule in
                request.path.hasPrefix(rule.pathPrefix) && (rule.host == nil || rule.host == request.host)
            }?.fault
        }
    }

    func requestFinished(host: String?) {
        guarded.withLock { state in
            state.stats.inFlight = max(0, state.stats.inFlight - 1)
            let host = host ?? ""
            let count = max(0, state.stats.inFlightByHost[host, default: 0] - 1)
            state.stats.inFlightByHost[host] = count == 0 ? nil : count
        }
    }

    func bodyWritten(_ count: Int, path: String, at time: ContinuousClock.Instant) {
        guarded.withLock { $0.stats.bodyTimeline.append(.init(path: path, time: time, bytes: count)) }
    }

    func bodyBytesSent(_ count: Int, path: String) {
        guarded.withLock { state in
            state.stats.bodyBytesSent += count
            state.stats.bodyBytesByPath[path, default: 0] += count
        }
    }

    /// Counts a request against a per-path fault; returns the 1-based number of this request.
    func nextOrdinal(_ counter: PerPathCounter, path: String) -> Int {
        guarded.withLock { state in
            let ordinal = state.counters[counter, default: [:]][path, default: 0] + 1
            state.counters[counter, default: [:]][path] = ordinal
            return ordinal
        }
    }

    func connectionAccepted() {
        guarded.withLock { $0.stats.connectionsAccepted += 1 }
    }

    func content(name: String, version: Int) -> GeneratedContent {
        let key = "\(version)/\(name)"
        if let cached = guarded.withLock({ $0.contentCache[key] }) { return cached }
        // Built outside the lock: 64 KiB of splitmix64 is cheap, but other connections need not wait.
        let content = GeneratedContent(name: name, version: version)
        guarded.withLock { state in
            if state.contentCache.count >= 256 { state.contentCache.removeAll() }
            state.contentCache[key] = content
        }
        return content
    }

    // MARK: Rules

    func addRule(_ rule: FaultRule) { guarded.withLock { $0.rules.append(rule) } }
    func removeAllRules() { guarded.withLock { $0.rules.removeAll() } }

    // MARK: Gates

    /// Returns `nil` when the gate is open, or a future that completes when it opens.
    func waitAtGate(_ name: String, eventLoop: any EventLoop) -> EventLoopFuture<Void>? {
        guarded.withLock { state -> EventLoopFuture<Void>? in
            if state.openGates.contains(name) { return nil }
            let promise = eventLoop.makePromise(of: Void.self)
            state.gateWaiters[name, default: []].append(promise)
            state.stats.heldByGate[name, default: 0] += 1
            return promise.futureResult
        }
    }

    func openGate(_ name: String) {
        let waiters = guarded.withLock { state in
            state.openGates.insert(name)
            state.stats.heldByGate[name] = nil
            return state.gateWaiters.removeValue(forKey: name) ?? []
        }
        for waiter in waiters { waiter.succeed() }
    }

    func closeGate(_ name: String) {
        _ = guarded.withLock { $0.openGates.remove(name) }
    }

    /// Releases every waiter (the server is going away).
    func releaseAllGates() {
        let waiters = guarded.withLock { state in
            let all = state.gateWaiters.values.flatMap { $0 }
            state.gateWaiters = [:]
            state.stats.heldByGate = [:]
            return all
        }
        for waiter in waiters { waiter.fail(ChannelError.ioOnClosedChannel) }
    }
}
