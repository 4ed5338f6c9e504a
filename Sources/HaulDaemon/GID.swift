/// A download's identity in aria2's RPC: 64 bits, written as 16 hex digits.
public struct GID: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The number.
    public let value: UInt64

    /// The GID `value` (not 0).
    public init?(_ value: UInt64) {
        guard value != 0 else { return nil }
        self.value = value
    }

    /// Parses exactly 16 hex digits (what the `gid` option takes).
    public init?(hex: String) {
        guard hex.utf8.count == 16, let value = UInt64(hex, radix: 16) else { return nil }
        self.init(value)
    }

    /// A random GID.
    public static func random() -> GID {
        var generator = SystemRandomNumberGenerator()
        return GID(unchecked: UInt64.random(in: 1...UInt64.max, using: &generator))
    }

    private init(unchecked value: UInt64) { self.value = value }

    /// The 16 lowercase hex digits.
    public var description: String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }

    /// Orders by number.
    public static func < (lhs: GID, rhs: GID) -> Bool { lhs.value < rhs.value }
}
