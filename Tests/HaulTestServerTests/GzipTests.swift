@testable import HaulTestServer
import Testing

@Suite(.timeLimit(.minutes(1)))
struct GzipTests {
    struct Malformed: Error {}

    /// Decodes gzip made of stored deflate blocks only, checking CRC and size.
    static func gunzipStored(_ data: [UInt8]) throws -> [UInt8] {
        guard data.count >= 18, data[0] == 0x1F, data[1] == 0x8B, data[2] == 8 else { throw Malformed() }
        var offset = 10
        var out: [UInt8] = []
        while true {
            let header = data[offset]
            guard header & 0b110 == 0 else { throw Malformed() }
            let length = Int(data[offset + 1]) | Int(data[offset + 2]) << 8
            let complement = Int(data[offset + 3]) | Int(data[offset + 4]) << 8
            guard length ^ complement == 0xFFFF else { throw Malformed() }
            out += data[(offset + 5)..<(offset + 5 + length)]
            offset += 5 + length
            if header & 1 == 1 { break }
        }
        let crc = data[offset..<(offset + 4)].reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        let size = data[(offset + 4)..<(offset + 8)].reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        guard crc == Gzip.crc32(out), size == UInt32(out.count), offset + 8 == data.count else { throw Malformed() }
        return out
    }

    @Test func crc32MatchesTheStandardCheckValue() {
        #expect(Gzip.crc32(Array("123456789".utf8)) == 0xCBF4_3926)
    }

    @Test(arguments: [0, 1, 65535, 65536, 200_001])
    func roundTrips(size: Int) throws {
        let plain = TestServer.expectedBytes(name: "g", size: size)
        #expect(try Self.gunzipStored(Gzip.compress(plain)) == plain)
    }
}
