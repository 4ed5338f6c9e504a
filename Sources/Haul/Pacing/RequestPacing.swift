/// How a downloader spaces the requests it sends (``Downloader/Configuration/pacing``), as wget's `--wait`,
/// `--random-wait` and curl's `--rate` do. Every request counts: a retry or a redirect is a request to its server too.
///
/// ```swift
/// configuration.pacing.rate = RequestRate(count: 10, per: .seconds(1))   // at most 10 request starts a second
/// configuration.pacing.perHostWait = .seconds(1)                          // and 1 s between two to one host
/// ```
public struct RequestPacing: Sendable, Hashable {
    /// The most request starts per unit of time for the whole downloader; `nil` for no limit. Requests are spaced
    /// evenly (10 per minute: one every 6 s), as curl's `--rate` does.
    public var rate: RequestRate?
    /// The most request starts per unit of time to one host; `nil` for no limit.
    public var perHostRate: RequestRate?
    /// The time between the starts of two requests to one host; zero (the default) for none.
    public var perHostWait: Duration = .zero
    /// Vary each ``perHostWait`` between half and one and a half times its length (wget's `--random-wait`), so
    /// that the requests do not arrive at a steady beat.
    public var randomizesWait = false

    /// Spaces nothing.
    public init() {}

    /// Creates a pacing.
    public init(
        rate: RequestRate? = nil, perHostRate: RequestRate? = nil, perHostWait: Duration = .zero,
        randomizesWait: Bool = false
    ) {
        self.rate = rate
        self.perHostRate = perHostRate
        self.perHostWait = perHostWait
        self.randomizesWait = randomizesWait
    }

    /// Whether anything is spaced at all.
    var spacesRequests: Bool { rate != nil || perHostRate != nil || perHostWait > .zero }
}

/// A number of events per unit of time: `10/s`, `30/m`, `100/h`.
public struct RequestRate: Sendable, Hashable, CustomStringConvertible {
    /// How many.
    public var count: Int
    /// Per how long.
    public var period: Duration

    /// `count` per `period`.
    /// - Precondition: `count` is at least 1 and `period` is positive.
    public init(count: Int, per period: Duration) {
        precondition(count >= 1 && period > .zero, "a rate needs a count of at least 1 and a positive period")
        self.count = count
        self.period = period
    }

    /// Parses `N/s`, `N/m`, `N/h` (also `N/second`, `N/minute`, `N/hour`, and `N` alone for per second), as curl's
    /// `--rate` reads them.
    public init?(parsing text: String) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let first = parts.first, let count = Int(first), count >= 1 else { return nil }
        let unit = parts.count == 2 ? parts[1].lowercased() : "s"
        let period: Duration
        switch unit {
        case "s", "sec", "second": period = .seconds(1)
        case "m", "min", "minute": period = .seconds(60)
        case "h", "hour": period = .seconds(3600)
        case "d", "day": period = .seconds(86_400)
        default: return nil
        }
        self.init(count: count, per: period)
    }

    /// The time between two evenly spaced events.
    var interval: Duration { period / count }

    /// `N/s`, `N/m`, `N/h` or `N per D`.
    public var description: String {
        switch period {
        case .seconds(1): "\(count)/s"
        case .seconds(60): "\(count)/m"
        case .seconds(3600): "\(count)/h"
        case .seconds(86_400): "\(count)/d"
        default: "\(count) per \(period)"
        }
    }
}
