/// Which HTTP version a transport asks for.
public enum HTTPVersionPreference: String, Sendable, Hashable, CaseIterable {
    /// HTTP/2 where an `https` server offers it by ALPN, else HTTP/1.1 (curl's default).
    case negotiate
    /// HTTP/1.1 only, also where the server offers HTTP/2.
    case http1_1
}

/// What the engine asks of a transport for one request, beside the request itself.
public struct TransportOptions: Sendable, Hashable {
    /// How long establishing the connection (TCP, and the TLS handshake for `https`) may take.
    public var connectTimeout: Duration
    /// How `https` connections are verified.
    public var tls: TLSSettings
    /// Which HTTP version to ask for.
    public var httpVersion: HTTPVersionPreference

    /// Creates options; the defaults are the engine's (see ``Downloader/Configuration``).
    public init(
        connectTimeout: Duration = .seconds(10), tls: TLSSettings = .default,
        httpVersion: HTTPVersionPreference = .negotiate
    ) {
        self.connectTimeout = connectTimeout
        self.tls = tls
        self.httpVersion = httpVersion
    }
}
