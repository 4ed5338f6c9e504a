extension Fault {
    /// Parses the fault parameters out of decoded query items; unknown names are ignored.
    init(queryItems: [(name: String, value: String)]) {
        self.init()
        for (name, value) in queryItems {
            apply(name: name, value: value)
        }
    }

    private mutating func apply(name: String, value: String) {
        let flag = value.isEmpty || value == "1" || value == "true" || value == "yes"
        switch name {
        case "status": status = Self.statusCode(value)
        case "fail": failCount = Int(value)
        case "failStatus": failStatus = Self.statusCode(value)
        case "retryAfter": retryAfterSeconds = Int(value)
        case "retryAfterDate": retryAfterAsDate = flag
        case "delay": delayMilliseconds = Int(value)
        case "rate": bytesPerSecond = Int(value)
        case "rateTimes": rateTimes = Int(value)
        case "cutAfter": cutAfterBytes = Int(value)
        case "cutTimes": cutTimes = Int(value)
        case "stallAfter": stallAfterBytes = Int(value)
        case "stall":
            if value == "forever" {
                stallLength = .forever
            } else if value.hasPrefix("gate:") {
                stallLength = .untilGate(String(value.dropFirst("gate:".count)))
            } else {
                stallLength = Int(value).map { .milliseconds($0) }
            }
        case "shortBy": shortByBytes = Int(value)
        case "ignoreRange": ignoreRange = flag
        case "noRanges": noRanges = flag
        case "changeAfterFirst": changeAfterFirst = flag
        case "redirects": redirectCount = Int(value)
        case "redirectLoop": redirectLoop = flag
        case "redirectTo": redirectTarget = Self.fieldValue(value)
        case "redirectStatus": redirectStatus = Self.statusCode(value)
        case "disposition": contentDisposition = Self.fieldValue(value)
        case "requireAuth": requiredAuthorization = value
        case "setCookie": setCookie = Self.fieldValue(value)
        case "gzip": gzip = flag
        case "dropConnection": dropConnection = flag
        case "dropTimes": dropTimes = Int(value)
        case "headOnly": headOnly = flag
        case "close": closeConnection = flag
        case "noLength": noLength = flag
        case "hold": holdGate = value
        default: break
        }
    }

    /// A status code of three digits, or `nil`: anything else is not one, and NIO traps on a negative one.
    private static func statusCode(_ value: String) -> Int? {
        Int(value).flatMap { (100...999).contains($0) ? $0 : nil }
    }

    /// A value that goes into a header field, or `nil` for one holding CR or LF: any client can put a fault in a URL
    /// (a web page can open one), and a line break would let it write headers and a body of its own. Other control
    /// characters stay, as a lying server sends them.
    private static func fieldValue(_ value: String) -> String? {
        value.utf8.contains { $0 == 0x0D || $0 == 0x0A } ? nil : value
    }

    /// Fields set in `override` replace the ones here.
    func overridden(by override: Fault) -> Fault {
        var result = self
        result.status = override.status ?? status
        result.failCount = override.failCount ?? failCount
        result.failStatus = override.failStatus ?? failStatus
        result.retryAfterSeconds = override.retryAfterSeconds ?? retryAfterSeconds
        result.retryAfterAsDate = override.retryAfterAsDate ?? retryAfterAsDate
        result.delayMilliseconds = override.delayMilliseconds ?? delayMilliseconds
        result.bytesPerSecond = override.bytesPerSecond ?? bytesPerSecond
        result.rateTimes = override.rateTimes ?? rateTimes
        result.cutAfterBytes = override.cutAfterBytes ?? cutAfterBytes
        result.cutTimes = override.cutTimes ?? cutTimes
        result.stallAfterBytes = override.stallAfterBytes ?? stallAfterBytes
        result.stallLength = override.stallLength ?? stallLength
        result.shortByBytes = override.shortByBytes ?? shortByBytes
        result.ignoreRange = override.ignoreRange ?? ignoreRange
        result.noRanges = override.noRanges ?? noRanges
        result.changeAfterFirst = override.changeAfterFirst ?? changeAfterFirst
        result.redirectCount = override.redirectCount ?? redirectCount
        result.redirectLoop = override.redirectLoop ?? redirectLoop
        result.redirectTarget = override.redirectTarget ?? redirectTarget
        result.redirectStatus = override.redirectStatus ?? redirectStatus
        result.contentDisposition = override.contentDisposition ?? contentDisposition
        result.requiredAuthorization = override.requiredAuthorization ?? requiredAuthorization
        result.setCookie = override.setCookie ?? setCookie
        result.gzip = override.gzip ?? gzip
        result.dropConnection = override.dropConnection ?? dropConnection
        result.dropTimes = override.dropTimes ?? dropTimes
        result.headOnly = override.headOnly ?? headOnly
        result.closeConnection = override.closeConnection ?? closeConnection
        result.noLength = override.noLength ?? noLength
        result.holdGate = override.holdGate ?? holdGate
        return result
    }
}
