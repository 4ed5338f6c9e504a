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

    /// Whether `url` is `https`.
    static func isSecure(_ url: URL) -> Bool {
        url.scheme?.utf8.equalsIgnoringCase("https") == true
    }

    static func origin(of url: URL) -> Origin {
        let scheme = url.scheme?.lowercased() ?? ""
        let defaultPort = scheme == "https" ? 443 : 80
        return Origin(
            scheme: scheme, host: url.host(percentEncoded: false)?.lowercased() ?? "",
            port: url.port ?? defaultPort)
    }

    /// A `GET` request's head for `url`, with the scheme, authority and path `HTTPRequest(method:url:)` gives: the
    /// authority is the host and port without user info, the path runs to the fragment and is `/` when empty.
    /// Read here from the URL's text in one pass, since that initializer parses the URL once more through
    /// `URLComponents` on Linux, which costs more than the rest of building a small file's request (bench/floor).
    /// A URL whose authority is not a plain host and port (user info, an empty port) takes that initializer.
    static func getRequest(for url: URL) -> HTTPRequest {
        let text = url.absoluteString
        let bytes = text.utf8
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")),
            bytes[colon...].starts(with: "://".utf8)
        else { return HTTPRequest(method: .get, url: url) }
        let authorityStart = bytes.index(colon, offsetBy: 3)
        let authorityEnd =
            bytes[authorityStart...].firstIndex {
                $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#")
            } ?? bytes.endIndex
        let authority = bytes[authorityStart..<authorityEnd]
        guard let last = authority.last, last != UInt8(ascii: ":"), !authority.contains(UInt8(ascii: "@"))
        else { return HTTPRequest(method: .get, url: url) }
        let pathEnd = bytes[authorityEnd...].firstIndex(of: UInt8(ascii: "#")) ?? bytes.endIndex
        let target = text[authorityEnd..<pathEnd]
        let path = target.first == "/" ? String(target) : "/" + target
        return HTTPRequest(
            method: .get, scheme: String(text[..<colon]), authority: String(text[authorityStart..<authorityEnd]),
            path: path)
    }

    /// The target of a redirect, resolved against the current URL, or the reason it is refused (no `Location`, a scheme
    /// other than `http` and `https`, no host).
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
        guard target.host(percentEncoded: true)?.isEmpty == false else {
            return .failure(
                DownloadError(
                    .redirectRefused, message: "refused a redirect to '\(target.redactedString)': it names no host",
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
        // Delay-seconds beyond Int64 are still delay-seconds (RFC 9110 10.2.3): as long as the longest wait there is
        // (the retry policy caps it).
        if value.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) { return .seconds(Int64.max) }
        guard let date = httpDate(value) else { return nil }
        return .milliseconds(max(0, Int((date.timeIntervalSince(now) * 1000).rounded(.up))))
    }

    /// An HTTP date in whole seconds since 1970 (HTTP dates have no fractions).
    static func secondsSince1970(httpDate value: String) -> Int64? {
        imfFixdate(value) ?? httpDate(value).map { Int64($0.timeIntervalSince1970.rounded(.down)) }
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

    /// The month names of HTTP dates, each as its three bytes in one number.
    private static let monthKeys: [UInt32] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .map { $0.utf8.reduce(0) { $0 << 8 | UInt32($1) } }

    /// Seconds since 1970 of `Sun, 06 Nov 1994 08:49:37 GMT` (RFC 9110 5.6.7), or `nil` for any other form. Read
    /// at fixed offsets of the 29 bytes the form always has.
    static func imfFixdate(_ value: String) -> Int64? {
        var value = value
        return value.withUTF8 { bytes -> Int64? in
            guard bytes.count == 29, bytes[3] == UInt8(ascii: ","), bytes[25] == UInt8(ascii: " "),
                bytes[26] == UInt8(ascii: "G"), bytes[27] == UInt8(ascii: "M"), bytes[28] == UInt8(ascii: "T")
            else { return nil }
            func number(_ range: Range<Int>) -> Int64? {
                var result: Int64 = 0
                for index in range {
                    let digit = bytes[index] &- UInt8(ascii: "0")
                    guard digit < 10 else { return nil }
                    result = result * 10 + Int64(digit)
                }
                return result
            }
            let name = UInt32(bytes[8]) << 16 | UInt32(bytes[9]) << 8 | UInt32(bytes[10])
            guard let index = monthKeys.firstIndex(of: name), let day = number(5..<7), (1...31).contains(day),
                let year = number(12..<16),
                let hour = number(17..<19), let minute = number(20..<22), let second = number(23..<25),
                hour < 24, minute < 60, second < 61
            else { return nil }
            let month = Int64(index + 1)
            // Days from the civil date (Howard Hinnant's algorithm).
            let shiftedYear = month <= 2 ? year - 1 : year
            let era = shiftedYear / 400
            let yearOfEra = shiftedYear - era * 400
            let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
            let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
            let days = era * 146_097 + dayOfEra - 719_468
            return days * 86_400 + hour * 3600 + minute * 60 + second
        }
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
        // The range's length must be an Int64 too: `bytes 0-9223372036854775807/*` would overflow it.
        guard bounds.count == 2, let first = Int64(bounds[0]), let last = Int64(bounds[1]), 0 <= first, first <= last,
            last < Int64.max
        else {
            return nil
        }
        return ContentRange(first: first, last: last, complete: Int64(halves[1]))
    }

    /// A transfer coding the body comes in other than `chunked` (`gzip`, `deflate`, `compress`), or nil. Haul sends
    /// no `TE` and decodes none: such a body is not the file's bytes, and publishing it would publish a wrong file.
    static func unaskedTransferCoding(of head: HTTPResponse) -> String? {
        for value in head.headerFields[values: .transferEncoding] {
            for item in value.split(separator: ",") {
                let coding = (item.split(separator: ";", maxSplits: 1).first ?? "").trimmingCharacters(in: .whitespaces)
                // `identity` (no coding) was dropped from the registry (RFC 9112), but harmless where sent.
                if coding.isEmpty || coding.lowercased() == "chunked" || coding.lowercased() == "identity" { continue }
                return coding
            }
        }
        return nil
    }

    /// The complete length from `bytes */total` (a 416 answer).
    static func unsatisfiedRangeLength(_ value: String?) -> Int64? {
        guard let value, value.hasPrefix("bytes */") else { return nil }
        return Int64(value.dropFirst(8))
    }

    /// The failure a status other than 2xx, 304 to a revalidation and 416 to a range means: transient when `policy`
    /// retries the status (with the `Retry-After` it asked for), else permanent; the message says who refused what.
    static func statusFailure(
        _ head: HTTPResponse, url: URL, proxy: Proxy?, sentCredentials: Bool, policy: RetryPolicy
    ) -> AttemptFailure {
        let status = head.status.code
        let answered = "\(status) \(head.status.reasonPhrase)"
        // In absolute form to an HTTP proxy with credentials: a proxy that refuses them with a 401 (tinyproxy) cannot
        // be told from the server.
        let forwardingProxy = proxy.flatMap { proxy in
            proxy.credentials != nil && proxy.takesRequestsInAbsoluteForm(secure: HTTPRules.isSecure(url))
                ? proxy : nil
        }
        let message =
            switch (status, forwardingProxy) {
            case (401, let proxy?):
                "the server or the proxy \(proxy) answered \(answered): "
                    + (sentCredentials ? "the credentials sent were refused" : "none were sent to the server")
                    + ", or the proxy refused the user and password given for it"
            case (401, nil) where sentCredentials:
                "server answered \(answered): the credentials sent were refused"
            case (401, nil):
                "server answered \(answered): it needs credentials (a user and password in the URL, the request's "
                    + "credentials or a credential provider such as a netrc file); none were sent"
            case (407, _):
                proxy?.authenticationFailure(answered: answered) ?? "server answered \(answered)"
            default:
                "server answered \(answered)"
            }
        let error = DownloadError(.httpStatus, message: message, url: url, status: status)
        guard policy.retryableStatuses.contains(status) else { return .permanent(error) }
        return .transient(error, retryAfter: HTTPRules.retryAfter(head.headerFields[.retryAfter]))
    }
}
