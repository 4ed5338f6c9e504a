/// A host and port, parsed from a request's authority (`host`, `host:port`, `[v6]`, `[v6]:port`).
struct Endpoint: Hashable, Sendable {
    let host: String
    let port: Int
    /// The authority as the `Host` header carries it: without user info.
    let hostHeader: String

    init(authority: String) throws {
        var rest = Substring(authority)
        if let at = rest.lastIndex(of: "@") { rest = rest[rest.index(after: at)...] }  // userinfo is never sent
        var host: Substring
        var port: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw NIOTransportError.invalidAuthority(authority) }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") {
                port = after.dropFirst()
            } else if !after.isEmpty {
                throw NIOTransportError.invalidAuthority(authority)
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            port = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        let number = port.map { Int($0) } ?? 80
        guard !host.isEmpty, let number, (1...65535).contains(number) else {
            throw NIOTransportError.invalidAuthority(authority)
        }
        self.host = String(host)
        self.port = number
        hostHeader = String(rest)
    }
}
