/// Gzip with stored (uncompressed) deflate blocks: valid for every decoder, no zlib needed.
enum Gzip {
    private static let crcTable: [UInt32] = (0..<256).map { index in
        var crc = UInt32(index)
        for _ in 0..<8 {
            crc = crc & 1 != 0 ? 0xEDB8_8320 ^ (crc >> 1) : crc >> 1
        }
        return crc
    }

    static func crc32(_ bytes: some Sequence<UInt8>, seed: UInt32 = 0) -> UInt32 {
        var crc = ~seed
        crcTable.withUnsafeBufferPointer { table in
            for byte in bytes {
                crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8)
            }
        }
        return ~crc
    }

    static func compress(_ data: [UInt8]) -> [UInt8] {
        let maxBlock = 65_535
        var out: [UInt8] = [0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 0xFF]
        out.reserveCapacity(data.count + data.count / maxBlock * 5 + 23)
        var offset = 0
        repeat {
            let length = min(maxBlock, data.count - offset)
            let isFinal = offset + length == data.count
            out.append(isFinal ? 1 : 0)
            let len = UInt16(length)
            out += [UInt8(len & 0xFF), UInt8(len >> 8), UInt8(~len & 0xFF), UInt8(~len >> 8)]
            out += data[offset..<(offset + length)]
            offset += length
        } while offset < data.count
        let crc = crc32(data)
        let size = UInt32(truncatingIfNeeded: data.count)
        for value in [crc, size] {
            out += [UInt8(value & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value >> 16 & 0xFF), UInt8(value >> 24)]
        }
        return out
    }
}
