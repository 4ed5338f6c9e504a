import NIOSSL

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Whether a server's certificate names a host, by RFC 6125's rules: a host name matches a DNS name of the
/// certificate's subject alternative names (its whole leftmost label may be `*`), an IP address matches an IP address
/// of them. A certificate without subject alternative names names nothing (browsers have refused the common name
/// since 2017).
enum CertificateIdentity {
    static func names(_ host: String, in certificate: NIOSSLCertificate) -> Bool {
        let address = Self.addressBytes(host)
        let name = Array(host.lowercased().utf8.reversed().drop { $0 == UInt8(ascii: ".") }.reversed())
        for alternative in certificate._subjectAlternativeNames() {
            switch alternative.nameType {
            case .ipAddress:
                if let address, Array(alternative.contents) == address { return true }
            case .dnsName:
                if address == nil, matches(name, Array(alternative.contents)) { return true }
            default:
                continue
            }
        }
        return false
    }

    /// The bytes of `host` when it is an IP address (IPv6 with or without its brackets).
    private static func addressBytes(_ host: String) -> [UInt8]? {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        for (family, count) in [(AF_INET, 4), (AF_INET6, 16)] {
            var bytes = [UInt8](repeating: 0, count: count)
            if inet_pton(family, bare, &bytes) == 1 { return bytes }
        }
        return nil
    }

    /// Whether `name` (lowercased, without a trailing dot) matches the DNS name `pattern`.
    private static func matches(_ name: [UInt8], _ pattern: [UInt8]) -> Bool {
        var pattern = pattern.map { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") ? $0 + 32 : $0 }
        if pattern.last == UInt8(ascii: ".") { pattern.removeLast() }
        guard !pattern.isEmpty, !name.isEmpty else { return false }
        guard pattern.starts(with: Array("*.".utf8)) else { return pattern == name }
        // `*.example.com`: exactly one label in its place, never the whole name, and not a public suffix's sibling
        // (`*.com`: the pattern must keep two labels).
        let suffix = pattern.dropFirst(1)
        guard suffix.dropFirst().contains(UInt8(ascii: ".")),
            let dot = name.firstIndex(of: UInt8(ascii: ".")), dot > 0
        else { return false }
        return Array(name[dot...]) == Array(suffix)
    }
}
