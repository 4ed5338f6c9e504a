/// `Set-Cookie` fields as an HTTP library that keeps header fields in a dictionary hands them over: Foundation's
/// `HTTPURLResponse.allHeaderFields` joins repeated fields into one value with ", ", which every field but
/// `Set-Cookie` may be (RFC 9110 5.3; RFC 6265 3: "origin servers SHOULD NOT fold multiple Set-Cookie header fields
/// into a single header field").
package enum SetCookieFolding {
    /// The cookies of a folded `Set-Cookie` value: split at every comma that starts another cookie (optional blanks,
    /// then a token and `=`), never at one inside an attribute value such as an `Expires` date
    /// (`Wed, 09 Jun 2021 10:18:14 GMT`).
    package static func unfold(_ value: String) -> [String] {
        let bytes = Array(value.utf8)
        var cookies: [String] = []
        var start = 0
        var index = 0
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: ","), startsCookie(bytes, after: index) {
                cookies.append(trimmed(bytes[start..<index]))
                start = index + 1
            }
            index += 1
        }
        cookies.append(trimmed(bytes[start..<bytes.count]))
        return cookies.filter { !$0.isEmpty }
    }

    /// Whether the bytes after the comma at `comma` begin a cookie: blanks, a non-empty token, then `=`.
    private static func startsCookie(_ bytes: [UInt8], after comma: Int) -> Bool {
        var index = comma + 1
        while index < bytes.count, bytes[index] == UInt8(ascii: " ") || bytes[index] == UInt8(ascii: "\t") {
            index += 1
        }
        let nameStart = index
        while index < bytes.count, isTokenByte(bytes[index]) { index += 1 }
        return index > nameStart && index < bytes.count && bytes[index] == UInt8(ascii: "=")
    }

    /// RFC 9110 `tchar`.
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        default:
            "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }

    private static func trimmed(_ bytes: ArraySlice<UInt8>) -> String {
        var slice = bytes
        while let first = slice.first, first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") { slice.removeFirst() }
        while let last = slice.last, last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") { slice.removeLast() }
        return String(decoding: slice, as: UTF8.self)
    }
}
