import Foundation

extension URL {
    /// The URL's scheme as its string spells it, read in place: `URL.scheme` makes a new string on every call, and
    /// the scheme is checked for every download (~0.3% of a batch of small files each time).
    package var schemeBytes: Substring.UTF8View {
        absoluteString.utf8.prefix { $0 != UInt8(ascii: ":") }
    }
}

extension Collection where Element == UInt8 {
    /// Whether these bytes spell `word` (lower-case ASCII), its letters in any case and everything else exactly.
    /// Inlinable: it runs on every response's framing fields and every download's scheme.
    @inlinable
    package func equalsIgnoringCase(_ word: StaticString) -> Bool {
        word.withUTF8Buffer { word in
            elementsEqual(word) { byte, expected in
                byte == expected
                    || (expected >= UInt8(ascii: "a") && expected <= UInt8(ascii: "z") && byte | 0x20 == expected)
            }
        }
    }
}
