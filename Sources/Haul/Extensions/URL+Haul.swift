public import Foundation

extension URL {
    /// The URL as text with its password, if it has one, replaced by `***` (`https://user:***@host/file`): what
    /// messages, logs and events show, so that a password in a URL is never printed.
    public var redactedString: String {
        guard password != nil, var components = URLComponents(url: self, resolvingAgainstBaseURL: false) else {
            return absoluteString
        }
        components.percentEncodedPassword = "***"
        return components.string ?? absoluteString
    }
}

/// Text given as a URL, which need not parse as one (an input line, an argument, a proxy setting), as a message or
/// the argument vector shows it: never with the password of its user info.
package enum URLText {
    /// The byte offsets of the password in `[scheme://]user:password@host...`; with `requiringScheme`, only text
    /// with a `scheme://` counts as a URL.
    package static func passwordRange(in bytes: [UInt8], requiringScheme: Bool = false) -> Range<Int>? {
        let separator = Array("://".utf8)
        let scheme = bytes.indices.first { bytes[$0...].starts(with: separator) }
        if scheme == nil, requiringScheme { return nil }
        let start = scheme.map { $0 + separator.count } ?? 0
        // The authority ends at the first `/`, `?` or `#`; its user info at its last `@`.
        let authorityEnd =
            bytes[start...].firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }
            ?? bytes.count
        guard let at = bytes[start..<authorityEnd].lastIndex(of: UInt8(ascii: "@")),
            let colon = bytes[start..<at].firstIndex(of: UInt8(ascii: ":")), colon + 1 < at
        else { return nil }
        return (colon + 1)..<at
    }

    /// `text` with the password of its user info, if it has one, replaced by `mask`.
    package static func redacted(_ text: String, mask: String = "***") -> String {
        let bytes = Array(text.utf8)
        guard let password = passwordRange(in: bytes) else { return text }
        return String(decoding: bytes[..<password.lowerBound], as: UTF8.self) + mask
            + String(decoding: bytes[password.upperBound...], as: UTF8.self)
    }
}
