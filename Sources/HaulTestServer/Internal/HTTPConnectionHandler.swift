import NIOCore
import NIOHTTP1

/// Answers the requests of one connection, one at a time (NIO's pipelining handler in front queues the
/// next request until this one's response has ended).
final class HTTPConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let server: ServerContext
    private var requestHead: HTTPRequestHead?

    /// The request being answered; `nil` between requests.
    struct Exchange {
        var path: String
        var host: String?
        var keepAlive: Bool
        var body: BodyPlan?
        var sent = 0
        var stalled = false
        var rateStart: NIODeadline?
        /// The whole body is written and the message ended (or the connection is being cut): nothing more to pump.
        var bodyDone = false
    }

    var exchange: Exchange?
    /// Bumped whenever an exchange ends, so timers and gate callbacks of an old one do nothing.
    var generation = 0
    var timer: Scheduled<Void>?
    /// Set while ``pump(context:)`` runs; a re-entrant call only sets `pumpAgain`, for another pass after it.
    var isPumping = false
    var pumpAgain = false
    var isActive = true
    /// Closes the connection when no request has come for the server's idle timeout; armed only between exchanges.
    private var idleTimer: Scheduled<Void>?
    /// Whether the connection is TLS: a file then goes out in read slices, as TLS cannot encrypt a `sendfile` region.
    let usesTLS: Bool

    init(server: ServerContext, usesTLS: Bool) {
        self.server = server
        self.usesTLS = usesTLS
    }

    func handlerAdded(context: ChannelHandlerContext) {
        armIdleTimer(context: context)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            idleTimer?.cancel()
            idleTimer = nil
            requestHead = head
        case .body:
            break
        case .end:
            guard let head = requestHead else { return }
            requestHead = nil
            begin(context: context, head: head)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        isActive = false
        idleTimer?.cancel()
        idleTimer = nil
        finishExchange()
        context.fireChannelInactive()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, exchange?.body != nil, timer == nil {
            pump(context: context)
        }
        context.fireChannelWritabilityChanged()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    // MARK: Stages: record, hold, delay, respond

    private func begin(context: ChannelHandlerContext, head: HTTPRequestHead) {
        let target = RequestTarget(head.uri)
        let host = head.headers.first(name: "host")
        let record = RecordedRequest(
            method: head.method.rawValue,
            target: head.uri,
            path: String(target.path),
            host: host,
            headers: head.headers.map { RecordedRequest.Header(name: $0.name, value: $0.value) }
        )
        let ruleFault = server.state.requestStarted(record)
        let queryFault = target.queryItems.isEmpty ? Fault() : Fault(queryItems: target.queryItems)
        let fault = ruleFault.map { $0.overridden(by: queryFault) } ?? queryFault
        // A body without a length ends where the connection closes.
        let keepAlive = head.isKeepAlive && fault.closeConnection != true && fault.noLength != true
        exchange = Exchange(path: record.path, host: host, keepAlive: keepAlive)
        let current = generation

        if let gate = fault.holdGate, let opened = server.state.waitAtGate(gate, eventLoop: context.eventLoop) {
            opened.assumeIsolated().whenSuccess {
                guard self.generation == current, self.isActive else { return }
                self.afterHold(context: context, head: head, target: target, fault: fault)
            }
            return
        }
        afterHold(context: context, head: head, target: target, fault: fault)
    }

    private func afterHold(context: ChannelHandlerContext, head: HTTPRequestHead, target: RequestTarget, fault: Fault) {
        guard let delay = fault.delayMilliseconds, delay > 0 else {
            respond(context: context, head: head, target: target, fault: fault)
            return
        }
        let current = generation
        timer = context.eventLoop.assumeIsolated().scheduleTask(in: .milliseconds(Int64(delay))) {
            self.timer = nil
            guard self.generation == current, self.isActive else { return }
            self.respond(context: context, head: head, target: target, fault: fault)
        }
    }

    private func respond(context: ChannelHandlerContext, head: HTTPRequestHead, target: RequestTarget, fault: Fault) {
        let action = ResponsePlanner(server: server, head: head, target: target, fault: fault).plan()
        switch action {
        case .drop:
            context.close(promise: nil)
        case .respond(var responseHead, let body, let headOnly):
            let keepAlive = exchange?.keepAlive ?? false
            if !keepAlive { responseHead.headers.replaceOrAdd(name: "Connection", value: "close") }
            context.write(wrapOutboundOut(.head(responseHead)), promise: nil)
            if headOnly {
                // The body never comes; the exchange stays in flight until the client hangs up.
                context.flush()
                return
            }
            guard let body else {
                endMessage(context: context)
                return
            }
            exchange?.body = body
            pump(context: context)
        }
    }

    /// Completes the message and, once written, the exchange.
    func endMessage(context: ChannelHandlerContext) {
        let keepAlive = exchange?.keepAlive ?? false
        let current = generation
        context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in
            guard self.generation == current else { return }
            self.finishExchange()
            if keepAlive { self.armIdleTimer(context: context) } else { context.close(promise: nil) }
        }
    }

    /// Starts the wait for the next request, if the server has an idle timeout and no request is on its way (the
    /// next one of a pipelined run can have come already).
    private func armIdleTimer(context: ChannelHandlerContext) {
        guard let timeout = server.idleTimeout, isActive, exchange == nil, requestHead == nil else { return }
        idleTimer?.cancel()
        idleTimer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) {
            self.idleTimer = nil
            guard self.exchange == nil, self.requestHead == nil else { return }
            context.close(promise: nil)
        }
    }

    /// Flushes what was written, then closes the connection mid-message (cut and short bodies).
    func closeAfterFlush(context: ChannelHandlerContext) {
        let current = generation
        let marker = wrapOutboundOut(.body(.byteBuffer(ByteBuffer())))
        context.writeAndFlush(marker).assumeIsolated().whenComplete { _ in
            guard self.generation == current else { return }
            context.close(promise: nil)
        }
    }

    func finishExchange() {
        timer?.cancel()
        timer = nil
        guard let finished = exchange else { return }
        exchange = nil
        generation &+= 1
        if let body = finished.body { ResponsePlanner.release(body.source) }
        server.state.requestFinished(host: finished.host)
    }
}
