import Foundation
import HaulDaemon
import Testing

/// The daemon's own JSON: what clients send is parsed strictly and safely, what it answers is valid JSON that
/// Foundation reads back the same.
@Suite("JSON")
struct JSONTests {
    @Test("values parse as RFC 8259 says: numbers, escapes, surrogate pairs, nesting, white space")
    func parsing() throws {
        let text =
            #" { "a" : [1, -0, 2.5, 1e3, 9223372036854775807, 9223372036854775808, true, false, null],"#
            + #" "s": "q\"b\\s\/n\n\t\u00e9\ud83d\ude00", "e": {}, "l": [] } "#
        let value = try JSON.parse(Array(text.utf8))
        let members = try #require(value.object)
        #expect(
            members["a"]
                == [
                    1, 0, .double(2.5), .double(1000), .int(Int64.max), .double(9223372036854775808), true, false,
                    .null,
                ])
        #expect(members["s"] == .string("q\"b\\s/n\n\té😀"))
        #expect(members["e"] == .object([:]) && members["l"] == .array([]))
    }

    @Test(
        "what is not JSON is refused, saying where",
        arguments: [
            "", "[", "[1,]", "{\"a\" 1}", "{a: 1}", "01", "1.", "1e", "-", "tru", "\"open", "\"a\u{01}b\"",
            "\"\\x\"", "\"\\ud83d\"", "\"\\ude00\"", "[1] 2", "nul",
        ])
    func refused(text: String) {
        #expect(throws: JSONParseError.self, "\(text)") { try JSON.parse(Array(text.utf8)) }
    }

    @Test("a hostile text cannot exhaust the stack or smuggle invalid UTF-8")
    func hostile() throws {
        let deep = Array(repeating: UInt8(ascii: "["), count: 1_000_000)
        #expect(throws: JSONParseError.self) { try JSON.parse(deep) }
        let nested = String(repeating: "[", count: JSON.maximumDepth) + String(repeating: "]", count: JSON.maximumDepth)
        #expect(throws: Never.self) { try JSON.parse(Array(nested.utf8)) }
        #expect(throws: JSONParseError.self) { try JSON.parse([UInt8(ascii: "\""), 0xFF, 0xFE, UInt8(ascii: "\"")]) }
    }

    @Test("an answer is JSON that Foundation reads back the same, control characters and all")
    func encoding() throws {
        let value: JSON = [
            "text": .string("a\"b\\c/d\u{01}\n\r\té😀"), "numbers": [1, -2, .double(0.5), .double(.infinity)],
            "flags": [true, false, .null], "nested": ["x": [[]]],
        ]
        let bytes = value.encoded()
        let back = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
        #expect(back["text"] as? String == "a\"b\\c/d\u{01}\n\r\té😀")
        #expect(String(decoding: bytes, as: UTF8.self).contains("c/d"))  // slashes as they are
        #expect((back["numbers"] as? [Any])?.count == 4 && (back["numbers"] as? [Any])?.last is NSNull)
        #expect(try JSON.parse(bytes) == value.replacingInfinity)
    }
}

extension JSON {
    /// The value as it comes back from its encoding: a non-finite number is `null`.
    fileprivate var replacingInfinity: JSON {
        switch self {
        case .double(let value) where !value.isFinite: .null
        case .array(let elements): .array(elements.map(\.replacingInfinity))
        case .object(let members): .object(members.mapValues(\.replacingInfinity))
        default: self
        }
    }
}
