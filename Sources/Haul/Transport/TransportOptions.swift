/// Which HTTP version a transport asks for.
public enum HTTPVersionPreference: String, Sendable, Hashable, CaseIterable {
    /// The transport's own choice: `NIOTransport` speaks HTTP/1.1 (over TLS too: one large body moves fastest on
    /// a connection of its own, and a batch on a pool of them), `AsyncHTTPClientTransport` and
    /// `URLSessionTransport` take HTTP/2 where an `https` server offers it by ALPN.
    case automatic
    /// HTTP/1.1 only, also where the server offers HTTP/2.
    case http1_1
    /// HTTP/2 where an `https` server offers it by ALPN, else HTTP/1.1 (curl's `--http2`). `NIOTransport` hands
    /// such requests to its fallback.
    case http2
}

/// What the engine asks of a transport for one request, beside the request itself.
public struct TransportOptions: Sendable, Hashable {
    /// How long establishing the connection (TCP, and the TLS handshake for `https`) may take.
    public var connectTimeout: Duration
    /// How `https` connections are verified.
    public var tls: TLSSettings
    /// Which HTTP version to ask for.
    public var httpVersion: HTTPVersionPreference
    /// The proxy to go through (chosen by the engine for this request's URL from its
    /// ``Downloader/Configuration/proxy``), or `nil` to connect to the server itself. The connect timeout covers
    /// reaching the proxy and its handshake; `https` through a proxy is verified against the server, as without one.
    public var proxy: Proxy?
    /// The most body bytes that should wait unread for the engine, in the transport and in the socket's receive
    /// buffer together, or `nil` for the transport's own choice. The engine sets it when a bandwidth limit applies
    /// (``Downloader/Configuration/maxBytesPerSecond``): what a transport reads ahead reaches the server at full speed,
    /// so a small window keeps the limit true at the server too, not only at the reader. `NIOTransport` applies it
    /// to the connections it opens for such requests.
    public var receiveWindow: Int?

    /// Creates options; the defaults are the engine's (see ``Downloader/Configuration``).
    public init(
        connectTimeout: Duration = .seconds(10), tls: TLSSettings = .default,
        httpVersion: HTTPVersionPreference = .automatic, proxy: Proxy? = nil, receiveWindow: Int? = nil
    ) {
        self.connectTimeout = connectTimeout
        self.tls = tls
        self.httpVersion = httpVersion
        self.proxy = proxy
        self.receiveWindow = receiveWindow
    }
}
