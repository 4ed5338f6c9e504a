public import Foundation

extension TestServer {
    /// How a ``TestServer`` binds and what it serves.
    public struct Configuration: Sendable {
        /// Address to bind; loopback by default. `haul serve --host` changes it.
        public var host: String
        /// Port to bind; 0 picks a free one (read it back from ``TestServer/port``).
        public var port: Int
        /// Also bind `::1` on the same port when `host` is `127.0.0.1`, so `localhost` works whatever it resolves to.
        public var bindIPv6Loopback: Bool
        /// Directory served under ``filesPath`` (but for names starting with a dot, answered 404); `nil` serves
        /// generated content only.
        public var root: URL?
        /// Mount point of ``root``: `/files` by default, `/` for `haul serve DIR`.
        public var filesPath: String
        /// `nil` runs on the process-wide shared event loops; a number gives this server its own
        /// event loop group with that many threads, shut down by ``TestServer/shutdown()``.
        public var eventLoopThreads: Int?
        /// The request log keeps at most this many entries (counters keep counting).
        public var maxRecordedRequests: Int
        /// Body bytes per write for generated content. The 64 KiB default stays under glibc's 128 KiB `mmap`
        /// threshold: larger buffers are mapped and unmapped for every write, which halved throughput on some
        /// connections.
        public var chunkSize: Int
        /// Serve HTTPS with these certificates; `nil` (the default) serves plain HTTP.
        public var tls: TLS?
        /// The kernel send buffer of each connection (`SO_SNDBUF`); `nil` (the default) leaves it to the system.
        /// A small one keeps what the server has written close to what the client has read, for tests that measure
        /// a client's rate at the server.
        public var sendBufferSize: Int?
        /// Whether ``TestServerStats/bodyTimeline`` records every body write as the connection hands it to the
        /// kernel (off by default: a long transfer makes many entries).
        public var recordsBodyTimeline: Bool
        /// Whether ``TestServerStats/requestsByPath`` counts the requests of every path (on by default). A server
        /// for a list of a million files turns it off: its memory and its cost per request then stay flat
        /// (`haul serve`).
        public var countsRequestsByPath: Bool
        /// Whether a request must name the server by an address (`127.0.0.1:PORT`, `[::1]:PORT`) or `localhost` in
        /// its `Host` header; others are answered 403 (off by default). A DNS name could be a rebinding one: a web page
        /// whose own name was made to resolve to the loopback address would read what the server serves (`haul
        /// serve` turns it on).
        public var requiresAddressHost: Bool
        /// How long a connection may stay open without a request coming, after it was accepted or after its last
        /// response ended: past it, the server closes it, as nginx does (its `client_header_timeout` and
        /// `keepalive_timeout`). A request being answered is never cut, however long its delays, holds, stalls and
        /// throttling last. `nil` (the default) keeps idle connections open; `haul serve` closes them after 60 s.
        public var idleTimeout: Duration?

        /// Creates a configuration; every parameter has a loopback-test default.
        public init(
            host: String = "127.0.0.1",
            port: Int = 0,
            bindIPv6Loopback: Bool = true,
            root: URL? = nil,
            filesPath: String = "/files",
            eventLoopThreads: Int? = nil,
            maxRecordedRequests: Int = 10_000,
            chunkSize: Int = 64 << 10,
            tls: TLS? = nil,
            sendBufferSize: Int? = nil,
            recordsBodyTimeline: Bool = false,
            countsRequestsByPath: Bool = true,
            requiresAddressHost: Bool = false,
            idleTimeout: Duration? = nil
        ) {
            self.host = host
            self.port = port
            self.bindIPv6Loopback = bindIPv6Loopback
            self.root = root
            self.filesPath = filesPath
            self.eventLoopThreads = eventLoopThreads
            self.maxRecordedRequests = maxRecordedRequests
            self.chunkSize = max(1024, chunkSize)
            self.tls = tls
            self.sendBufferSize = sendBufferSize
            self.recordsBodyTimeline = recordsBodyTimeline
            self.countsRequestsByPath = countsRequestsByPath
            self.requiresAddressHost = requiresAddressHost
            self.idleTimeout = idleTimeout
        }
    }

    /// How a ``TestServer`` speaks TLS: every fault it has on HTTP, over HTTPS.
    public struct TLS: Sendable {
        /// The CA that issues the server's certificate (and, when asked for, trusted client certificates).
        public var authority: TestCertificateAuthority
        /// Which certificate the server presents.
        public var certificate: CertificateKind
        /// Refuse the handshake of a client that presents no certificate issued by ``authority``.
        public var requiresClientCertificate: Bool

        /// Creates TLS settings.
        ///
        /// - Parameters:
        ///   - authority: the CA clients should trust (see ``TestCertificateAuthority/certificatePEM``).
        ///   - certificate: a valid certificate by default; the others fail verification in their own way.
        ///   - requiresClientCertificate: ask for a client certificate and refuse a missing or unknown one.
        public init(
            authority: TestCertificateAuthority, certificate: CertificateKind = .valid,
            requiresClientCertificate: Bool = false
        ) {
            self.authority = authority
            self.certificate = certificate
            self.requiresClientCertificate = requiresClientCertificate
        }
    }
}
