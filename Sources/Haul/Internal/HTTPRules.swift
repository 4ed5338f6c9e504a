import Foundation
import HTTPTypes

/// The engine's HTTP rules that do not need I/O: redirects, origins, validators, `Retry-After`,
/// `Content-Range`. Kept pure so each is tested without a server.
enum HTTPRules {
    static let redirectStatuses: Set<Int> = [301, 302, 303, 307, 308]

    /// Header fields that carry credentials: never sent to another origin after a redirect.
    static let credentialFields: [HTTPField.Name] = [.authorization, .cookie, .proxyAuthorization]

    struct Origin: Hashable {
        let scheme: String
        let host: String
        let port: Int
    }

    static func origin(of url: URL) -> Origin {
        let scheme = url.scheme?.lowercased() ?? ""
        let defaultPort = scheme == "https" ? 443 : 80
        return Origin(
            scheme: scheme, host: url.host(percentEncoded: false)?.lowercased() ?? "",
            port: url.port ?? defaultPort)
    }

    /// The target of a redirect, resolved against the current URL, or the reason it is refused.
    static func redirectTarget(location: String?, from current: URL) -> Result<URL, DownloadError> {
        guard let location, !location.isEmpty,
            let target = URL(string: location, relativeTo: current)?.absoluteURL
        else {
            return .failure(
                DownloadError(
                    .redirectRefused, message: "redirect without a usable Location header ('\(location ?? "")')",
                    url: current))
        }
        guard let scheme = target.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            return .failure(
                DownloadError(
                    .redirectRefused,
                    message: "refused a redirect to '\(target.redactedString)': only http and https are followed",
                    url: current))
        }
        return .success(target)
    }

    /// A validator usable in `If-Range`: a strong ETag, else `Last-Modified`. Weak ETags cannot be used.
    static func validator(of head: HTTPResponse) -> String? {
        if let etag = head.headerFields.first(.eTag), !etag.hasPrefix("W/") { return etag }
        return head.headerFields.first(.lastModified)
    }

    /// `Retry-After` as a duration: delay-seconds or an HTTP date (relative to `now`).
    static func retryAfter(_ value: String?, now: Date = Date()) -> Duration? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Int(value) { return .seconds(max(0, seconds)) }
        guard let date = httpDate(value) else { return nil }
        return .milliseconds(max(0, Int((date.timeIntervalSince(now) * 1000).rounded(.up))))
    }

    static func httpDate(_ value: String) -> Date? {
        // IMF-fixdate, what servers send today, by hand: a DateFormatter costs more than a small file's download.
        if let seconds = imfFixdate(value) { return Date(timeIntervalSince1970: TimeInterval(seconds)) }
        for format in ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "GMT")
            formatter.dateFormat = format
            if let date = formatter.date(from: value) { return date }
        }
        return nil
    }

    private static let monthNames = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]

    /// Seconds since 1970 of `Sun, 06 Nov 1994 08:49:37 GMT` (RFC 9110 5.6.7), or `nil` for any other form.
    static func imfFixdate(_ value: String) -> Int64? {
        let parts = value.split(separator: " ")
        guard parts.count == 6, parts[5] == "GMT", parts[0].count == 4, let day = Int(parts[1]), (1...31).contains(day),
            let year = Int64(parts[3]), let monthIndex = monthNames.firstIndex(where: { $0 == parts[2] })
        else { return nil }
        let clock = parts[4].split(separator: ":")
        guard clock.count == 3, let hour = Int64(clock[0]), let minute = Int64(clock[1]), let second = Int64(clock[2]),
            hour < 24, minute < 60, second < 61
        else { return nil }
        // Days from the civil date (Howard Hinnant's algorithm).
        let month = Int64(monthIndex + 1)
        let shiftedYear = month <= 2 ? year - 1 : year
        let era = (shiftedYear >= 0 ? shiftedYear : shiftedYear - 399) / 400
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + Int64(day) - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return days * 86_400 + hour * 3600 + minute * 60 + second
    }

    struct ContentRange: Equatable {
        let first: Int64
        let last: Int64
        let complete: Int64?
    }

    /// Parses `bytes a-b/total` (total may be `*`).
    static func contentRange(_ value: String?) -> ContentRange? {
        guard let value, value.hasPrefix("bytes ") else { return nil }
        let spec = value.dropFirst(6)
        let halves = spec.split(separator: "/", maxSplits: 1)
        guard halves.count == 2 else { return nil }
        let bounds = halves[0].split(separator: "-", maxSplits: 1)
        guard bounds.count == 2, let first = Int64(bounds[0]), let last = Int64(bounds[1]), first <= last else {
            return nil
        }
        return ContentRange(first: first, last: last, complete: Int64(halves[1]))
    }

    /// The complete length from `bytes */total` (a 416 answer).
    static func unsatisfiedRangeLength(_ value: String?) -> Int64? {
        guard let value, value.hasPrefix("bytes */") else { return nil }
        return Int64(value.dropFirst(8))
    }
}
