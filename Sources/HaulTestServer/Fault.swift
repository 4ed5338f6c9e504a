/// The misbehaviour a ``TestServer`` applies to one response.
///
/// Chosen per request by query parameters (any URL the server answers, e.g.
/// `/bytes/a?size=1000&cutAfter=500`), or for every request matching a ``FaultRule``. Query parameters
/// win over a rule field by field.
///
/// | parameter | effect |
/// |---|---|
/// | `status=C` | answer with status `C` and a short text body |
/// | `fail=K` | the first `K` requests to this path get `failStatus` (default 503) |
/// | `failStatus=C` | status used by `fail` |
/// | `retryAfter=S` | add `Retry-After: S` (seconds) to `status`/`fail` answers |
/// | `retryAfterDate=1` | send `Retry-After` as an HTTP date `S` seconds from now |
/// | `delay=MS` | wait `MS` milliseconds before the response head |
/// | `rate=B` | throttle the body to `B` bytes per second, in 10 ms slices |
/// | `rateTimes=N` | apply `rate` to the first `N` requests to this path only |
/// | `cutAfter=K` | close the connection after `K` body bytes |
/// | `cutTimes=N` | apply `cutAfter` to the first `N` requests to this path only |
/// | `stallAfter=K` | after `K` body bytes, send nothing for `stall` |
/// | `stall=MS`, `stall=forever` or `stall=gate:G` | stall length; `forever` waits until the client goes away, `gate:G` until ``TestServer/openGate(_:)`` opens `G` |
/// | `shortBy=N` | announce the full `Content-Length`, send `N` bytes fewer, then close |
/// | `ignoreRange=1` | ignore `Range`/`If-Range`, always 200 with the full body (still saying `Accept-Ranges: bytes`) |
/// | `noRanges=1` | no range support: no `Accept-Ranges`, always 200 with the full body |
/// | `changeAfterFirst=1` | every request to this path bumps the content version (new bytes, ETag, date) |
/// | `redirects=N` | redirect `N` times to the same URL with `redirects=N-1` |
/// | `redirectLoop=1` | redirect to the very same URL, forever |
/// | `redirectTo=URL` | redirect to the percent-encoded absolute `URL` (any host or scheme) |
/// | `redirectStatus=C` | 301, 302 (default), 303, 307 or 308 |
/// | `disposition=V` | send `Content-Disposition: V` verbatim |
/// | `requireAuth=V` | answer 401 with `WWW-Authenticate` unless `Authorization` equals `V` |
/// | `setCookie=V` | send `Set-Cookie: V` with the response, whatever it is (a redirect too) |
/// | `gzip=1` | send the body gzip-compressed with `Content-Encoding: gzip`, whatever was asked |
/// | `dropConnection=1` | close the connection without any response |
/// | `dropTimes=N` | apply `dropConnection` to the first `N` requests to this path only |
/// | `headOnly=1` | send the head, then nothing; the connection stays open until the client closes |
/// | `close=1` | answer whole with `Connection: close`, then close the connection (a server's keep-alive limit) |
/// | `noLength=1` | no `Content-Length` (HTTP/1.0): the body ends where the connection closes |
/// | `hold=GATE` | hold the request before the head until ``TestServer/openGate(_:)`` opens `GATE` |
///
/// "Per path" counters (`fail`, `cutTimes`, `rateTimes`, `dropTimes`, `changeAfterFirst`) are keyed by the path without the
/// query and reset by ``TestServer/resetStats()``.
public struct Fault: Sendable, Hashable {
    /// How long a stall lasts.
    public enum StallLength: Sendable, Hashable {
        /// Resume sending after this many milliseconds.
        case milliseconds(Int)
        /// Never resume; the connection stays open until the client closes it.
        case forever
        /// Resume once ``TestServer/openGate(_:)`` opens this gate (at once if it is open already).
        case untilGate(String)
    }

    /// Answer every request with this status (`status=`).
    public var status: Int?
    /// Fail the first this many requests to the path (`fail=`).
    public var failCount: Int?
    /// Status used for `failCount` failures (`failStatus=`, default 503).
    public var failStatus: Int?
    /// `Retry-After` seconds added to `status` and `fail` answers (`retryAfter=`).
    public var retryAfterSeconds: Int?
    /// Send `Retry-After` as an HTTP date instead of seconds (`retryAfterDate=1`).
    public var retryAfterAsDate: Bool?
    /// Milliseconds to wait before the head (`delay=`).
    public var delayMilliseconds: Int?
    /// Body bytes per second (`rate=`).
    public var bytesPerSecond: Int?
    /// Throttle only the first this many requests to the path (`rateTimes=`); `nil` throttles every time.
    public var rateTimes: Int?
    /// Close the connection after this many body bytes (`cutAfter=`).
    public var cutAfterBytes: Int?
    /// Cut only the first this many requests to the path (`cutTimes=`); `nil` cuts every time.
    public var cutTimes: Int?
    /// Stall after this many body bytes (`stallAfter=`).
    public var stallAfterBytes: Int?
    /// How long to stall (`stall=`: milliseconds, `forever`, or `gate:NAME`); defaults to forever when only
    /// `stallAfter` is set.
    public var stallLength: StallLength?
    /// Send this many bytes fewer than `Content-Length` announces, then close (`shortBy=`).
    public var shortByBytes: Int?
    /// Ignore `Range` and `If-Range` (`ignoreRange=1`), while the response still says `Accept-Ranges: bytes`.
    public var ignoreRange: Bool?
    /// Support no ranges at all (`noRanges=1`): no `Accept-Ranges`, and `Range` is ignored.
    public var noRanges: Bool?
    /// Bump the content version on every request to the path (`changeAfterFirst=1`).
    public var changeAfterFirst: Bool?
    /// Number of redirect hops before the content (`redirects=`).
    public var redirectCount: Int?
    /// Redirect to the same URL forever (`redirectLoop=1`).
    public var redirectLoop: Bool?
    /// Redirect to this absolute URL (`redirectTo=`).
    public var redirectTarget: String?
    /// Redirect status: 301, 302, 303, 307 or 308 (`redirectStatus=`, default 302).
    public var redirectStatus: Int?
    /// Raw `Content-Disposition` value (`disposition=`).
    public var contentDisposition: String?
    /// The `Authorization` value the request must carry (`requireAuth=`).
    public var requiredAuthorization: String?
    /// A `Set-Cookie` value sent with every response to the request, redirects and errors included (`setCookie=`).
    public var setCookie: String?
    /// Gzip the body whatever was asked (`gzip=1`).
    public var gzip: Bool?
    /// Close without any response (`dropConnection=1`).
    public var dropConnection: Bool?
    /// Drop only the first this many requests to the path (`dropTimes=`); `nil` drops every time.
    public var dropTimes: Int?
    /// Send the head and never the body (`headOnly=1`).
    public var headOnly: Bool?
    /// Answer with `Connection: close` and close the connection after the response, as a server does once a
    /// connection has carried its limit of requests (nginx's `keepalive_requests`) (`close=1`).
    public var closeConnection: Bool?
    /// Send content without `Content-Length`, as an HTTP/1.0 response whose body ends where the connection closes
    /// (`noLength=1`): a body cut short (`cutAfter`) then ends cleanly, only its `Content-Range` says it is short.
    public var noLength: Bool?
    /// Hold the request until this gate opens (`hold=`).
    public var holdGate: String?

    /// A fault that changes nothing; set the fields you need.
    public init() {}

    /// The query parameter names understood by the server, for help texts.
    public static let queryParameterNames: [String] = [
        "status", "fail", "failStatus", "retryAfter", "retryAfterDate", "delay", "rate", "rateTimes", "cutAfter",
        "cutTimes",
        "stallAfter", "stall", "shortBy", "ignoreRange", "noRanges", "changeAfterFirst", "redirects", "redirectLoop",
        "redirectTo", "redirectStatus", "disposition", "requireAuth", "setCookie", "gzip", "dropConnection",
        "dropTimes", "headOnly",
        "close", "hold", "noLength",
    ]
}

/// Applies a ``Fault`` to every request whose path starts with `pathPrefix` (and whose `Host` header
/// equals `host`, when given). The first matching rule wins; query parameters override its fields.
///
/// ```swift
/// server.addRule(FaultRule(pathPrefix: "/bytes/flaky", fault: { var f = Fault(); f.failCount = 2; return f }()))
/// ```
public struct FaultRule: Sendable, Hashable {
    /// Requests whose path (without query) starts with this prefix match.
    public var pathPrefix: String
    /// When set, only requests whose `Host` header equals this value (e.g. `localhost:8080`) match.
    public var host: String?
    /// The fault to apply.
    public var fault: Fault

    /// Creates a rule.
    public init(pathPrefix: String, host: String? = nil, fault: Fault) {
        self.pathPrefix = pathPrefix
        self.host = host
        self.fault = fault
    }
}
