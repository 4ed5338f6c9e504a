import Foundation

/// A JSON value as JSON-RPC carries it: parameters of any shape in, answers built by hand out.
public enum JSON: Sendable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSON])
    case object([String: JSON])

    /// The string, if this is one.
    public var string: String? { if case .string(let value) = self { value } else { nil } }
    /// The integer, if this is one (a number without a fraction).
    public var int: Int64? {
        switch self {
        case .int(let value): value
        case .double(let value) where value.rounded() == value && abs(value) < 9e15: Int64(value)
        default: nil
        }
    }
    /// The elements, if this is an array.
    public var array: [JSON]? { if case .array(let value) = self { value } else { nil } }
    /// The members, if this is an object.
    public var object: [String: JSON]? { if case .object(let value) = self { value } else { nil } }

    /// Parses `bytes` as one JSON text.
    public static func parse(_ bytes: some Collection<UInt8>) throws -> JSON {
        try JSONDecoder().decode(JSON.self, from: Data(bytes))
    }

    /// This value as compact JSON text.
    public func encoded() -> [UInt8] {
        // Encoding a JSON value cannot fail: every case is representable (non-finite doubles are not made here).
        (try? [UInt8](Self.encoder.encode(self))) ?? Array("null".utf8)
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return encoder
    }()
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
