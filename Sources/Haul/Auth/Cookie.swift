import Foundation

/// One stored cookie, in the form RFC 6265 section 5.3 keeps it.
struct Cookie: Sendable, Equatable {
    /// What identifies a cookie in the jar: a new one with the same key replaces the old one (RFC 6265 5.3 step 11).
    struct Key: Hashable, Sendable {
        var name: String
        var domain: String
        var path: String
    }

    var name: String
    var value: String
    /// Lower-cased, without a leading dot.
    var domain: String
    /// Sent to `domain` only, not to its subdomains.
    var hostOnly: Bool
    var path: String
    var secure: Bool
    var httpOnly: Bool
    /// `nil` for a session cookie.
    var expires: Date?
    var creation: Date
    /// Breaks ties between cookies created at the same instant (a whole file is loaded with one `now`), so the
    /// `Cookie` header keeps the order they arrived in.
    var sequence: UInt64

    var key: Key { Key(name: name, domain: domain, path: path) }

    func isExpired(at now: Date) -> Bool {
        guard let expires else { return false }
        return expires <= now
    }

    /// Whether the cookie goes with a request to `host` (lower-cased) for `path` over a secure channel or not.
    func applies(toHost host: String, path requestPath: String, secure isSecure: Bool) -> Bool {
        if secure && !isSecure { return false }
        guard hostOnly ? host == domain : Cookie.domain(host, matches: domain) else { return false }
        return Cookie.path(requestPath, matches: path)
    }

    /// RFC 6265 5.1.3, for hosts already lower-cased. Bytes are compared, not characters, so no Unicode
    /// equivalence can make two different hosts match.
    static func domain(_ host: String, matches domain: String) -> Bool {
        if host.utf8.elementsEqual(domain.utf8) { return true }
        guard !isIPAddress(host), host.utf8.count > domain.utf8.count else { return false }
        let tail = host.utf8.suffix(domain.utf8.count + 1)
        return tail.first == UInt8(ascii: ".") && tail.dropFirst().elementsEqual(domain.utf8)
    }

    /// RFC 6265 5.1.4: the cookie path is the request path, or a prefix of it that ends at a `/`.
    static func path(_ requestPath: String, matches cookiePath: String) -> Bool {
        let request = requestPath.utf8
        let cookie = cookiePath.utf8
        guard request.starts(with: cookie) else { return false }
        if request.count == cookie.count || cookie.last == UInt8(ascii: "/") { return true }
        return request.dropFirst(cookie.count).first == UInt8(ascii: "/")
    }

    /// RFC 6265 5.1.4: the directory of the request path, `/` when it has none.
    static func defaultPath(of requestPath: String) -> String {
        guard requestPath.hasPrefix("/"), let slash = requestPath.lastIndex(of: "/"), slash != requestPath.startIndex
        else { return "/" }
        return String(requestPath[..<slash])
    }

    /// IPv6 literals hold a colon; an IPv4 literal (in any form URL parsers accept, like `127.1` or `0x7f.1`) ends
    /// in a label starting with a digit, which no top-level domain does. Either way it has no subdomains.
    static func isIPAddress(_ host: String) -> Bool {
        if host.contains(":") { return true }
        guard let last = host.utf8.split(separator: UInt8(ascii: ".")).last, let first = last.first else {
            return false
        }
        return first >= 0x30 && first <= 0x39
    }

    /// The lower-cased host of `url` the jar compares domains with, or `nil` for a URL without one.
    static func host(of url: URL) -> String? {
        guard let host = url.host(percentEncoded: false), !host.isEmpty else { return nil }
        return host.lowercased()
    }

    /// The path of `url` as it goes on the request line, `/` when empty.
    static func requestPath(of url: URL) -> String {
        let path = url.path(percentEncoded: true)
        return path.isEmpty ? "/" : path
    }

    /// Whether `text` can be stored and written back: a control character (a TAB or line break above all) would
    /// break the line-based cookie file and could smuggle a header line.
    static func isStorable(_ text: String) -> Bool {
        !text.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
    }
}

// MARK: - Set-Cookie (RFC 6265 5.2)

extension Cookie {
    /// A `Set-Cookie` field value parsed, before the jar decides on it against the request (5.3).
    struct SetCookie {
        var name: String
        var value: String
        var expires: Date?
        var maxAge: Int64?
        var domain: String?
        var path: String?
        var secure = false
        var httpOnly = false
    }

    /// The largest name plus value the jar takes, the limit browsers and curl share.
    static let maximumSize = 4096

    /// Parses one `Set-Cookie` value, or `nil` when it must be ignored entirely.
    static func parseSetCookie(_ text: String) -> SetCookie? {
        var parts = split(text[...], at: ";")[...]
        // A pair without `=` is a nameless cookie to RFC 6265bis; curl and older agents drop it, and so do we.
        guard let pair = parts.popFirst(), let (rawName, rawValue) = splitOnce(pair, at: "=") else { return nil }
        let name = String(trimmingWhitespace(rawName))
        let value = String(trimmingWhitespace(rawValue))
        guard !name.isEmpty, name.utf8.count + value.utf8.count <= maximumSize,
            isStorable(name), isStorable(value)
        else { return nil }

        var cookie = SetCookie(name: name, value: value)
        // When an attribute repeats, the last one wins (5.3 step 3 and following take "the last attribute").
        for part in parts {
            let (rawAttribute, rawArgument) = splitOnce(part, at: "=") ?? (part, "")
            let attribute = trimmingWhitespace(rawAttribute)
            let argument = trimmingWhitespace(rawArgument)
            switch attribute.lowercased() {
            case "expires":
                if let date = parseDate(argument) { cookie.expires = date }
            case "max-age":
                if let seconds = parseDeltaSeconds(argument) { cookie.maxAge = seconds }
            case "domain":
                // An empty Domain is ignored, as 5.2.3 leaves it open and user agents do.
                let domain = argument.hasPrefix(".") ? argument.dropFirst() : argument
                if !domain.isEmpty { cookie.domain = domain.lowercased() }
            case "path":
                cookie.path = argument.hasPrefix("/") ? String(argument) : nil
            case "secure":
                cookie.secure = true
            case "httponly":
                cookie.httpOnly = true
            default:
                break
            }
        }
        return cookie
    }

    /// 5.2.2: an optional minus and digits; an overflowing number is as good as forever.
    static func parseDeltaSeconds(_ text: Substring) -> Int64? {
        let digits = text.hasPrefix("-") ? text.dropFirst() : text
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        let magnitude = Int64(digits) ?? Int64.max
        return text.hasPrefix("-") ? -magnitude : magnitude
    }

    /// Splits at every `separator` scalar. Characters would not do: `\r\n` is one Character, and a combining mark
    /// after a separator would hide it in a cluster.
    static func split(_ text: Substring, at separator: Unicode.Scalar) -> [Substring] {
        text.unicodeScalars.split(separator: separator, omittingEmptySubsequences: false).map(Substring.init)
    }

    /// The text before and after the first `separator` scalar, or `nil` without one.
    private static func splitOnce(_ text: Substring, at separator: Unicode.Scalar) -> (Substring, Substring)? {
        let scalars = text.unicodeScalars
        guard let index = scalars.firstIndex(of: separator) else { return nil }
        return (Substring(scalars[..<index]), Substring(scalars[scalars.index(after: index)...]))
    }

    private static func trimmingWhitespace(_ text: Substring) -> Substring {
        let isText: (Character) -> Bool = { $0 != " " && $0 != "\t" }
        guard let first = text.firstIndex(where: isText), let last = text.lastIndex(where: isText) else { return "" }
        return text[first...last]
    }
}

// MARK: - Dates (RFC 6265 5.1.1)

extension Cookie {
    /// Parses a cookie date with the algorithm of RFC 6265 5.1.1, which takes RFC 1123, RFC 850, asctime and the
    /// Netscape `dd-MMM-yyyy` forms alike, and the sloppy variants servers send; `nil` when it is not a date.
    static func parseDate(_ text: Substring) -> Date? {
        var time: (hour: Int, minute: Int, second: Int)?
        var day: Int?
        var month: Int?
        var year: Int?
        for token in Array(text.utf8).split(whereSeparator: isDateDelimiter) {
            if time == nil, let found = parseTime(token) {
                time = found
            } else if day == nil, let found = leadingNumber(token, digits: 1...2) {
                day = found
            } else if month == nil, let found = parseMonth(token) {
                month = found
            } else if year == nil, let found = leadingNumber(token, digits: 2...4) {
                year = found
            }
        }
        guard let time, let day, let month, var year else { return nil }
        if (70...99).contains(year) { year += 1900 } else if (0...69).contains(year) { year += 2000 }
        guard year >= 1601, time.hour <= 23, time.minute <= 59, time.second <= 59,
            day >= 1, day <= daysIn(month: month, year: year)
        else { return nil }
        let seconds =
            daysSinceEpoch(year: year, month: month, day: day) * 86_400
            + time.hour * 3600 + time.minute * 60 + time.second
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    private static func isDateDelimiter(_ byte: UInt8) -> Bool {
        byte == 0x09 || (0x20...0x2F).contains(byte) || (0x3B...0x40).contains(byte)
            || (0x5B...0x60).contains(byte) || (0x7B...0x7E).contains(byte)
    }

    private static func isDigit(_ byte: UInt8) -> Bool { byte >= 0x30 && byte <= 0x39 }

    /// The number a token starts with when it has `digits` of them and a non-digit (or nothing) after.
    private static func leadingNumber(_ token: ArraySlice<UInt8>, digits: ClosedRange<Int>) -> Int? {
        let number = token.prefix(while: isDigit)
        guard digits.contains(number.count) else { return nil }
        return number.reduce(0) { $0 * 10 + Int($1 - 0x30) }
    }

    /// `hh:mm:ss` with one or two digits each, then anything not starting with a digit.
    private static func parseTime(_ token: ArraySlice<UInt8>) -> (hour: Int, minute: Int, second: Int)? {
        var fields: [Int] = []
        var rest = token
        for index in 0..<3 {
            guard let number = leadingNumber(rest, digits: 1...2) else { return nil }
            fields.append(number)
            rest = rest.drop(while: isDigit)
            if index < 2 {
                guard rest.first == UInt8(ascii: ":") else { return nil }
                rest = rest.dropFirst()
            }
        }
        return (fields[0], fields[1], fields[2])
    }

    private static let monthNames = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ]

    private static func parseMonth(_ token: ArraySlice<UInt8>) -> Int? {
        guard token.count >= 3 else { return nil }
        let prefix = String(decoding: token.prefix(3), as: UTF8.self).lowercased()
        return monthNames.firstIndex(of: prefix).map { $0 + 1 }
    }

    private static func isLeapYear(_ year: Int) -> Bool {
        (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
    }

    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: isLeapYear(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days from 1970-01-01 in the proleptic Gregorian calendar (Howard Hinnant's `days_from_civil`): plain
    /// arithmetic, so no Calendar or DateFormatter, which are costly and not meant to be shared across threads.
    private static func daysSinceEpoch(year: Int, month: Int, day: Int) -> Int {
        let shiftedYear = month <= 2 ? year - 1 : year
        let era = (shiftedYear >= 0 ? shiftedYear : shiftedYear - 399) / 400
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}

// MARK: - The Netscape cookie file

extension Cookie {
    /// What the first line of a cookie file says; curl and wget write it, and some readers insist on it.
    static let fileHeader = """
        # Netscape HTTP Cookie File
        # https://curl.se/docs/http-cookies.html
        # This file was generated by Haul. Edit at your own risk.


        """

    /// Why a line of a cookie file is not a cookie. It never quotes the line: that would show the value.
    struct LineError: Error {
        var message: String
    }

    /// Parses one line of a cookie file: the cookie, or `nil` for a comment, a blank line or an expired cookie.
    static func parseFileLine(_ line: Substring, now: Date) throws(LineError) -> Cookie? {
        // Leading blanks are skipped as curl skips them; a CR is what is left of a CRLF file.
        var line = line.drop { $0 == " " || $0 == "\t" }
        if line.last == "\r" { line = line.dropLast() }
        var httpOnly = false
        if line.hasPrefix("#HttpOnly_") {
            httpOnly = true
            line = line.dropFirst("#HttpOnly_".count)
        } else if line.isEmpty || line.hasPrefix("#") {
            return nil
        }

        var fields = split(line, at: "\t")
        // curl reads a line whose empty value lost its trailing TAB (to an editor, say) as that empty value.
        if fields.count == 6 { fields.append("") }
        guard fields.count == 7 else {
            throw LineError(message: "expected 7 TAB-separated fields, found \(fields.count)")
        }
        guard fields.allSatisfy({ isStorable(String($0)) }) else {
            throw LineError(message: "a field holds a control character")
        }
        let domain = (fields[0].hasPrefix(".") ? fields[0].dropFirst() : fields[0]).lowercased()
        guard !domain.isEmpty else { throw LineError(message: "the domain field is empty") }
        guard let includeSubdomains = parseFlag(fields[1]) else {
            throw LineError(message: "the include-subdomains field (2) must be TRUE or FALSE")
        }
        guard fields[2].hasPrefix("/") else { throw LineError(message: "the path field (3) must start with '/'") }
        guard let secure = parseFlag(fields[3]) else {
            throw LineError(message: "the secure field (4) must be TRUE or FALSE")
        }
        guard let seconds = Int64(fields[4]), seconds >= 0 else {
            throw LineError(message: "the expiry field (5) must be seconds since 1970, or 0 for a session cookie")
        }
        guard !fields[5].isEmpty else { throw LineError(message: "the cookie name (field 6) is empty") }

        let cookie = Cookie(
            name: String(fields[5]), value: String(fields[6]), domain: domain, hostOnly: !includeSubdomains,
            path: String(fields[2]), secure: secure, httpOnly: httpOnly,
            expires: seconds == 0 ? nil : Date(timeIntervalSince1970: TimeInterval(seconds)), creation: now,
            sequence: 0)
        return cookie.isExpired(at: now) ? nil : cookie
    }

    private static func parseFlag(_ field: Substring) -> Bool? {
        switch field.uppercased() {
        case "TRUE": true
        case "FALSE": false
        default: nil
        }
    }

    /// The cookie as a line of a cookie file, without the line break.
    var fileLine: String {
        // A persistent cookie must not come out as 0, which reads back as a session cookie.
        let expiry = expires.map { Swift.max(1, Cookie.unixSeconds($0)) } ?? 0
        let fields = [
            (httpOnly ? "#HttpOnly_" : "") + (hostOnly ? domain : "." + domain), hostOnly ? "FALSE" : "TRUE", path,
            secure ? "TRUE" : "FALSE", String(expiry), name, value,
        ]
        return fields.joined(separator: "\t")
    }

    /// Whole seconds since 1970, saturating: a Max-Age of centuries must not trap.
    private static func unixSeconds(_ date: Date) -> Int64 {
        let seconds = date.timeIntervalSince1970.rounded(.down)
        if seconds >= 9.0e18 { return 9_000_000_000_000_000_000 }
        if seconds <= -9.0e18 { return -9_000_000_000_000_000_000 }
        return Int64(seconds)
    }
}
