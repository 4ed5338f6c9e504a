import NIOCore

/// The immutable settings and shared state every connection handler of one server sees.
final class ServerContext: Sendable {
    let state: ServerState
    let resolver: FileResolver?
    /// Mount point of the served directory: `/files` or `/`, always ending in `/`.
    let filesMount: String
    let chunkSize: Int
    /// `http` or `https`: the scheme of the redirects the server makes up.
    let scheme: String
    /// Whether body writes are recorded in the stats' timeline.
    let recordsBodyTimeline: Bool
    /// Whether a request whose `Host` header does not name the server by an address is refused.
    let requiresAddressHost: Bool
    /// How long a connection may wait for a request (``TestServer/Configuration/idleTimeout``).
    let idleTimeout: TimeAmount?

    init(
        state: ServerState, resolver: FileResolver?, filesMount: String, chunkSize: Int, scheme: String,
        recordsBodyTimeline: Bool = false, requiresAddressHost: Bool = false, idleTimeout: Duration? = nil
    ) {
        self.idleTimeout = idleTimeout.map(TimeAmount.init)
        self.recordsBodyTimeline = recordsBodyTimeline
        self.requiresAddressHost = requiresAddressHost
        self.state = state
        self.resolver = resolver
        self.filesMount = filesMount.hasSuffix("/") ? filesMount : filesMount + "/"
        self.chunkSize = chunkSize
        self.scheme = scheme
    }
}
