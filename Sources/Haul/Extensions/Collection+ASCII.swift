import Foundation

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
