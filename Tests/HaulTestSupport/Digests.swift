import Foundation
import Crypto

/// The SHA-256 of `bytes` in hex.
public func sha256Hex(_ bytes: [UInt8]) -> String {
    SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
}

/// The SHA-512 of `bytes` in hex.
public func sha512Hex(_ bytes: [UInt8]) -> String {
    SHA512.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
}
