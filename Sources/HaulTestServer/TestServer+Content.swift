extension TestServer {
    /// The bytes `/bytes/NAME?size=SIZE` serves, for checking a download without fixtures.
    ///
    /// - Parameters:
    ///   - name: The `NAME` path component (decoded).
    ///   - size: The `size` query parameter.
    ///   - version: The content version; 0 unless `changeAfterFirst` bumped it (request n gets n - 1).
    ///   - range: The slice wanted; the whole body when `nil`.
    public static func expectedBytes(name: String, size: Int, version: Int = 0, range: Range<Int>? = nil) -> [UInt8] {
        let range = (range ?? 0..<size).clamped(to: 0..<max(0, size))
        var bytes = [UInt8](repeating: 0, count: range.count)
        let content = GeneratedContent(name: name, version: version)
        bytes.withUnsafeMutableBytes { content.fill($0, from: range.lowerBound) }
        return bytes
    }

    /// The strong `ETag` sent for `/bytes/NAME?size=SIZE` at a content version, quotes included.
    public static func entityTag(name: String, size: Int, version: Int = 0) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in "\(name)\u{0}\(size)\u{0}\(version)".utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3
        }
        return "\"" + String(hash, radix: 16) + "\""
    }
}
