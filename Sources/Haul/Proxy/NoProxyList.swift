import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The hosts reached without a proxy, written as curl's `--noproxy` and `no_proxy` take them: a comma-separated list
/// of host names (each matching itself and its subdomains; a leading dot is allowed), IP addresses, networks in CIDR
/// notation (`10.0.0.0/8`, `fd00::/8`), any of them with `:PORT` to match that port only, `:PORT` alone for every host
/// on that port, or `*` for every host.
public struct NoProxyList: Sendable, Hashable, CustomStringConvertible {
    private enum Pattern: Hashable {
        case everything
        case port(Int)
        case domain(String, port: Int?)
        case network([UInt8], prefixLength: Int, port: Int?)
    }

    private let patterns: [Pattern]
    /// The list as given.
    public let description: String

    /// Parses a list; entries that are empty are skipped.
    public init(_ list: String = "") {
        description = list
        patterns = list.split(separator: ",").compactMap { Self.pattern(String($0)) }
    }

    /// Whether a request to `host` (a name or an address, IPv6 with or without brackets) on `port` goes direct.
    public func matches(host: String, port: Int) -> Bool {
        var host = host.lowercased()
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host.hasSuffix(".") { host.removeLast() }
        let address = Self.addressBytes(host)
        for pattern in patterns {
            switch pattern {
            case .everything:
                return true
            case .port(let only):
                if only == port { return true }
            case .domain(let domain, let only):
                guard only == nil || only == port else { continue }
                if host == domain || host.hasSuffix("." + domain) { return true }
            case .network(let network, let prefixLength, let only):
                guard only == nil || only == port, let address, address.count == network.count else { continue }
                if Self.prefix(of: address, equals: network, bits: prefixLength) { return true }
            }
        }
        return false
    }

    private static func pattern(_ entry: String) -> Pattern? {
        var text = entry.trimmingCharacters(in: .whitespaces).lowercased()
        if text.isEmpty { return nil }
        if text == "*" { return .everything }
        var port: Int?
        // `host:port` and `[v6]:port`; a bare IPv6 address has several colons and no port.
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            let after = text[text.index(after: close)...]
            if after.hasPrefix(":") { port = Int(after.dropFirst()) }
            text = String(text[text.index(after: text.startIndex)..<close])
        } else if text.filter({ $0 == ":" }).count == 1, let colon = text.firstIndex(of: ":") {
            port = Int(text[text.index(after: colon)...])
            text = String(text[..<colon])
            // `:PORT` alone: every host on that port.
            if text.isEmpty { return port.map { .port($0) } }
        }
        var prefixLength: Int?
        if let slash = text.firstIndex(of: "/") {
            prefixLength = Int(text[text.index(after: slash)...])
            text = String(text[..<slash])
        }
        if let address = addressBytes(text) {
            let bits = min(prefixLength ?? address.count * 8, address.count * 8)
            return .network(address, prefixLength: max(0, bits), port: port)
        }
        while text.hasPrefix(".") { text.removeFirst() }
        if text.hasSuffix(".") { text.removeLast() }
        return text.isEmpty ? nil : .domain(text, port: port)
    }

    /// The bytes of an IPv4 or IPv6 address (4 or 16), or `nil` for a name.
    package static func addressBytes(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            return withUnsafeBytes(of: &v4) { Array($0) }
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            return withUnsafeBytes(of: &v6) { Array($0) }
        }
        return nil
    }

    private static func prefix(of address: [UInt8], equals network: [UInt8], bits: Int) -> Bool {
        var remaining = bits
        for (a, b) in zip(address, network) where remaining > 0 {
            let mask: UInt8 = remaining >= 8 ? 0xFF : ~(0xFF >> UInt8(remaining))
            if a & mask != b & mask { return false }
            remaining -= 8
        }
        return true
    }
}
