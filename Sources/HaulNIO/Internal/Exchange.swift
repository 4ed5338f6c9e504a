import HTTPTypes
import Haul
import HaulOperations
import NIOCore
import NIOSSL

/// A connection and the handler that routes its responses.
struct Connection: Sendable {
    let channel: any Channel
    let handler: ExchangeHandler
}

/// One request and its response on one connection: filled by the handler on the event loop, read by the
/// engine's task. Everything mutable is in `state`; continuations are resumed outside its lock and carry no value:
/// the head and the chunks are taken under the lock the event loop handed them over with, a hand-off that
/// ThreadSanitizer sees (it reports the head and the chunks as races when they travel in the continuation).
final class Exchange: Sendable {
    let connection: Connection
    private let endpoint: Endpoint
    private let transport: WeakTransport

    private struct State {
        var headWaiter: CheckedContinuation<Void, any Error>?
        var pendingHead: HTTPResponse?
        /// The head once handed over (after the read that brought it was parsed).
        var deliveredHead: HTTPResponse?
        var chunks = CircularBuffer<ByteBuffer>()
        var buffered = 0
        /// The handler stopped reading from the socket because too much is buffered.
        var readingPaused = false
        var ended = false
        var failure: (any Error)?
        var bodyWaiter: CheckedContinuation<Void, any Error>?
        /// Set when nobody will read the rest (the body was abandoned or the task cancelled).
        var abandoned = false
        /// Whether any byte of the response arrived (a reused connection that closed before one did is retried).
        var sawBytes = false
        /// The response ended and its connection went back to the transport's pool (decided with `ended`, under
        /// the lock, so that ``Exchange/close()`` never waits for a connection that stays open).
        var pooled = false
    }

    private let state = Locked(State())

    /// Reading from the socket pauses above this many buffered body bytes and resumes below half of it, unless the
    /// endpoint's receive window asks for less (half of it is this buffer, half the socket's).
    static let highWater = 1 << 20
    private let highWater: Int

    /// The least a buffered chunk counts for: the longest chunk-size line that may come with it. A chunked body of
    /// 1-byte chunks behind 4 KiB chunk extensions, counted by its body bytes, would be read about 4,000 times past
    /// the mark (gigabytes, each chunk a slice keeping its whole read in memory) before reading pauses. A body's
    /// ordinary reads are larger, and count as they are.
    static let leastChunkCost = ResponseParser.maxChunkLineSize

    /// What `chunk` counts for against ``highWater``.
    private static func cost(of chunk: ByteBuffer) -> Int { max(chunk.readableBytes, leastChunkCost) }

    init(connection: Connection, transport: NIOTransport, endpoint: Endpoint) {
        highWater = endpoint.receiveWindow.map { max($0 / 2, 1) } ?? Self.highWater
        self.connection = connection
        self.transport = WeakTransport(transport)
        self.endpoint = endpoint
    }

    /// Sends the request and waits for the response head. From now on, interrupting `interruption` ends this
    /// exchange as cancelling the task would (the engine tells a stall from a cancellation by itself).
    func start(_ request: EncodedRequest, interruption: TransferInterruption?) async throws -> HTTPResponse {
        interruption?.onInterrupt { [weak self] in self?.fail(CancellationError(), abandon: true) }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                // A task cancelled before it got here has already run `onCancel`: nothing would resume a waiter
                // stored now, so the failure is reported at once.
                let earlier = state.withLock { state -> (any Error)? in
                    if let failure = state.failure { return failure }
                    state.headWaiter = continuation
                    return nil
                }
                if let earlier {
                    continuation.resume(throwing: earlier)
                    return
                }
                let handler = connection.handler
                let loop = connection.channel.eventLoop
                if loop.inEventLoop {
                    handler.begin(self, request)  // a task running on the connection's loop writes at once
                } else {
                    loop.execute { handler.begin(self, request) }
                }
            }
        } onCancel: {
            fail(CancellationError(), abandon: true)
        }
        return try state.withLock { state in
            guard let head = state.deliveredHead else {
                throw state.failure ?? NIOTransportError.closedBeforeResponse
            }
            return head
        }
    }

    /// The body as the engine iterates it. When the iteration (or the response itself) is dropped before the
    /// end, the connection is closed: its unread rest would otherwise arrive as the next response.
    func body() -> ResponseBody {
        let lease = Lease(self)
        return ResponseBody {
            { try await lease.exchange.next(lease) }
        } close: {
            await lease.exchange.close()
        }
    }

    /// Abandons the response unless it ended, and returns once its connection is back in the pool or closed: the
    /// server has then seen the close before the caller's next request (the queue frees a slot only after this).
    func close() async {
        // One decision with `receiveEnd`, under the lock: the connection went back to the pool, or it never will
        // (abandoned) and is closed, by `fail` below or, when the response ends meanwhile, by `receiveEnd`. Checked
        // and abandoned in two steps, an end in between would pool the connection and leave this waiting for a
        // close that never comes.
        let pooled = state.withLock { state -> Bool in
            if state.pooled { return true }
            state.abandoned = true
            return false
        }
        if pooled { return }
        fail(CancellationError(), abandon: true)
        try? await connection.channel.closeFuture.get()
    }

    /// The next chunk, `nil` at the end. Chunks already in are taken without suspending (for a small response,
    /// all of them: no continuation, no cancellation handler).
    private func next(_ lease: Lease) async throws -> (any ByteChunk)? {
        while true {
            if Task.isCancelled {
                fail(CancellationError(), abandon: true)
                throw CancellationError()
            }
            enum Now { case chunk(ByteBuffer, resumeReading: Bool), end, error(any Error), wait }
            let now = state.withLock { state -> Now in
                if let chunk = state.chunks.popFirst() {
                    state.buffered -= Self.cost(of: chunk)
                    let resume = state.readingPaused && state.buffered <= highWater / 2
                    if resume { state.readingPaused = false }
                    return .chunk(chunk, resumeReading: resume)
                }
                if let failure = state.failure { return .error(failure) }
                return state.ended ? .end : .wait
            }
            switch now {
            case .chunk(let chunk, let resumeReading):
                if resumeReading { connection.handler.resumeReading(on: connection.channel) }
                return BufferChunk(buffer: chunk)
            case .end: return nil
            case .error(let error): throw error
            case .wait: break
            }
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                    let ready = state.withLock { state -> Bool in
                        if !state.chunks.isEmpty || state.failure != nil || state.ended { return true }
                        state.bodyWaiter = continuation
                        return false
                    }
                    if ready { continuation.resume() }
                }
            } onCancel: {
                fail(CancellationError(), abandon: true)
            }
        }
    }

    // MARK: Called by the handler, on the event loop

    /// Takes the response head. Every response starts with one, so this is also where the exchange learns that
    /// bytes of a response arrived (informational heads never get here: the parser skips them).
    func receive(head: HTTPResponse) {
        state.withLock { state in
            state.sawBytes = true
            state.pendingHead = head
        }
    }

    /// Hands the head over once the read that brought it is parsed: for a small response, the body and its end
    /// are in by then, and the engine reads them without waiting again.
    func readComplete() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            guard let head = state.pendingHead, state.deliveredHead == nil else { return nil }
            state.deliveredHead = head
            state.pendingHead = nil
            defer { state.headWaiter = nil }
            return state.headWaiter
        }
        waiter?.resume()
    }

    /// Stores a body chunk and wakes the reader; returns whether reading should pause.
    func receive(body: ByteBuffer) -> Bool {
        let (waiter, pause) = state.withLock { state -> (CheckedContinuation<Void, any Error>?, Bool) in
            if !state.abandoned {
                state.chunks.append(body)
                state.buffered += Self.cost(of: body)
            }
            if state.buffered > highWater { state.readingPaused = true }
            defer { state.bodyWaiter = nil }
            return (state.bodyWaiter, state.readingPaused)
        }
        waiter?.resume()
        return pause
    }

    /// The response ended: the connection goes back to the pool if it may be reused and nobody abandoned it.
    func receiveEnd(keepAlive: Bool) {
        let (waiter, transport) = state.withLock {
            state -> (CheckedContinuation<Void, any Error>?, NIOTransport?) in
            state.ended = true
            let transport = keepAlive && !state.abandoned && state.failure == nil ? self.transport.value : nil
            state.pooled = transport != nil
            defer { state.bodyWaiter = nil }
            return (state.bodyWaiter, transport)
        }
        // Back in the pool before the reader learns of the end: a caller that downloads one file after another
        // then finds it there for the next request instead of opening another connection.
        if let transport {
            transport.release(connection, to: endpoint)
        } else {
            connection.channel.close(promise: nil)
        }
        readComplete()
        waiter?.resume()
    }

    /// Fails whatever waits (the head or the next chunk) and closes the connection, unless the response has
    /// already ended.
    func fail(_ error: any Error, abandon: Bool = false) {
        let (headWaiter, bodyWaiter, reported) = state.withLock {
            state -> (CheckedContinuation<Void, any Error>?, CheckedContinuation<Void, any Error>?, (any Error)?) in
            if abandon { state.abandoned = true }
            guard !state.ended, state.failure == nil else { return (nil, nil, nil) }
            // Before any byte of a response, every way a connection ends reads the same (and a reused connection is
            // then retried); once the head is in, a close is a cut body. Other errors (a TLS alert) stay as they are.
            let reported: any Error =
                if !Self.endsConnection(error) {
                    error
                } else if !state.sawBytes {
                    NIOTransportError.closedBeforeResponse
                } else if let closed = error as? NIOTransportError, closed == .closedBeforeResponse {
                    NIOTransportError.closedDuringBody
                } else if case .uncleanShutdown? = error as? NIOSSLError {
                    NIOTransportError.closedDuringBody  // closed without TLS's close_notify: a cut body too
                } else {
                    error
                }
            state.failure = reported
            defer {
                state.headWaiter = nil
                state.bodyWaiter = nil
            }
            return (state.headWaiter, state.bodyWaiter, reported)
        }
        guard let reported else { return }
        headWaiter?.resume(throwing: reported)
        bodyWaiter?.resume(throwing: reported)
        connection.channel.close(promise: nil)
    }

    /// Whether `error` is the connection going away (closed, reset, closed without TLS's close_notify) rather than
    /// something the server said.
    private static func endsConnection(_ error: any Error) -> Bool {
        if let own = error as? NIOTransportError { return !own.isInvalidResponse }
        if case .uncleanShutdown? = error as? NIOSSLError { return true }
        return error is IOError || error is ChannelError
    }

    /// Lets the exchange notice that nobody reads the body any more.
    final class Lease: Sendable {
        let exchange: Exchange
        init(_ exchange: Exchange) { self.exchange = exchange }
        deinit { exchange.fail(CancellationError(), abandon: true) }
    }
}

/// A body chunk as NIO delivers it, read in place.
struct BufferChunk: ByteChunk {
    let buffer: ByteBuffer

    var count: Int { buffer.readableBytes }

    func withUnsafeBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try buffer.withUnsafeReadableBytes(body)
    }
}

/// The transport an exchange gives its connection back to, not kept alive by the exchange.
struct WeakTransport: Sendable {
    weak var value: NIOTransport?
    init(_ value: NIOTransport) { self.value = value }
}
