import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A connection's only handler: writes each exchange's request, parses the responses and routes their parts to the
/// current exchange. Touched only on the channel's event loop.
final class ExchangeHandler: ChannelDuplexHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private var parser = ResponseParser()

    private var exchange: Exchange?
    private var context: ChannelHandlerContext?
    /// A read the pipeline asked for while the exchange had too much buffered; issued when it drains.
    private var heldRead = false
    private var paused = false
    /// Whether the current exchange has had the connection leave Linux's interactive acknowledgement mode (see
    /// ``acknowledgeAtOnce(_:)``).
    private var acknowledging = false
    /// Set while `channelRead` parses. What a part sets off can close this very channel from inside the parse (a
    /// response that ends with `Connection: close`, the transport's last reference dropped as a connection goes
    /// back to its pool), and NIO then calls `channelInactive` at once: the parser is mid-parse, so the close is
    /// handled once the parse has returned.
    private var parsing = false
    private var closedWhileParsing = false
    /// An error that closed the connection between exchanges: what the next exchange is told. A TLS 1.3 server that
    /// refuses the client's certificate says so right after the handshake, before the request is written.
    private var failureWithoutExchange: (any Error)?

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    /// Starts `exchange` on this connection: writes its request.
    ///
    /// Without a promise: a write that fails closes the channel, and `errorCaught` or `channelInactive` fails the
    /// exchange.
    func begin(_ exchange: Exchange, _ request: EncodedRequest) {
        guard let context, context.channel.isActive else {
            exchange.fail(failureWithoutExchange ?? NIOTransportError.closedBeforeResponse)
            return
        }
        self.exchange = exchange
        paused = false
        acknowledging = false
        parser.expect(head: request.isHead)
        context.writeAndFlush(wrapOutboundOut(request.bytes), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        parsing = true
        do {
            try parser.parse(unwrapInboundIn(data)) { deliver($0) }
            parsing = false
        } catch {
            parsing = false
            // The connection's framing is lost: nothing more can be read from it.
            exchange?.fail(error)
            exchange = nil
            context.close(promise: nil)
        }
        if closedWhileParsing {
            closedWhileParsing = false
            becameInactive(context: context)
        }
    }

    private func deliver(_ part: ResponsePart) {
        guard let exchange else { return }
        switch part {
        case .head(let head):
            exchange.receive(head: head)
        case .body(let buffer):
            if exchange.receive(body: buffer) { paused = true }
        case .end(let keepAlive):
            self.exchange = nil
            paused = false
            exchange.receiveEnd(keepAlive: keepAlive)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if let exchange {
            if !acknowledging {
                acknowledging = true
                Self.acknowledgeAtOnce(context.channel)
            }
            exchange.readComplete()
        }
        context.fireChannelReadComplete()
    }

    /// While a response is still arriving, Linux's delayed acknowledgement can hold the server's last segments for
    /// its 40 ms timer: after a request the connection counts as interactive, and a server whose sends wait for
    /// acknowledgements (nginx with `sendfile` and `tcp_nopush`, for one) stops until it fires, once per response on
    /// a reused connection (bench/compare, s2w1). `TCP_QUICKACK` takes the connection out of that mode, so what has
    /// been read is acknowledged at once; the next request puts it back, so it is set once per response, after the
    /// first read that did not end it (a response that arrives in one read costs nothing). Darwin has no such option.
    private static func acknowledgeAtOnce(_ channel: any Channel) {
        #if os(Linux)
        try? channel.syncOptions?.setOption(.tcpOption(NIOBSDSocket.Option(rawValue: CInt(TCP_QUICKACK))), value: 1)
        #endif
    }

    func read(context: ChannelHandlerContext) {
        if paused {
            heldRead = true
        } else {
            context.read()
        }
    }

    /// Called from the reading task once the exchange has drained: issues the read held back.
    func resumeReading(on channel: any Channel) {
        channel.eventLoop.execute { [self] in
            paused = false
            if heldRead, let context {
                heldRead = false
                context.read()
            }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let exchange {
            exchange.fail(error)
        } else {
            failureWithoutExchange = error
        }
        exchange = nil
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if parsing {
            closedWhileParsing = true
        } else {
            becameInactive(context: context)
        }
    }

    private func becameInactive(context: ChannelHandlerContext) {
        if parser.endsAtClose { deliver(.end(keepAlive: false)) }  // a body framed by the close is complete
        exchange?.fail(NIOTransportError.closedBeforeResponse)
        exchange = nil
        context.fireChannelInactive()
    }
}
