import Foundation

/// A JSON value as JSON-RPC carries it: parameters of any shape in, answers built by hand out.
public enum JSON: Sendable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSON])
    case object([String: JSON])
    /// JSON text the daemon wrote itself, carried as it is into an answer: the status lists clients ask for every
    /// second are written straight to bytes instead of being built as values first. Read through the accessors
    /// (and compared) as the value it encodes.
    case encoded(EncodedJSON)

    /// The string, if this is one.
    public var string: String? { if case .string(let value) = decoded { value } else { nil } }
    /// The integer, if this is one (a number without a fraction).
    public var int: Int64? {
        switch decoded {
        case .int(let value): value
        case .double(let value) where value.rounded() == value && abs(value) < 9e15: Int64(value)
        default: nil
        }
    }
    /// The elements, if this is an array.
    public var array: [JSON]? { if case .array(let value) = decoded { value } else { nil } }
    /// The members, if this is an object.
    public var object: [String: JSON]? { if case .object(let value) = decoded { value } else { nil } }

    /// The value itself, an ``encoded(_:)`` text parsed.
    public var decoded: JSON {
        guard case .encoded(let text) = self else { return self }
        // Written by the daemon's own writer: valid JSON (JSONTests and the status tests read it back).
        return (try? JSON.parse(text.bytes)) ?? .null
    }

    /// Parses `bytes` as one JSON text (RFC 8259): at most ``maximumDepth`` arrays and objects deep, strings valid
    /// UTF-8; a number without a fraction or exponent that fits is an ``int(_:)``, any other a ``double(_:)``.
    ///
    /// - Throws: ``JSONParseError`` saying where the text went wrong.
    public static func parse(_ bytes: some Collection<UInt8>) throws -> JSON {
        let parsed: Result<JSON, JSONParseError>? = bytes.withContiguousStorageIfAvailable { buffer in
            var parser = JSONParser(buffer)
            return Result { () throws(JSONParseError) in try parser.document() }
        }
        if let parsed { return try parsed.get() }
        let copy = Array(bytes)
        return try copy.withUnsafeBufferPointer { buffer throws(JSONParseError) in
            var parser = JSONParser(buffer)
            return try parser.document()
        }
    }

    /// The deepest nesting of arrays and objects ``parse(_:)`` accepts: far beyond any JSON-RPC call, and a
    /// bound on the stack a hostile text can make the parser use.
    public static let maximumDepth = 256

    /// This value as compact JSON text (slashes not escaped; a non-finite number, which JSON cannot carry, as
    /// `null`).
    public func encoded() -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(256)
        write(to: &output)
        return output
    }

    /// Appends this value as compact JSON text to `output`.
    func write(to output: inout [UInt8]) {
        switch self {
        case .null: output.append(contentsOf: Self.nullText)
        case .bool(let value): output.append(contentsOf: value ? Self.trueText : Self.falseText)
        case .int(let value): output.append(contentsOf: String(value).utf8)
        case .double(let value):
            if value.isFinite {
                output.append(contentsOf: value.description.utf8)
            } else {
                output.append(contentsOf: Self.nullText)
            }
        case .string(let value): Self.write(value, to: &output)
        case .encoded(let text): output.append(contentsOf: text.bytes)
        case .array(let elements):
            output.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                element.write(to: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let members):
            output.append(UInt8(ascii: "{"))
            var first = true
            for (name, value) in members {
                if !first { output.append(UInt8(ascii: ",")) }
                first = false
                Self.write(name, to: &output)
                output.append(UInt8(ascii: ":"))
                value.write(to: &output)
            }
            output.append(UInt8(ascii: "}"))
        }
    }

    private static let nullText = Array("null".utf8)
    private static let hexDigits = Array("0123456789abcdef".utf8)
    private static let trueText = Array("true".utf8)
    private static let falseText = Array("false".utf8)

    /// Appends `text` as a JSON string: `"` and `\` escaped, control characters as `\n`, `\t`... or `\u00XX`.
    static func write(_ text: String, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        writeContents(text, to: &output)
        output.append(UInt8(ascii: "\""))
    }

    /// Appends `text` escaped as inside a JSON string, without the quotes.
    static func writeContents(_ text: String, to output: inout [UInt8]) {
        // Most strings (GIDs, numbers, paths) need no escape: copied whole.
        let utf8 = text.utf8
        if !utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            output.append(contentsOf: utf8)
            return
        }
        for byte in utf8 {
            switch byte {
            case UInt8(ascii: "\""): output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20:
                output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
                output.append(Self.hexDigits[Int(byte >> 4)])
                output.append(Self.hexDigits[Int(byte & 0x0F)])
            default: output.append(byte)
            }
        }
    }
}

extension JSON: Hashable {
    /// Whether the two are the same value, however each is held.
    public static func == (left: JSON, right: JSON) -> Bool {
        switch (left, right) {
        case (.encoded(let a), .encoded(let b)) where a == b: true
        case (.encoded, _), (_, .encoded): left.decoded.same(as: right.decoded)
        default: left.same(as: right)
        }
    }

    private func same(as other: JSON) -> Bool {
        switch (self, other) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.int(let a), .int(let b)): a == b
        case (.double(let a), .double(let b)): a == b
        case (.string(let a), .string(let b)): a == b
        case (.array(let a), .array(let b)): a == b
        case (.object(let a), .object(let b)): a == b
        default: false
        }
    }

    /// Hashes the value, however it is held.
    public func hash(into hasher: inout Hasher) {
        switch decoded {
        case .null: hasher.combine(0)
        case .bool(let value): hasher.combine(value)
        case .int(let value): hasher.combine(value)
        case .double(let value): hasher.combine(value)
        case .string(let value): hasher.combine(value)
        case .array(let value): hasher.combine(value)
        case .object(let value): hasher.combine(value)
        case .encoded: hasher.combine(1)
        }
    }
}

/// JSON text written by the daemon itself (see ``JSON/encoded(_:)``); made only inside this module, so it is valid.
public struct EncodedJSON: Sendable, Hashable {
    let bytes: [UInt8]

    init(_ bytes: [UInt8]) { self.bytes = bytes }
}

/// Why a text is not JSON, and where.
public struct JSONParseError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The byte offset where parsing stopped.
    public var offset: Int
    /// What was wrong there.
    public var reason: String

    /// A short description.
    public var description: String { "not JSON at byte \(offset): \(reason)" }
}

/// A recursive-descent JSON parser over bytes in memory.
private struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    var depth = 0

    init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// One value and nothing after it but white space.
    mutating func document() throws(JSONParseError) -> JSON {
        let value = try self.value()
        skipWhitespace()
        guard index == bytes.count else { throw failure("text after the value") }
        return value
    }

    func failure(_ reason: String) -> JSONParseError { JSONParseError(offset: index, reason: reason) }

    mutating func skipWhitespace() {
        while index < bytes.count, [0x20, 0x0A, 0x0D, 0x09].contains(bytes[index]) { index += 1 }
    }

    mutating func value() throws(JSONParseError) -> JSON {
        skipWhitespace()
        guard index < bytes.count else { throw failure("the text ends where a value should be") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try object()
        case UInt8(ascii: "["): return try array()
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): return try literal("true", .bool(true))
        case UInt8(ascii: "f"): return try literal("false", .bool(false))
        case UInt8(ascii: "n"): return try literal("null", .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw failure("no value starts with this byte")
        }
    }

    mutating func literal(_ word: StaticString, _ value: JSON) throws(JSONParseError) -> JSON {
        let count = word.utf8CodeUnitCount
        guard index + count <= bytes.count,
            UnsafeBufferPointer(rebasing: bytes[index..<index + count]).elementsEqual(
                UnsafeBufferPointer(start: word.utf8Start, count: count))
        else { throw failure("not a literal") }
        index += count
        return value
    }

    mutating func nested<T>(_ body: (inout JSONParser) throws(JSONParseError) -> T) throws(JSONParseError) -> T {
        depth += 1
        guard depth <= JSON.maximumDepth else { throw failure("nested deeper than \(JSON.maximumDepth)") }
        defer { depth -= 1 }
        return try body(&self)
    }

    /// Consumes `byte` if it comes next.
    mutating func take(_ byte: UInt8) -> Bool {
        guard index < bytes.count, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    /// After an element of an array or object: whether `close` ends it, else the `,` before the next element.
    mutating func ends(with close: UInt8, _ what: String) throws(JSONParseError) -> Bool {
        skipWhitespace()
        if take(close) { return true }
        guard index < bytes.count else { throw failure("\(what) is not closed") }
        guard take(UInt8(ascii: ",")) else {
            throw failure("expected ',' or '\(Character(Unicode.Scalar(close)))' in \(what)")
        }
        return false
    }

    mutating func array() throws(JSONParseError) -> JSON {
        try nested { (parser: inout JSONParser) throws(JSONParseError) -> JSON in
            parser.index += 1
            var elements: [JSON] = []
            parser.skipWhitespace()
            if parser.take(UInt8(ascii: "]")) { return .array(elements) }
            repeat {
                elements.append(try parser.value())
            } while try !parser.ends(with: UInt8(ascii: "]"), "an array")
            return .array(elements)
        }
    }

    mutating func object() throws(JSONParseError) -> JSON {
        try nested { (parser: inout JSONParser) throws(JSONParseError) -> JSON in
            parser.index += 1
            var members: [String: JSON] = [:]
            parser.skipWhitespace()
            if parser.take(UInt8(ascii: "}")) { return .object(members) }
            repeat {
                parser.skipWhitespace()
                guard parser.index < parser.bytes.count, parser.bytes[parser.index] == UInt8(ascii: "\"") else {
                    throw parser.failure("expected a member's name in quotes")
                }
                let name = try parser.string()
                parser.skipWhitespace()
                guard parser.take(UInt8(ascii: ":")) else { throw parser.failure("expected ':' after a member's name") }
                members[name] = try parser.value()
            } while try !parser.ends(with: UInt8(ascii: "}"), "an object")
            return .object(members)
        }
    }

    /// A string, its opening quote at `index`.
    mutating func string() throws(JSONParseError) -> String {
        index += 1
        let start = index
        // Most strings have no escape: taken whole.
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let text = try validated(UnsafeBufferPointer(rebasing: bytes[start..<index]))
                index += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            guard byte >= 0x20 else { throw failure("a control character in a string") }
            index += 1
        }
        var scalars = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                return try scalars.withUnsafeBufferPointer { buffer throws(JSONParseError) in try validated(buffer) }
            case UInt8(ascii: "\\"):
                guard index < bytes.count else { break }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): scalars.append(escape)
                case UInt8(ascii: "b"): scalars.append(0x08)
                case UInt8(ascii: "f"): scalars.append(0x0C)
                case UInt8(ascii: "n"): scalars.append(0x0A)
                case UInt8(ascii: "r"): scalars.append(0x0D)
                case UInt8(ascii: "t"): scalars.append(0x09)
                case UInt8(ascii: "u"):
                    var code = try hex4()
                    if (0xD800..<0xDC00).contains(code) {
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                            bytes[index + 1] == UInt8(ascii: "u")
                        else { throw failure("a lone high surrogate") }
                        index += 2
                        let low = try hex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw failure("a lone high surrogate") }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00..<0xE000).contains(code) {
                        throw failure("a lone low surrogate")
                    }
                    guard let scalar = Unicode.Scalar(code) else { throw failure("not a Unicode scalar") }
                    scalars.append(contentsOf: String(Character(scalar)).utf8)
                default: throw failure("an unknown escape")
                }
            default:
                guard byte >= 0x20 else { throw failure("a control character in a string") }
                scalars.append(byte)
            }
        }
        throw failure("a string is not closed")
    }

    mutating func hex4() throws(JSONParseError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw failure("a \\u escape is cut short") }
        var code: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw failure("not a hex digit in a \\u escape")
            }
            code = code << 4 | UInt32(digit)
            index += 1
        }
        return code
    }

    func validated(_ buffer: UnsafeBufferPointer<UInt8>) throws(JSONParseError) -> String {
        guard let text = String(validating: buffer, as: UTF8.self) else { throw failure("a string is not UTF-8") }
        return text
    }

    mutating func number() throws(JSONParseError) -> JSON {
        let start = index
        var integral = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) else {
            throw failure("a number without digits")
        }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else {
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            integral = false
            index += 1
            let digits = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            guard index > digits else { throw failure("a fraction without digits") }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            integral = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            let digits = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            guard index > digits else { throw failure("an exponent without digits") }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if integral, let value = Int64(text) { return .int(value) }
        guard let value = Double(text) else { throw failure("a number out of range") }
        return .double(value)
    }
}

extension JSON: Codable {
    /// Decodes any JSON value.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .int(value)
        } else if let value = try? container.decode(Double.self) {
            self = .double(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSON].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSON].self))
        }
    }

    /// Encodes the value as it is.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        case .encoded: try container.encode(decoded)
        }
    }
}

extension JSON: ExpressibleByStringLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral,
    ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral
{
    /// An integer value.
    public init(integerLiteral value: Int64) { self = .int(value) }
    /// A Boolean value.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// A string value.
    public init(stringLiteral value: String) { self = .string(value) }
    /// An array value.
    public init(arrayLiteral elements: JSON...) { self = .array(elements) }
    /// An object value.
    public init(dictionaryLiteral elements: (String, JSON)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}
