public import AsyncHTTPClient
public import Haul
import HaulNIOSupport
import Foundation
import HaulOperations
public import HTTPTypes
import NIOCore
import NIOPosix
import NIOHTTP1
import NIOSSL
#if canImport(Network)
import Network
#endif

/// Haul's default transport on Linux: AsyncHTTPClient (SwiftNIO), streaming `response.body` straight into
/// the engine's writer.
///
/// Why not URLSession on Linux: its download tasks crash the process on a full disk, write chunks twice and
/// leak temporary files; it forwards `Authorization` across origins on redirects and is several times slower
/// (bench/compare). This transport follows no redirects (the engine does) and
/// decompresses nothing.
///
/// AsyncHTTPClient closes the connection of a cancelled request on its event loop after it has reported the
/// cancellation, and says nothing when it has: a `DownloadQueue` on this transport frees a cancelled download's
/// slot when the request ends, so a server can for a moment count the cancelled request beside the one that
/// took its slot. `NIOTransport` closes the connection before the slot is freed.
public final class AsyncHTTPClientTransport: HTTPTransport {
    /// A process-wide transport on a process-wide client (on NIO's singleton event loop group).
    public static let shared = AsyncHTTPClientTransport()

    /// The clients new requests go to, and those they replaced.
    private struct Clients {
        /// The client that offers HTTP/2 by ALPN; `http1Client` asks for HTTP/1.1 only. AsyncHTTPClient chooses the
        /// protocols it offers per client, not per request.
        var client: HTTPClient
        var http1Client: HTTPClient
        /// The configuration of the clients this transport made (`nil` on a caller's client): proxied clients are
        /// made from it, and new ones when the connection limit rises.
        var configuration: HTTPClient.Configuration?
        /// Clients made for each proxy requests asked for, as AsyncHTTPClient sets its proxy per client.
        var proxied: [Proxy: (client: HTTPClient, http1Client: HTTPClient)] = [:]
        /// Clients replaced when the connection limit rose: they finish the requests they have, and are shut down
        /// with the transport (AsyncHTTPClient fixes a client's limit when it is made).
        var retired: [HTTPClient] = []

        /// Every client this transport made.
        var owned: [HTTPClient] {
            guard configuration != nil else { return [] }
            return [client, http1Client] + proxied.values.flatMap { [$0.client, $0.http1Client] } + retired
        }
    }

    private let clients: Locked<Clients>
    private let connectTimeout: Duration
    /// swift-nio-ssl configurations made from the engine's TLS settings, one per distinct value: AsyncHTTPClient
    /// pools connections per configuration, and the files they name are read once.
    private let tlsConfigurations = Locked([TLSSettings: TLSConfiguration]())

    /// Creates a transport with its own client, configured for the engine: no redirects, no decompression,
    /// connection pooling with keep-alive, and a failed connection reported at once rather than retried until
    /// the connect timeout (the engine retries, with backoff). Call ``shutdown()`` when done with it.
    ///
    /// - Parameters:
    ///   - maximumConnectionsPerHost: the client's soft limit of HTTP/1.1 connections to one host; a queue raises it
    ///     to its width (``allowConnections(perHost:)``), so that the queue's limits decide how many downloads run.
    ///   - connectTimeout: how long establishing a connection may take. AsyncHTTPClient sets it per client, not per
    ///     request, so it is fixed here; give the engine's `connectTimeout` the same value.
    public init(maximumConnectionsPerHost: Int = 64, connectTimeout: Duration = .seconds(10)) {
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        configuration.decompression = .disabled
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = maximumConnectionsPerHost
        configuration.connectionPool.retryConnectionEstablishment = false
        // Idle and minimum-speed limits are the engine's watchdog's job, not the client's.
        configuration.timeout = .init(connect: .milliseconds(max(Int64(connectTimeout.seconds * 1000), 1)), read: nil)
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.shutdownTimeout = Self.tlsShutdownTimeout
        configuration.tlsConfiguration = tls
        let (client, http1Client) = Self.clients(configuration)
        clients = Locked(Clients(client: client, http1Client: http1Client, configuration: configuration))
        self.connectTimeout = connectTimeout
    }

    /// Raises the client's limit of HTTP/1.1 connections to one host to at least `count` (a queue's width grew): new
    /// requests go to new clients, at least twice the old limit so that few are made; those in flight finish on the
    /// old ones. Nothing on a caller's client.
    public func allowConnections(perHost count: Int) {
        clients.withLock { clients in
            guard var configuration = clients.configuration,
                count > configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit
            else { return }
            configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = max(
                count, 2 * configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit)
            clients.retired += [clients.client, clients.http1Client]
            clients.retired += clients.proxied.values.flatMap { [$0.client, $0.http1Client] }
            clients.proxied = [:]
            (clients.client, clients.http1Client) = Self.clients(configuration)
            clients.configuration = configuration
        }
    }

    /// The limit of HTTP/1.1 connections to one host of the clients new requests go to (`nil` on a caller's client).
    package var connectionsPerHost: Int? {
        clients.withLock { $0.configuration?.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit }
    }

    /// How long closing a TLS connection waits for the server's close_notify: not at all. A connection is closed early
    /// when its response is abandoned (a cancelled download, a segment whose end moved), and a server writing a
    /// response reads nothing until it is done: waiting would receive, and discard, the rest of it.
    static let tlsShutdownTimeout: TimeAmount = .zero

    /// A client offering HTTP/2 and one offering HTTP/1.1 only, with `configuration`.
    private static func clients(_ configuration: HTTPClient.Configuration) -> (HTTPClient, HTTPClient) {
        var http1 = configuration
        http1.httpVersion = .http1Only
        return (
            HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration),
            HTTPClient(eventLoopGroupProvider: .singleton, configuration: http1)
        )
    }

    /// Creates a transport on an existing client, used for every request whatever HTTP version it asks for. The
    /// client should be configured with `redirectConfiguration = .disallow` and `decompression = .disabled` (and
    /// `connectionPool.retryConnectionEstablishment = false` for a prompt failure when nothing listens); the caller
    /// shuts it down. `connectTimeout` is the client's, for messages.
    public init(client: HTTPClient, connectTimeout: Duration = .seconds(10)) {
        clients = Locked(Clients(client: client, http1Client: client, configuration: nil))
        self.connectTimeout = connectTimeout
    }

    deinit {
        // Not syncShutdown: the last reference may go on one of NIO's event loop threads (where Swift concurrency
        // itself runs in `haul`), and blocking there is a precondition failure. An already shut-down client
        // answers with an error, which is of no interest here.
        for client in clients.withLock({ $0.owned }) { client.shutdown { _ in } }
    }

    /// Shuts the clients down (only clients this transport created).
    public func shutdown() async throws {
        let owned = clients.withLock { clients in
            defer {
                clients.proxied = [:]
                clients.retired = []
            }
            return clients.owned
        }
        for client in owned { try await client.shutdown() }
    }

    /// Sends `request` and returns at the response head; the body streams as the engine reads it.
    /// The connect timeout of `options` is not used: AsyncHTTPClient takes it per client (see
    /// ``init(maximumConnectionsPerHost:connectTimeout:)``). Errors are `TransportError`s naming the host and the
    /// reason; a certificate that is not trusted is a permanent one.
    ///
    /// Proxies: AsyncHTTPClient speaks plain HTTP to an HTTP proxy (absolute form for `http`, `CONNECT` for
    /// `https`) and SOCKS5 without authentication, letting the proxy resolve host names (`socks5h`). A request
    /// through another kind of proxy (`https://`, `socks5://`, SOCKS5 with a password), or through any proxy on a
    /// caller's client, fails with an error that says so; `NIOTransport` speaks them all.
    public func send(_ request: HTTPRequest, options: TransportOptions) async throws -> TransportResponse {
        var outgoing = HTTPClientRequest(url: Self.url(of: request))
        outgoing.method = .RAW(value: request.method.rawValue)
        request.headerFields.forEachJoiningCookies { field in
            outgoing.headers.add(name: field.name.rawName, value: field.value)
        }
        let response: HTTPClientResponse
        do {
            if options.tls != .default { outgoing.tlsConfiguration = try tlsConfiguration(for: options.tls) }
            let clients = try clients(for: options.proxy)
            let client = options.httpVersion == .http1_1 ? clients.1 : clients.0
            // The deadline only bounds the wait for the head (AsyncHTTPClient drops it once the head is in); the
            // engine's stall watchdog covers the body.
            response = try await client.execute(outgoing, deadline: .now() + .hours(24))
        } catch {
            throw await readable(error, request: request, proxy: options.proxy)
        }
        var head = HTTPResponse(
            status: .init(code: Int(response.status.code), reasonPhrase: response.status.reasonPhrase))
        for header in response.headers {
            if let name = HTTPField.Name(header.name) {
                head.headerFields.append(HTTPField(name: name, value: header.value))
            }
        }
        let body = response.body
        return TransportResponse(
            head: head,
            body: ResponseBody {
                var iterator = body.makeAsyncIterator()
                return {
                    do {
                        return try await iterator.next().map(BufferChunk.init)
                    } catch {
                        throw await self.readable(error, request: request, proxy: nil)
                    }
                }
            })
    }

    private func tlsConfiguration(for settings: TLSSettings) throws -> TLSConfiguration {
        if let made = tlsConfigurations.withLock({ $0[settings] }) { return made }
        #if canImport(Network)
        // On Apple platforms this transport's own clients run on Network.framework (AsyncHTTPClient's `.singleton`
        // is NIO Transport Services there), whose TLS takes neither a client certificate (AsyncHTTPClient stops the
        // process with a preconditionFailure in `getNWProtocolTLSOptions`) nor a CA directory (read as one PEM file):
        // refused in words. NIOTransport runs on NIO's own sockets everywhere and honours both.
        if ownsClient, settings.clientCertificateFile != nil || settings.caDirectory != nil {
            throw TransportError(
                "AsyncHTTPClientTransport cannot present a client certificate or trust a CA directory on Apple "
                    + "platforms (its connections there run on Network.framework); use NIOTransport, or a CA file",
                isTransient: false)
        }
        #endif
        var made = try settings.makeClientConfiguration()
        made.shutdownTimeout = Self.tlsShutdownTimeout
        tlsConfigurations.withLock { $0[settings] = made }
        return made
    }

    /// The clients for requests through `proxy` (this transport's own for none), made at the first such request.
    private func clients(for proxy: Proxy?) throws -> (HTTPClient, HTTPClient) {
        let (own, base) = clients.withLock { (($0.client, $0.http1Client), $0.configuration) }
        guard let proxy else { return own }
        guard var configuration = base else {
            throw TransportError(
                "AsyncHTTPClientTransport(client:) cannot apply the proxy \(proxy): configure the client's proxy "
                    + "and give the downloader none", isTransient: false)
        }
        switch proxy.kind {
        case .http:
            configuration.proxy = .server(
                host: proxy.host, port: proxy.port,
                authorization: proxy.credentials.map { .basic(username: $0.user, password: $0.password) })
        case .socks5h where proxy.credentials == nil:
            configuration.proxy = .socksServer(host: proxy.host, port: proxy.port)
        case .https, .socks5, .socks5h:
            throw TransportError(
                "AsyncHTTPClientTransport cannot use the proxy \(proxy): it speaks plain HTTP to a proxy and SOCKS5 "
                    + "without a password with host names resolved by the proxy (socks5h); NIOTransport speaks "
                    + "every kind", isTransient: false)
        }
        if let made = clients.withLock({ $0.proxied[proxy] }) { return made }
        let made = Self.clients(configuration)
        let kept = clients.withLock { clients -> (client: HTTPClient, http1Client: HTTPClient)? in
            if let earlier = clients.proxied[proxy] { return earlier }
            // Made from a configuration the limit has since replaced: these are the old limit's.
            guard
                clients.configuration?.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit
                    == configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit
            else {
                clients.retired += [made.0, made.1]
                return nil
            }
            clients.proxied[proxy] = made
            return nil
        }
        if let kept {  // another request made them first
            made.0.shutdown { _ in }
            made.1.shutdown { _ in }
            return kept
        }
        return made
    }

    /// `error` in words (see `ReadableFailure`), AsyncHTTPClient's own errors included; failures to reach or use
    /// `proxy` name the proxy and are not retried.
    private func readable(_ error: any Error, request: HTTPRequest, proxy: Proxy?) async -> any Error {
        if let proxy, let failure = await proxyFailure(error, proxy: proxy) { return failure }
        guard let destination = Self.destination(of: request) else { return error }
        if let client = error as? HTTPClientError {
            if client == .connectTimeout || client == .tlsHandshakeTimeout {
                return ReadableFailure.timedOut(at: destination, after: connectTimeout, underlying: error)
            }
            if client == .remoteConnectionClosed {
                return TransportError("connection closed by \(destination.described)", underlying: error)
            }
            return error
        }
        #if canImport(Network)
        // Network.framework's TLS failures (the certificate refused, a handshake alert) are not SwiftNIO's: another
        // attempt meets them again.
        if let network = error as? NWError, case .tls(let status) = network {
            return TransportError(
                "TLS error with \(destination.described): OSStatus \(status)", isTransient: false, underlying: error)
        }
        #endif
        return await ReadableFailure.of(error, at: destination, connectTimeout: connectTimeout) ?? error
    }

    /// `error` as a failure of `proxy`, if it is one: the proxy refused the credentials, or could not be reached.
    private func proxyFailure(_ error: any Error, proxy: Proxy) async -> TransportError? {
        if let client = error as? HTTPClientError {
            switch client {
            case .proxyAuthenticationRequired:
                return TransportError(
                    proxy.authenticationFailure(answered: "407 Proxy Authentication Required"), isTransient: false,
                    underlying: error)
            case .connectTimeout, .socksHandshakeTimeout, .httpProxyHandshakeTimeout:
                let address = ServerAddress(host: proxy.host, port: proxy.port)
                let timedOut = ReadableFailure.timedOut(at: address, after: connectTimeout, underlying: error)
                return ReadableFailure.proxyFailure(proxy, reason: timedOut.message, underlying: error)
            case .invalidProxyResponse:
                return TransportError(
                    "the proxy \(proxy) refused the tunnel or answered with something that is not HTTP",
                    isTransient: false, underlying: error)
            default:
                return nil
            }
        }
        guard error is NIOConnectionError || error is IOError else { return nil }
        return await ReadableFailure.ofProxy(error, proxy: proxy, connectTimeout: connectTimeout)
    }

    private static func destination(of request: HTTPRequest) -> ServerAddress? {
        guard let url = request.url, let host = url.host else { return nil }
        let secure = request.scheme?.utf8.equalsIgnoringCase("https") == true
        return ServerAddress(host: host, port: url.port ?? (secure ? 443 : 80))
    }

    private static func url(of request: HTTPRequest) -> String {
        "\(request.scheme ?? "http")://\(request.authority ?? "")\(request.path ?? "/")"
    }
}

/// A body chunk as AsyncHTTPClient delivers it, read in place.
private struct BufferChunk: ByteChunk {
    let buffer: ByteBuffer

    var count: Int { buffer.readableBytes }

    func withUnsafeBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try buffer.withUnsafeReadableBytes(body)
    }
}
