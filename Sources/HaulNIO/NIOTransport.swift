public import Haul
public import HTTPTypes
public import struct Foundation.URL
import HaulNIOSupport
import HaulOperations
public import NIOCore
import NIOPosix

/// Haul's own HTTP/1.1 client for plain `http://`, written directly on SwiftNIO: the fastest transport for
/// batches of small files, and what `haul get` uses by default on Linux.
///
/// Why a second NIO-based transport beside `AsyncHTTPClientTransport`: for a small file AsyncHTTPClient's request
/// machinery (request bag, connection pool state machine, several hops between the event loop and Swift
/// concurrency per request) costs more CPU than the rest of Haul's work together (bench/compare, s3). Here one
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
/// handler;
/// keep-alive connections reused per host and port (an idle connection the server closed is
/// replaced transparently, once per request); bodies streamed with back-pressure (reading from the socket
/// pauses while more than 1 MiB waits); the transfer stops when the calling task is cancelled or the body is
/// abandoned; no redirects, no decompression (the engine's rules apply, see `HTTPTransport`).
/// What it leaves to `fallback`: every other scheme (`https`: TLS stays in AsyncHTTPClient, one well-tested
/// place). Without a fallback such a request fails with ``NIOTransportError/unsupportedScheme(_:)``.
public final class NIOTransport: InterruptibleHTTPTransport {
    private let group: any EventLoopGroup
    private let fallback: (any HTTPTransport)?
    private let pool = Locked(Pool())

    private struct Pool {
        var idle: [Endpoint: [Connection]] = [:]
    }

    /// Idle connections kept per host and port beyond this are closed.
    static let maxIdlePerEndpoint = 64

    /// Creates a transport.
    ///
    /// - Parameters:
    ///   - fallback: the transport for requests this one does not speak (`https`); typically an
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
        guard url.scheme?.utf8.equalsIgnoringCase("http") == true else { return nil }
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

    /// Sends `request` and returns at the response head; the body streams as the engine reads it.
    public func send(_ request: HTTPRequest, options: TransportOptions) async throws -> TransportResponse {
        guard Self.speaks(request) else {
            if let fallback { return try await fallback.send(request, options: options) }
            throw NIOTransportError.unsupportedScheme(request.scheme ?? "")
        }
        return try await exchange(request, connectTimeout: options.connectTimeout, interruption: nil)
    }

    /// Whether `request` is one of this transport's own (plain `http`): those can be interrupted; the fallback's
    /// cannot.
    public func canInterrupt(_ request: HTTPRequest) -> Bool {
        Self.speaks(request)
    }

    /// Sends `request` like ``send(_:options:)``; interrupting `interruption` fails the wait for the head or
    /// the body's next read and closes the connection. A request for the fallback goes there uninterruptible.
    public func send(
        _ request: HTTPRequest, options: TransportOptions, interruption: TransferInterruption
    ) async throws -> TransportResponse {
        guard Self.speaks(request) else { return try await send(request, options: options) }
        return try await exchange(request, connectTimeout: options.connectTimeout, interruption: interruption)
    }

    /// Whether the request's scheme is `http` in any case; compared in place, as it is asked twice per request.
    private static func speaks(_ request: HTTPRequest) -> Bool {
        request.scheme?.utf8[...].equalsIgnoringCase("http") ?? false
    }

    private func exchange(
        _ request: HTTPRequest, connectTimeout: Duration, interruption: TransferInterruption?
    ) async throws -> TransportResponse {
        let endpoint = try Endpoint(authority: request.authority ?? "")
        let encoded = try EncodedRequest(request, host: endpoint.hostHeader)
        while true {
            let (connection, reused): (Connection, Bool)
            do {
                (connection, reused) = try await acquire(endpoint, connectTimeout: connectTimeout)
            } catch {
                let destination = ServerAddress(host: endpoint.host, port: endpoint.port)
                throw await ReadableFailure.of(error, at: destination, connectTimeout: connectTimeout) ?? error
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
                if reused, let closed = error as? NIOTransportError, closed == .closedBeforeResponse { continue }
                throw error
            }
        }
    }

    // MARK: Connections

    private func acquire(_ endpoint: Endpoint, connectTimeout: Duration) async throws -> (Connection, reused: Bool) {
        let here = currentExecutor()?.loop
        let idle = pool.withLock { pool -> Connection? in
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
        let handler = ExchangeHandler()
        let channel = try await ClientBootstrap(group: here ?? group)
            .connectTimeout(.nanoseconds(Int64(connectTimeout.seconds * 1e9)))
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(handler)
                }
            }
            .connect(host: endpoint.host, port: endpoint.port)
            .get()
        return (Connection(channel: channel, handler: handler), false)
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
