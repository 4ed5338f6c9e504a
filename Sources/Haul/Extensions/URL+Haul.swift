import Foundation

extension URL {
    /// The URL's scheme as its string spells it, read in place: `URL.scheme` makes a new string on every call, and
    /// the scheme is checked for every download (~0.3% of a batch of small files each time).
    package var schemeBytes: Substring.UTF8View {
        absoluteString.utf8.prefix { $0 != UInt8(ascii: ":") }
    }
}

extension Substring.UTF8View {
    /// Whether these bytes spell `letters` (lower-case ASCII letters only) in any case.
    package func equalsIgnoringCase(_ letters: StaticString) -> Bool {
        letters.withUTF8Buffer { letters in elementsEqual(letters) { $0 | 0x20 == $1 } }
    }
}
