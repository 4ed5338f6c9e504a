public import Haul
public import HTTPTypes
public import struct Foundation.URL
import HaulNIOSupport
import HaulOperations
public import NIOCore
import NIOPosix
import NIOSSL

/// Haul's own HTTP/1.1 client for `http://` and `https://`, written directly on SwiftNIO (TLS by swift-nio-ssl):
/// the fastest transport for one large file and for batches of small ones, and what `haul get` uses by default on
/// Linux.
///
/// Why a second NIO-based transport beside `AsyncHTTPClientTransport`: for a small file AsyncHTTPClient's request
/// machinery (request bag, connection pool state machine, several hops between the event loop and Swift
/// concurrency per request) costs more CPU than the rest of Haul's work together, and for a large one its body
/// stream hands the engine one small buffer per hop (bench/compare, s1-s3 and their HTTPS rows). Here one
/// request is one hop to the event loop and one back: the response head is handed over after the read that
/// brought it has been parsed, so a small body is usually complete by then and the engine reads it without
/// waiting again.
///
/// Downloads started by `DownloadQueue` (or `Downloader.start(_:)`) run on the event loop of their connection
/// (``preferredExecutor(for:)``): the task resumed by a response runs on the thread that read it, and the next
/// download starts there on the connection just given back, with no switch between threads and no wake-up per
/// request or response (bench/compare, s3).
/// The engine's work for a download, its file calls included (a few tens of microseconds for a small file; large
/// bodies are written on a thread of their own), then runs on those loops: a server that must not share them gives
/// the transport an `eventLoopGroup` of its own. Downloads with `Durability.powerLoss` (an `fsync` per file) stay
/// on Swift's global executor.
///
/// What it does: requests encoded and responses parsed by the transport itself, each connection a single channel
/// handler (behind swift-nio-ssl's for `https`, which offers only `http/1.1` by ALPN and verifies the server with
/// the request's `TLSSettings`); keep-alive connections reused per scheme, host, port and TLS settings (an idle
/// connection the server closed is replaced transparently, once per request); bodies streamed with back-pressure
/// (reading from the socket pauses while more than 1 MiB waits); the transfer stops when the calling task is
/// cancelled or the body is abandoned; no redirects, no decompression (the engine's rules apply, see
/// `HTTPTransport`).
/// What it leaves to `fallback`: other schemes, and `https` requests whose options ask for HTTP/2
/// (`HTTPVersionPreference.http2`). Without a fallback such a request fails with
/// ``NIOTransportError/unsupportedScheme(_:)``.
public final class NIOTransport: InterruptibleHTTPTransport {
    private let group: any EventLoopGroup
    private let fallback: (any HTTPTransport)?
    private let pool = Locked(Pool())

    private struct Pool {
        var idle: [Endpoint: [Connection]] = [:]
    }

    /// Idle connections kept per host and port beyond this are closed.
    static let maxIdlePerEndpoint = 64

    /// How much one read from a plain socket may take: up to 256 KiB, four times NIO's default, so a fast body arrives
    /// in fewer reads, chunks and writes (bench/compare, s2w1 and s2w8); a small response fits the first read. A TLS
    /// connection keeps NIO's default: swift-nio-ssl hands on what one read decrypts in one buffer, and buffers that
    /// large, freed on the writing thread, keep glibc's heap larger than the bytes in flight (bench/compare, s1s).
    static let receiveBuffers = AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 16 << 10, maximum: 256 << 10)

    /// Creates a transport.
    ///
    /// - Parameters:
    ///   - fallback: the transport for requests this one does not speak (other schemes, HTTP/2); typically an
    ///     `AsyncHTTPClientTransport`.
    ///   - eventLoopGroup: where the connections live; `nil` means NIO's process-wide group (the one
    ///     AsyncHTTPClient's shared client uses too).
    public init(fallback: (any HTTPTransport)? = nil, eventLoopGroup: (any EventLoopGroup)? = nil) {
        self.fallback = fallback
        group = eventLoopGroup ?? MultiThreadedEventLoopGroup.singleton
        executors = group.makeIterator().map(LoopExecutor.init)
    }

    /// One executor per loop of `group`, in the group's order.
    private let executors: [LoopExecutor]

    /// The executor of `loop`, if it is one of ours.
    private func executor(of loop: (any EventLoop)?) -> LoopExecutor? {
        guard let loop else { return nil }
        return executors.first { $0.loop === loop }
    }

    /// The executor of the calling thread's loop, if it is one of ours.
    private func currentExecutor() -> LoopExecutor? {
        executor(of: MultiThreadedEventLoopGroup.currentEventLoop)
    }

    /// The event loop a new download runs on: the calling thread's if it is one of ours (a download that
    /// finishes there starts the next one there, on the connection it just gave back), else the group's next.
    public func preferredExecutor(for url: URL) -> (any TaskExecutor)? {
        guard let scheme = url.scheme?.utf8, scheme.equalsIgnoringCase("http") || scheme.equalsIgnoringCase("https")
        else { return nil }
        return currentExecutor() ?? executor(of: group.next())
    }

    /// Closes the idle connections; requests made afterwards open new ones.
    public func closeIdleConnections() {
        let idle = pool.withLock { pool in
            defer { pool.idle = [:] }
            return pool.idle.values.flatMap { $0 }
        }
        for connection in idle { connection.channel.close(promise: nil) }
    }

    /// Passes the queue's width on to the fallback: this transport has no cap of its own.
    public func allowConnections(perHost count: Int) {
        fallback?.allowConnections(perHost: count)
    }

    /// Sends `request` and returns at the response head; the body streams as the engine reads it.
    public func send(_ request: HTTPRequest, options: TransportOptions) async throws -> TransportResponse {
        guard let secure = Self.ownScheme(of: request, options: options) else {
            if let fallback { return try await fallback.send(request, options: options) }
            throw NIOTransportError.unsupportedScheme(request.scheme ?? "")
        }
        return try await exchange(request, secure: secure, options: options, interruption: nil)
    }

    /// Whether `request` is one of this transport's own (`http`, and `https` unless HTTP/2 is asked for): those can
    /// be interrupted; the fallback's cannot.
    public func canInterrupt(_ request: HTTPRequest, options: TransportOptions) -> Bool {
        Self.ownScheme(of: request, options: options) != nil
    }

    /// Sends `request` like ``send(_:options:)``; interrupting `interruption` fails the wait for the head or
    /// the body's next read and closes the connection. A request for the fallback goes there uninterruptible.
    public func send(
        _ request: HTTPRequest, options: TransportOptions, interruption: TransferInterruption
    ) async throws -> TransportResponse {
        guard let secure = Self.ownScheme(of: request, options: options) else {
            return try await send(request, options: options)
        }
        return try await exchange(request, secure: secure, options: options, interruption: interruption)
    }

    /// Whether the request is this transport's own, and if so whether it is `https`; the scheme is compared in
    /// place, in any case, as it is asked twice per request.
    private static func ownScheme(of request: HTTPRequest, options: TransportOptions) -> Bool? {
        guard let scheme = request.scheme?.utf8[...] else { return nil }
        if scheme.equalsIgnoringCase("http") { return false }
        if scheme.equalsIgnoringCase("https") && options.httpVersion != .http2 { return true }
        return nil
    }

    private func exchange(
        _ request: HTTPRequest, secure: Bool, options: TransportOptions, interruption: TransferInterruption?
    ) async throws -> TransportResponse {
        let endpoint = try Endpoint(
            authority: request.authority ?? "", tls: secure ? options.tls : nil, proxy: options.proxy,
            proxyTLS: options.tls, receiveWindow: options.receiveWindow)
        let encoded = try EncodedRequest(request, host: endpoint.hostHeader, proxy: endpoint.forwardingProxy)
        let destination = ServerAddress(host: endpoint.host, port: endpoint.port)
        // Through a proxy the server may be out of direct reach: no extra connection to diagnose its certificate.
        let diagnoses = options.proxy == nil
        // After a kept-alive connection turned out closed, the request goes once more, on a new connection: never
        // again on another idle one (a server that drops this request would otherwise get it once per idle connection).
        var fresh = false
        while true {
            let (connection, reused): (Connection, Bool)
            do {
                (connection, reused) = try await acquire(endpoint, connectTimeout: options.connectTimeout, fresh: fresh)
            } catch {
                throw await ReadableFailure.of(
                    error, at: destination, connectTimeout: options.connectTimeout, diagnoses: diagnoses) ?? error
            }
            let exchange = Exchange(connection: connection, transport: self, endpoint: endpoint)
            do {
                let responseHead = try await exchange.start(encoded, interruption: interruption)
                return TransportResponse(head: responseHead, body: exchange.body())
            } catch {
                // The connection is closed before the caller hears of the failure: a queue frees the download's
                // slot after that, and the server must not see the next request while it still counts this one.
                await exchange.close()
                // A kept-alive connection the server had already closed: the request never reached it.
                if reused, let closed = error as? NIOTransportError, closed == .closedBeforeResponse {
                    fresh = true
                    continue
                }
                // A TLS alert can come after the handshake (TLS 1.3 refuses a client certificate on the first read).
                throw await ReadableFailure.of(
                    error, at: destination, connectTimeout: options.connectTimeout, diagnoses: diagnoses) ?? error
            }
        }
    }

    // MARK: Connections

    private func acquire(
        _ endpoint: Endpoint, connectTimeout: Duration, fresh: Bool = false
    ) async throws -> (Connection, reused: Bool) {
        let here = currentExecutor()?.loop
        let idle = pool.withLock { pool -> Connection? in
            guard !fresh else { return nil }
            // One on this thread's loop first: its responses then resume this task without a thread switch.
            if let here, let index = pool.idle[endpoint]?.lastIndex(where: { $0.channel.eventLoop === here }),
                let connection = pool.idle[endpoint]?.remove(at: index), connection.channel.isActive
            {
                return connection
            }
            while let connection = pool.idle[endpoint]?.popLast() {
                if connection.channel.isActive { return connection }
            }
            return nil
        }
        if let idle { return (idle, true) }
        let timeout = TimeAmount.nanoseconds(Int64(connectTimeout.seconds * 1e9))
        let deadline = NIODeadline.now() + timeout
        // Made (and their files read) before connecting: settings that cannot be used fail without a connection.
        // Through a tunnel the address connected to is the proxy's: the server's name is checked by the handshake's
        // watcher instead (HandshakeWatcher), against the host asked for.
        let tls = try endpoint.tls.map {
            try (
                context: sslContext(for: $0, checksNames: !endpoint.tunnels),
                serverName: Self.serverName(endpoint.host),
                identity: endpoint.tunnels && $0.verifiesPeer ? endpoint.host : nil
            )
        }
        let proxyTLS = try endpoint.proxyTLS.map {
            try (context: sslContext(for: $0), serverName: Self.serverName(endpoint.proxy?.host ?? ""))
        }
        let loop = here ?? group.next()
        let handler = ExchangeHandler()
        let tunnel = endpoint.tunnels ? TunnelReader() : nil
        let handshake = tls == nil ? nil : loop.makePromise(of: Void.self)
        let proxyHandshake = proxyTLS == nil ? nil : loop.makePromise(of: Void.self)
        let receiveBuffers = tls == nil && proxyTLS == nil ? Self.receiveBuffers : AdaptiveRecvByteBufferAllocator()
        // The server's TLS and the exchange handler: at once, or above the tunnel once it is open.
        let addConnectionHandlers = { @Sendable (channel: any Channel) throws in
            let pipeline = channel.pipeline.syncOperations
            if let tls, let handshake {
                try pipeline.addHandler(NIOSSLClientHandler(context: tls.context, serverHostname: tls.serverName))
                try pipeline.addHandler(HandshakeWatcher(handshake, identity: tls.identity))
            }
            try pipeline.addHandler(handler)
        }
        let channel: any Channel
        do {
            var bootstrap = ClientBootstrap(group: loop)
                .connectTimeout(timeout)
                .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                .channelOption(.recvAllocator, value: receiveBuffers)
            if let receiveWindow = endpoint.receiveWindow {
                // Half the window in the socket (the kernel doubles what it is given, for its own bookkeeping), half
                // in the exchange's buffer.
                bootstrap = bootstrap.channelOption(
                    .socketOption(.so_rcvbuf), value: SocketOptionValue(receiveWindow / 4))
            }
            channel =
                try await bootstrap
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let pipeline = channel.pipeline.syncOperations
                        if let proxyTLS, let proxyHandshake {
                            try pipeline.addHandler(
                                NIOSSLClientHandler(context: proxyTLS.context, serverHostname: proxyTLS.serverName))
                            try pipeline.addHandler(HandshakeWatcher(proxyHandshake))
                        }
                        if let tunnel {
                            try pipeline.addHandler(tunnel)
                        } else {
                            try addConnectionHandlers(channel)
                        }
                    }
                }
                .connect(host: endpoint.proxy?.host ?? endpoint.host, port: endpoint.proxy?.port ?? endpoint.port)
                .get()
        } catch {
            handshake?.fail(error)
            proxyHandshake?.fail(error)
            throw await proxyFailure(error, endpoint: endpoint, connectTimeout: connectTimeout)
        }
        if handshake == nil && proxyHandshake == nil && tunnel == nil {
            return (Connection(channel: channel, handler: handler), false)
        }
        // The handshakes and the tunnel share the connect timeout, as curl's and AsyncHTTPClient's do.
        let timer = loop.scheduleTask(deadline: deadline) {
            let expired = ChannelError.connectTimeout(timeout)
            handshake?.fail(expired)
            proxyHandshake?.fail(expired)
            tunnel?.fail(expired)
            channel.close(promise: nil)
        }
        defer { timer.cancel() }
        do {
            if let proxyHandshake {
                do {
                    try await proxyHandshake.futureResult.get()
                } catch {
                    throw await proxyFailure(error, endpoint: endpoint, connectTimeout: connectTimeout)
                }
            }
            if let tunnel, let proxy = endpoint.proxy {
                do {
                    try await ProxyTunnel.open(
                        to: endpoint.host, port: endpoint.port, through: proxy, channel: channel, reader: tunnel)
                } catch {
                    throw await proxyFailure(error, endpoint: endpoint, connectTimeout: connectTimeout)
                }
                try await loop.submit { try addConnectionHandlers(channel) }.get()
            }
            try await handshake?.futureResult.get()
        } catch {
            // A promise no watcher was given (the tunnel failed first) must still be completed.
            handshake?.fail(error)
            proxyHandshake?.fail(error)
            channel.close(promise: nil)
            throw error
        }
        return (Connection(channel: channel, handler: handler), false)
    }

    /// A failure to reach the proxy or to open its tunnel, in words that name the proxy (the tunnel's own errors
    /// already do).
    private func proxyFailure(_ error: any Error, endpoint: Endpoint, connectTimeout: Duration) async -> any Error {
        guard let proxy = endpoint.proxy else { return error }
        if error is TransportError || error is CancellationError { return error }
        return await ReadableFailure.ofProxy(error, proxy: proxy, connectTimeout: connectTimeout)
    }

    /// swift-nio-ssl contexts, one per distinct settings value: making one reads the files the settings name and
    /// loads the trust store, which must not happen per connection.
    private struct ContextKey: Hashable {
        let settings: TLSSettings
        let checksNames: Bool
    }
    private let sslContexts = Locked([ContextKey: NIOSSLContext]())

    /// The context for `settings`; without `checksNames`, one that verifies the certificate's chain but leaves the
    /// name it is for to the caller.
    private func sslContext(for settings: TLSSettings, checksNames: Bool = true) throws -> NIOSSLContext {
        let key = ContextKey(settings: settings, checksNames: checksNames)
        if let made = sslContexts.withLock({ $0[key] }) { return made }
        var configuration = try settings.makeClientConfiguration()
        if !checksNames, configuration.certificateVerification == .fullVerification {
            configuration.certificateVerification = .noHostnameVerification
        }
        configuration.applicationProtocols = ["http/1.1"]
        // A connection is closed when its response is abandoned (a cancelled download, a segment whose end moved):
        // it then sends close_notify and closes at once. Waiting for the server's close_notify (5 s by default) would
        // keep reading, and discarding, whatever the server still sends: a server writing a response reads nothing
        // until it is done, so an abandoned response of 1 GiB would be received whole.
        configuration.shutdownTimeout = .zero
        let made: NIOSSLContext
        do {
            made = try NIOSSLContext(configuration: configuration)
        } catch {
            throw TransportError("cannot use the TLS settings: \(error)", isTransient: false, underlying: error)
        }
        sslContexts.withLock { $0[key] = made }
        return made
    }

    /// The name sent by SNI and checked against the certificate; `nil` for an IP address, which SNI cannot carry
    /// (swift-nio-ssl then checks the certificate against the address connected to).
    private static func serverName(_ host: String) -> String? {
        (try? SocketAddress(ipAddress: host, port: 0)) == nil ? host : nil
    }

    /// Takes back a connection whose response ended and that may be reused.
    func release(_ connection: Connection, to endpoint: Endpoint) {
        let keep = pool.withLock { pool -> Bool in
            guard pool.idle[endpoint, default: []].count < Self.maxIdlePerEndpoint else { return false }
            pool.idle[endpoint, default: []].append(connection)
            return true
        }
        if !keep { connection.channel.close(promise: nil) }
    }

    deinit {
        closeIdleConnections()
    }
}
