/// One request as the server received it, in arrival order.
public struct RecordedRequest: Sendable, Hashable {
    /// One header line.
    public struct Header: Sendable, Hashable {
        /// The name as sent.
        public var name: String
        /// The value as sent.
        public var value: String
    }

    /// The method, e.g. `GET`.
    public var method: String
    /// The request target: path and query as sent, e.g. `/bytes/a?size=10`.
    public var target: String
    /// The path without the query, percent-encoded as sent.
    public var path: String
    /// The `Host` header value, e.g. `localhost:8080`.
    public var host: String?
    /// All header lines in the order sent.
    public var headers: [Header]
    /// When the request head was received.
    public var receivedAt: ContinuousClock.Instant = .now

    /// The first value of the named header (case-insensitive), or `nil` when absent.
    public func value(forHeader name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    /// The `Authorization` value, if the request carried one.
    public var authorization: String? { value(forHeader: "authorization") }
    /// The `Cookie` value, if the request carried one.
    public var cookie: String? { value(forHeader: "cookie") }
    /// The `Range` value, if the request carried one.
    public var range: String? { value(forHeader: "range") }
    /// The `If-Range` value, if the request carried one.
    public var ifRange: String? { value(forHeader: "if-range") }
}

/// A snapshot of what a ``TestServer`` has seen since it started or since ``TestServer/resetStats()``.
///
/// "In flight" counts a request from its head being received until its response is fully written or
/// its connection closes.
public struct TestServerStats: Sendable, Hashable {
    /// Number of requests received.
    public var requestCount = 0
    /// Number of connections accepted (a client that keeps connections alive makes fewer than requests).
    public var connectionsAccepted = 0
    /// Requests per path (without query); empty when ``TestServer/Configuration/countsRequestsByPath`` is off.
    public var requestsByPath: [String: Int] = [:]
    /// The requests in arrival order (at most ``TestServer/Configuration/maxRecordedRequests``).
    public var requests: [RecordedRequest] = []
    /// Requests in flight right now.
    public var inFlight = 0
    /// The highest number of requests in flight at once.
    public var maxInFlight = 0
    /// Requests in flight right now per `Host` header value.
    public var inFlightByHost: [String: Int] = [:]
    /// The highest number of requests in flight at once per `Host` header value.
    public var maxInFlightByHost: [String: Int] = [:]
    /// Requests waiting at each closed gate right now.
    public var heldByGate: [String: Int] = [:]
    /// Body bytes handed to the connections (headers excluded).
    public var bodyBytesSent = 0
    /// Body bytes per path (without query).
    public var bodyBytesByPath: [String: Int] = [:]
    /// Every body write as the connection handed it to the kernel, in order; recorded only with
    /// ``TestServer/Configuration/recordsBodyTimeline``.
    public var bodyTimeline: [BodyWrite] = []

    /// Body bytes one connection handed to the kernel at one moment.
    public struct BodyWrite: Sendable, Hashable {
        /// The request's path (without query).
        public var path: String
        /// When the write completed.
        public var time: ContinuousClock.Instant
        /// How many body bytes it carried.
        public var bytes: Int
    }

    /// Requests for `path` (without query) received so far.
    public func requests(toPath path: String) -> Int { requestsByPath[path] ?? 0 }
}
