public import Foundation
public import HTTPTypes

/// Something that moves bytes for one HTTP request: a request head goes in, a response head and a stream of
/// body chunks come out.
///
/// A transport holds no policy. It must not follow redirects (the engine does, with its own rules), must not
/// decode content (it sends `Accept-Encoding: identity` and hands the body over as sent), and must stop the
/// transfer when the calling task is cancelled or the body stream is abandoned. Haul ships two:
/// `AsyncHTTPClientTransport` (module `HaulAsyncHTTPClient`, the default on Linux) and
/// `URLSessionTransport` (`HaulURLSession`, the default on Apple platforms).
public protocol HTTPTransport: Sendable {
    /// Sends a body-less request and returns once the response head has arrived.
    ///
    /// - Parameters:
    ///   - request: the request head; its `scheme` and `authority` say where to connect.
    ///   - options: the connect timeout, how `https` is verified, the HTTP version to ask for. A transport that
    ///     cannot apply a setting other than the default fails the request with an error that says so, rather than
    ///     ignoring it.
    /// - Throws: `CancellationError` or a transport error if no response head arrives.
    func send(_ request: HTTPRequest, options: TransportOptions) async throws -> TransportResponse

    /// Where a download of `url` is best run: the executor of the thread that will receive its response, so
    /// that the engine's work on each response needs no switch between threads. `nil` (the default): Swift's
    /// global executor. Asked once per download by ``DownloadQueue`` and ``Downloader/start(_:)``.
    func preferredExecutor(for url: URL) -> (any TaskExecutor)?

    /// Lets at least `count` connections to one host be open at once. A ``DownloadQueue`` tells its transport its
    /// width when it is made and whenever it grows, so that its own limits decide how many downloads run: a transport
    /// with a cap of its own raises it. The default does nothing (no cap).
    func allowConnections(perHost count: Int)
}

extension HTTPTransport {
    /// No preference: downloads run on Swift's global executor.
    public func preferredExecutor(for url: URL) -> (any TaskExecutor)? { nil }

    /// No cap of its own: nothing to raise.
    public func allowConnections(perHost count: Int) {}
}

/// A transport error that knows whether sending the request again can help.
///
/// The engine retries transport errors by default (a reset, a refused or closed connection usually pass). An error
/// that conforms and says ``isTransient`` is `false` fails the download at once: a response that breaks the
/// protocol (a head over the size limit, a bad `Content-Length`) comes back the same on every attempt.
public protocol TransportFailure: Error {
    /// Whether another attempt may succeed.
    var isTransient: Bool { get }
}

/// A transport whose exchanges the engine can end without cancelling a task (see ``TransferInterruption``).
///
/// The engine watches every attempt for stalls. With a plain ``HTTPTransport`` the only way to stop a stalled
/// exchange is to cancel the task it runs in, so each attempt runs in a child task of its own. With this one the
/// attempt runs in the download's own task, and a stall interrupts the exchange instead: one task and two task
/// switches fewer per download, which shows on batches of small files.
public protocol InterruptibleHTTPTransport: HTTPTransport {
    /// Whether ``send(_:options:interruption:)`` can interrupt `request` sent with `options` (asked before each
    /// request: a redirect may lead to one it cannot, which the engine then sends the plain way).
    func canInterrupt(_ request: HTTPRequest, options: TransportOptions) -> Bool

    /// Sends like ``HTTPTransport/send(_:options:)``; once `interruption` is interrupted, the pending send
    /// and every read of the body after it fail promptly and the connection is closed.
    func send(
        _ request: HTTPRequest, options: TransportOptions, interruption: TransferInterruption
    ) async throws -> TransportResponse
}

/// A response head and its body, as a transport delivers them.
public struct TransportResponse: Sendable {
    /// Status and header fields.
    public var head: HTTPResponse
    /// The body, streamed. Iterate it once; stop iterating (or cancel the task) to abort the transfer.
    public var body: ResponseBody

    /// Creates a response from a head and a body.
    public init(head: HTTPResponse, body: ResponseBody) {
        self.head = head
        self.body = body
    }
}

/// A contiguous piece of a response body, read without copying.
public protocol ByteChunk: Sendable {
    /// The number of bytes in the chunk.
    var count: Int { get }
    /// Calls `body` with the chunk's bytes.
    func withUnsafeBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result
}

extension Data: ByteChunk {}

/// A response body as an asynchronous sequence of chunks, whatever the transport's own chunk type is.
public struct ResponseBody: AsyncSequence, Sendable {
    /// A chunk of body bytes.
    public typealias Element = any ByteChunk

    private let makeNext: @Sendable () -> (() async throws -> (any ByteChunk)?)
    private let letGo: @Sendable () async -> Void

    /// Creates a body from a factory of "next chunk" functions: each call to the factory starts one iteration.
    ///
    /// - Parameters:
    ///   - makeNext: makes the "next chunk" function of one iteration; the function returns `nil` at the end.
    ///   - close: what ``close()`` does: abandon the rest of the body if it was not read to its end, and return
    ///     once the transport no longer holds the connection for this response (back in its pool, or closed). The
    ///     default returns at once, for transports that cannot tell when their connection is closed.
    public init(
        _ makeNext: @escaping @Sendable () -> (() async throws -> (any ByteChunk)?),
        close: @escaping @Sendable () async -> Void = {}
    ) {
        self.makeNext = makeNext
        letGo = close
    }

    /// Ends the response: a body not read to its end is abandoned, and the call returns once the transport has
    /// let go of the connection it came over (given back to its pool, or closed).
    ///
    /// The engine calls this before a download's slot in a queue is freed, so that a cancelled or failed download's
    /// connection is gone before the next download opens one: a server then never counts more connections than
    /// the queue's limits allow. Safe to call more than once, and while no iteration is running.
    public func close() async {
        await letGo()
    }

    /// A body with no bytes.
    public static let empty = ResponseBody { { nil } }

    /// Iterates the chunks.
    public struct AsyncIterator: AsyncIteratorProtocol {
        fileprivate let nextChunk: () async throws -> (any ByteChunk)?

        /// The next chunk, or `nil` at the end of the body.
        public mutating func next() async throws -> (any ByteChunk)? {
            try await nextChunk()
        }
    }

    /// Starts iterating the body.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(nextChunk: makeNext())
    }
}
