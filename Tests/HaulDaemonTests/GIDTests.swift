import HaulDaemon
import Testing

/// A GID as aria2 writes it: 16 lowercase hex digits, zeros in front.
@Suite("GID")
struct GIDTests {
    @Test("written as 16 lowercase hex digits with leading zeros, and read back as the same GID")
    func description() throws {
        #expect(try #require(GID(1)).description == "0000000000000001")
        #expect(try #require(GID(0xabc)).description == "0000000000000abc")
        #expect(try #require(GID(UInt64.max)).description == "ffffffffffffffff")
        #expect(try #require(GID(0x0123_4567_89ab_cdef)).description == "0123456789abcdef")
        #expect(try #require(GID(0xfedc_ba98_7654_3210)).description == "fedcba9876543210")
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<10_000 {
            let value = max(1, UInt64.random(in: 1...UInt64.max, using: &generator) >> UInt64.random(in: 0...63))
            let gid = try #require(GID(value))
            let digits = String(value, radix: 16)
            #expect(gid.description == String(repeating: "0", count: 16 - digits.count) + digits)
            #expect(GID(hex: gid.description) == gid)
        }
    }
}
