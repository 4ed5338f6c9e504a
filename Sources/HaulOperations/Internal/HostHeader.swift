/// The rule the package's loopback servers apply to a request's `Host` header against DNS rebinding.
package enum HostHeader {
    /// Whether `host` (a `Host` header's value) names its server by an address or `localhost`: a DNS name could be
    /// a rebinding one, a web page's own name made to resolve to the loopback address so that its scripts read what
    /// the server answers.
    package static func namesAnAddress(_ host: String) -> Bool {
        var name = Substring(host.lowercased())
        if name.hasPrefix("[") {
            guard let end = name.firstIndex(of: "]") else { return false }
            let literal = name[name.index(after: name.startIndex)..<end]
            return !literal.isEmpty && literal.contains(":")
                && literal.allSatisfy { $0.isHexDigit || $0 == ":" || $0 == "." }
        }
        if let colon = name.lastIndex(of: ":") { name = name[..<colon] }
        if name == "localhost" { return true }
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { part in UInt8(part) != nil && !part.isEmpty }
    }
}
