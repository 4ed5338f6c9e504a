public import AsyncHTTPClient
public import Haul
public import HTTPTypes
import NIOCore
import NIOHTTP1

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

    private let client: HTTPClient
    private let ownsClient: Bool

    /// Creates a transport with its own client, configured for the engine: no redirects, no decompression,
    /// connection pooling with keep-alive. Call ``shutdown()`` when done with it.
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
        // Idle and minimum-speed limits are the engine's watchdog's job, not the client's.
        configuration.timeout = .init(connect: .milliseconds(max(Int64(connectTimeout.seconds * 1000), 1)), read: nil)
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        ownsClient = true
    }

    /// Creates a transport on an existing client. The client should be configured with
    /// `redirectConfiguration = .disallow` and `decompression = .disabled`; the caller shuts it down.
    public init(client: HTTPClient) {
        self.client = client
        ownsClient = false
    }

    deinit {
        // Not syncShutdown: the last reference may go on one of NIO's event loop threads (where Swift concurrency
        // itself runs in `haul`), and blocking there is a precondition failure. An already shut-down client
        // answers with an error, which is of no interest here.
        if ownsClient { client.shutdown { _ in } }
    }

    /// Shuts the client down (only a client this transport created).
    public func shutdown() async throws {
        if ownsClient { try await client.shutdown() }
    }

    /// Sends `request` and returns at the response head; the body streams as the engine reads it.
    /// `connectTimeout` is not used: AsyncHTTPClient takes it per client (see ``init(maximumConnectionsPerHost:connectTimeout:)``).
    public func send(_ request: HTTPRequest, connectTimeout: Duration) async throws -> TransportResponse {
        var outgoing = HTTPClientRequest(url: Self.url(of: request))
        outgoing.method = .RAW(value: request.method.rawValue)
        for field in request.headerFields {
            outgoing.headers.add(name: field.name.rawName, value: field.value)
        }
        // The deadline only bounds the wait for the head (AsyncHTTPClient drops it once the head is in); the
        // engine's stall watchdog covers the body.
        let response = try await client.execute(outgoing, deadline: .now() + .hours(24))
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
                return { try await iterator.next().map(BufferChunk.init) }
            })
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
