/// SplitMix64: a small, fast, seedable generator, so that a randomised test fails the same way every time it is
/// run with the seed it names.
package struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    package init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }

    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A number in `0..<bound`.
    package mutating func next(below bound: Int) -> Int { Int(next() % UInt64(bound)) }
}
