public import AsyncHTTPClient
public import Haul
import HaulNIOSupport
import Foundation
import HaulOperations
public import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOSSL

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

    /// The client that offers HTTP/2 by ALPN; `http1Client` asks for HTTP/1.1 only. AsyncHTTPClient chooses the
    /// protocols it offers per client, not per request.
    private let client: HTTPClient
    private let http1Client: HTTPClient
    private let ownsClient: Bool
    private let connectTimeout: Duration
    /// swift-nio-ssl configurations made from the engine's TLS settings, one per distinct value: AsyncHTTPClient
    /// pools connections per configuration, and the files they name are read once.
    private let tlsConfigurations = Locked([TLSSettings: TLSConfiguration]())

    /// Creates a transport with its own client, configured for the engine: no redirects, no decompression,
    /// connection pooling with keep-alive, and a failed connection reported at once rather than retried until
    /// the connect timeout (the engine retries, with backoff). Call ``shutdown()`` when done with it.
    ///
    /// - Parameters:
    ///   - maximumConnectionsPerHost: the client's soft limit of HTTP/1.1 connections to one host; at least the
    ///     queue's width, so that the queue's limits decide how many downloads run.
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
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        configuration.httpVersion = .http1Only
        http1Client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        ownsClient = true
        self.connectTimeout = connectTimeout
    }

    /// Creates a transport on an existing client, used for every request whatever HTTP version it asks for. The
    /// client should be configured with `redirectConfiguration = .disallow` and `decompression = .disabled` (and
    /// `connectionPool.retryConnectionEstablishment = false` for a prompt failure when nothing listens); the caller
    /// shuts it down. `connectTimeout` is the client's, for messages.
    public init(client: HTTPClient, connectTimeout: Duration = .seconds(10)) {
        self.client = client
        http1Client = client
        ownsClient = false
        self.connectTimeout = connectTimeout
    }

    deinit {
        // Not syncShutdown: the last reference may go on one of NIO's event loop threads (where Swift concurrency
        // itself runs in `haul`), and blocking there is a precondition failure. An already shut-down client
        // answers with an error, which is of no interest here.
        if ownsClient {
            client.shutdown { _ in }
            http1Client.shutdown { _ in }
        }
    }

    /// Shuts the client down (only a client this transport created).
    public func shutdown() async throws {
        if ownsClient {
            try await client.shutdown()
            try await http1Client.shutdown()
        }
    }

    /// Sends `request` and returns at the response head; the body streams as the engine reads it.
    /// The connect timeout of `options` is not used: AsyncHTTPClient takes it per client (see
    /// ``init(maximumConnectionsPerHost:connectTimeout:)``). Errors are `TransportError`s naming the host and the
    /// reason; a certificate that is not trusted is a permanent one.
    public func send(_ request: HTTPRequest, options: TransportOptions) async throws -> TransportResponse {
        var outgoing = HTTPClientRequest(url: Self.url(of: request))
        outgoing.method = .RAW(value: request.method.rawValue)
        for field in request.headerFields {
            outgoing.headers.add(name: field.name.rawName, value: field.value)
        }
        let response: HTTPClientResponse
        do {
            if options.tls != .default { outgoing.tlsConfiguration = try tlsConfiguration(for: options.tls) }
            let client = options.httpVersion == .http1_1 ? http1Client : client
            // The deadline only bounds the wait for the head (AsyncHTTPClient drops it once the head is in); the
            // engine's stall watchdog covers the body.
            response = try await client.execute(outgoing, deadline: .now() + .hours(24))
        } catch {
            throw await readable(error, request: request)
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
                        throw await self.readable(error, request: request)
                    }
                }
            })
    }

    private func tlsConfiguration(for settings: TLSSettings) throws -> TLSConfiguration {
        if let made = tlsConfigurations.withLock({ $0[settings] }) { return made }
        let made = try settings.makeClientConfiguration()
        tlsConfigurations.withLock { $0[settings] = made }
        return made
    }

    /// `error` in words (see `ReadableFailure`), AsyncHTTPClient's own errors included.
    private func readable(_ error: any Error, request: HTTPRequest) async -> any Error {
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
        return await ReadableFailure.of(error, at: destination, connectTimeout: connectTimeout) ?? error
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
