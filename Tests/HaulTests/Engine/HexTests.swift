import Foundation
import Testing

@testable import Haul

/// Digests as text: what results, journal records and `checksum=` lines carry.
@Suite("Hex digests")
struct HexTests {
    @Test("every byte as two lower-case digits, and back")
    func roundTrip() throws {
        let bytes = [UInt8](0...255)
        let expected = bytes.map { String(format: "%02x", $0) }.joined()
        #expect(bytes.hexString == expected)
        #expect([UInt8]().hexString == "")
        #expect([UInt8](hex: expected) == bytes)
        #expect([UInt8](hex: expected.uppercased()) == bytes)
    }
}
