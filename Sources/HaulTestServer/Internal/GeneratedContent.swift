/// The deterministic bytes served under `/bytes/NAME`: a 64 KiB table derived from the name (and content
/// version) by splitmix64, plus a per-64-KiB offset, so every position has its own byte pattern and a
/// resume at the wrong offset produces different bytes.
struct GeneratedContent: Sendable {
    static let tableSize = 1 << 16

    /// The 64 KiB table; `byte(i) = table[i & 0xFFFF] &+ UInt8(truncatingIfNeeded: (i >> 16) &* 131)`.
    let table: [UInt8]

    init(name: String, version: Int) {
        // FNV-1a over the name and version gives the splitmix64 seed; any stable hash works, this one
        // needs no dependency and is identical on every platform.
        var seed: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in name.utf8 {
            seed = (seed ^ UInt64(byte)) &* 0x100_0000_01b3
        }
        seed = (seed ^ UInt64(truncatingIfNeeded: version)) &* 0x100_0000_01b3
        var table = [UInt8](repeating: 0, count: Self.tableSize)
        table.withUnsafeMutableBytes { raw in
            var state = seed
            for index in 0..<(Self.tableSize / 8) {
                state = state &+ 0x9e37_79b9_7f4a_7c15
                var mixed = state
                mixed = (mixed ^ (mixed >> 30)) &* 0xbf58_476d_1ce4_e5b9
                mixed = (mixed ^ (mixed >> 27)) &* 0x94d0_49bb_1331_11eb
                mixed ^= mixed >> 31
                raw.storeBytes(of: mixed.littleEndian, toByteOffset: index * 8, as: UInt64.self)
            }
        }
        self.table = table
    }

    /// Writes the bytes of `offset ..< offset + destination.count` into `destination`.
    func fill(_ destination: UnsafeMutableRawBufferPointer, from offset: Int) {
        guard let base = destination.baseAddress else { return }
        let out = base.assumingMemoryBound(to: UInt8.self)
        table.withUnsafeBufferPointer { tablePointer in
            guard let source = tablePointer.baseAddress else { return }  // the table is never empty
            var position = offset
            var written = 0
            let total = destination.count
            // Within one 64 KiB segment the added value is constant: copy the table run, then add
            // the constant in a loop the optimiser vectorises. No per-byte branching.
            while written < total {
                let start = position & (Self.tableSize - 1)
                let run = min(Self.tableSize - start, total - written)
                let add = UInt8(truncatingIfNeeded: (position >> 16) &* 131)
                let target = out + written
                target.update(from: source + start, count: run)
                if add != 0 {
                    for index in 0..<run {
                        target[index] &+= add
                    }
                }
                written += run
                position += run
            }
        }
    }
}
