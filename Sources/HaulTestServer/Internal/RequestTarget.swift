import Foundation

/// A request target split into path and decoded query items, without Foundation's URL parsing on the
/// fast path (most requests carry one or two parameters).
struct RequestTarget {
    /// The path as sent (still percent-encoded).
    var path: Substring
    /// The raw query after `?`, or empty.
    var rawQuery: Substring
    /// Decoded `name=value` pairs in order; `+` means space, as in HTML forms.
    var queryItems: [(name: String, value: String)]

    init(_ target: String) {
        if let mark = target.firstIndex(of: "?") {
            path = target[..<mark]
            rawQuery = target[target.index(after: mark)...]
        } else {
            path = target[...]
            rawQuery = ""
        }
        queryItems = rawQuery.split(separator: "&").map { pair in
            guard let equals = pair.firstIndex(of: "=") else { return (Self.decode(pair), "") }
            return (Self.decode(pair[..<equals]), Self.decode(pair[pair.index(after: equals)...]))
        }
    }

    func value(_ name: String) -> String? {
        queryItems.first { $0.name == name }?.value
    }

    static func decode(_ component: Substring, plusIsSpace: Bool = true) -> String {
        guard component.contains("%") || (plusIsSpace && component.contains("+")) else { return String(component) }
        let spaced = plusIsSpace ? component.replacingOccurrences(of: "+", with: " ") : String(component)
        return spaced.removingPercentEncoding ?? spaced
    }

    /// The same target with `redirects=N` replaced by `redirects=count`.
    func replacingRedirectCount(with count: Int) -> String {
        let pieces = rawQuery.split(separator: "&").map { piece in
            piece.hasPrefix("redirects=") ? "redirects=\(count)" : String(piece)
        }
        return String(path) + "?" + pieces.joined(separator: "&")
    }
}
