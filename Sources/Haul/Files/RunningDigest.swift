import Crypto
import Foundation

/// The digests a download asked for, fed while its bytes are written so that verifying never reads the file again:
/// the request's own algorithm (its expected digest), and SHA-256 for the result and the journal when the downloader
/// computes it (``Downloader/Configuration/computesSHA256``). With neither, nothing is hashed: hashing is most of the
/// CPU a large download costs (bench/compare, s1).
struct RunningDigest {
    private var sha256: SHA256?
    private var extra: Extra?

    private enum Extra {
        case sha384(SHA384)
        case sha512(SHA512)
    }

    /// Whether any digest is computed.
    var isEmpty: Bool { sha256 == nil && extra == nil }

    init(sha256 wantsSHA256: Bool, also algorithm: Digest.Algorithm?) {
        sha256 = wantsSHA256 || algorithm == .sha256 ? SHA256() : nil
        switch algorithm {
        case .sha384: extra = .sha384(SHA384())
        case .sha512: extra = .sha512(SHA512())
        case .sha256, nil: extra = nil
        }
    }

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        sha256?.update(bufferPointer: bytes)
        switch extra {
        case .sha384(var hasher):
            hasher.update(bufferPointer: bytes)
            extra = .sha384(hasher)
        case .sha512(var hasher):
            hasher.update(bufferPointer: bytes)
            extra = .sha512(hasher)
        case nil: break
        }
    }

    /// Feeds the bytes of the file at `path`: the first `count` (the bytes an earlier run left in a partial), or
    /// all of them when `count` is `nil`.
    mutating func update(fileAt path: String, count: Int64? = nil) throws {
        guard let handle = FileHandle(forReadingAtPath: path) else { throw CocoaError(.fileReadNoSuchFile) }
        defer { try? handle.close() }
        var left = count ?? .max
        while left > 0, let data = try handle.read(upToCount: Int(min(left, 1 << 20))), !data.isEmpty {
            data.withUnsafeBytes { update($0) }
            left -= Int64(data.count)
        }
        guard count == nil || left == 0 else { throw CocoaError(.fileReadCorruptFile) }
    }

    /// The SHA-256, if computed, and the requested algorithm's digest, if one was asked for.
    func finalize(for algorithm: Digest.Algorithm?) -> (sha256: [UInt8]?, requested: [UInt8]?) {
        let sha = sha256.map { Array($0.finalize()) }
        switch (algorithm, extra) {
        case (.sha256?, _): return (sha, sha)
        case (_, .sha384(let hasher)?): return (sha, Array(hasher.finalize()))
        case (_, .sha512(let hasher)?): return (sha, Array(hasher.finalize()))
        default: return (sha, nil)
        }
    }
}
