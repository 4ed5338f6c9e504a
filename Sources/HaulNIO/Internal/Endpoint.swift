import Haul

/// Where connections go and how they are secured: a host and port, parsed from a request's authority (`host`,
/// `host:port`, `[v6]`, `[v6]:port`), for `https` the TLS settings, and the proxy they go through (connections made
/// with other settings or through another proxy are not shared).
struct Endpoint: Hashable, Sendable {
    let host: String
    let port: Int
    /// The authority as the `Host` header carries it: without user info.
    let hostHeader: String
    /// `nil` for plain `http`.
    let tls: TLSSettings?
    /// The proxy connections go through, if any.
    let proxy: Proxy?
    /// How an `https://` proxy is verified (the request's TLS settings); `nil` for other proxies.
    let proxyTLS: TLSSettings?
    /// The receive window of a bandwidth-limited request (``TransportOptions/receiveWindow``): its connections have a
    /// small receive buffer, and are pooled apart from the others.
    let receiveWindow: Int?

    /// Parsed on the UTF-8 view: its delimiters are ASCII, so there is no need to break it into characters.
    init(
        authority: String, tls: TLSSettings? = nil, proxy: Proxy? = nil, proxyTLS: TLSSettings? = nil,
        receiveWindow: Int? = nil
    ) throws {
        var rest = Substring(authority)
        if let at = rest.utf8.lastIndex(of: UInt8(ascii: "@")) {  // userinfo is never sent
            rest = rest[rest.utf8.index(after: at)...]
        }
        var host: Substring
        var port: Substring?
        let bytes = rest.utf8
        if bytes.first == UInt8(ascii: "[") {
            guard let close = bytes.firstIndex(of: UInt8(ascii: "]")) else {
                throw NIOTransportError.invalidAuthority(authority)
            }
            host = rest[bytes.index(after: bytes.startIndex)..<close]
            let after = rest[bytes.index(after: close)...]
            if after.utf8.first == UInt8(ascii: ":") {
                port = after[after.utf8.index(after: after.startIndex)...]
            } else if !after.isEmpty {
                throw NIOTransportError.invalidAuthority(authority)
            }
        } else if let colon = bytes.lastIndex(of: UInt8(ascii: ":")) {
            host = rest[..<colon]
            port = rest[bytes.index(after: colon)...]
        } else {
            host = rest
        }
        let number = port.map { Int($0) } ?? (tls == nil ? 80 : 443)
        guard !host.isEmpty, let number, (1...65535).contains(number) else {
            throw NIOTransportError.invalidAuthority(authority)
        }
        self.host = String(host)
        self.port = number
        hostHeader = String(rest)
        self.tls = tls
        self.proxy = proxy
        self.proxyTLS = proxy?.kind == .https ? proxyTLS : nil
        self.receiveWindow = receiveWindow
    }

    /// The HTTP proxy that takes this endpoint's requests in absolute form (`GET http://host/path`): plain `http`
    /// through an HTTP proxy. Everything else through a proxy goes through a tunnel.
    var forwardingProxy: Proxy? {
        guard let proxy, proxy.takesRequestsInAbsoluteForm(secure: tls != nil) else { return nil }
        return proxy
    }

    /// Whether connections need a tunnel through the proxy (`CONNECT`, or SOCKS5) before the first request.
    var tunnels: Bool { proxy != nil && forwardingProxy == nil }
}
