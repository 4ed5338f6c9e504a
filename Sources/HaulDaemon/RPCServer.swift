import Foundation
public import NIOCore
import NIOHTTP1
package import HaulOperations
public import HaulMetrics
import NIOPosix
import NIOSSL
import NIOWebSocket

/// Who may talk to the daemon over its socket, besides knowing the secret.
public struct RPCAccess: Sendable {
    /// Origins (`scheme://host[:port]`) whose pages may call the daemon from a browser, besides its own.
    public var allowedOrigins: Set<String>
    /// Names the daemon answers to in a request's `Host` (its port added), besides its loopback names and the
    /// addresses it listens on: the DNS names of a machine other machines reach it by.
    public var allowedHosts: Set<String>
    /// The largest request body accepted (aria2's `--rpc-max-request-size`, 2 MiB).
    public var maxRequestSize: Int
    /// How long an answer to a call with a wrong secret is held back (aria2: 1 s), to slow guessing.
    public var unauthorizedDelay: Duration
    /// Holds every wrong secret's answer back after the one before it (``unauthorizedDelay`` each), across the
    /// server's connections, its `/session` and its `/metrics`: shared by every copy of this value.
    package var guesses = GuessThrottle()

    /// How long a client has to send a whole request, and how long a connection may wait for its next one: a
    /// connection that stops halfway (or holds a slot doing nothing) is closed then. Not a WebSocket's: it waits for
    /// notifications.
    public var requestTimeout: Duration
    /// The most connections open at once; one more is closed as soon as it is accepted, so that a client cannot use up
    /// the daemon's file descriptors, unless a WebSocket session no call has vouched for (with the secret, or signed in
    /// to the dashboard), or else a connection waiting for a wrong secret's held-back answer, is closed to make room
    /// for it: neither needs the secret, and they must not lock callers out.
    public var maxConnections: Int

    /// Access for the daemon's own origin and `allowedOrigins`.
    public init(
        allowedOrigins: Set<String> = [], allowedHosts: Set<String> = [], maxRequestSize: Int = 2 << 20,
        unauthorizedDelay: Duration = .seconds(1), requestTimeout: Duration = .seconds(60), maxConnections: Int = 256
    ) {
        self.allowedOrigins = allowedOrigins
        self.allowedHosts = allowedHosts
        self.maxRequestSize = maxRequestSize
        self.unauthorizedDelay = unauthorizedDelay
        self.requestTimeout = requestTimeout
        self.maxConnections = maxConnections
    }
}

extension RPCAccess {
    /// Answers `bytes` with `endpoint` off the event loop (a method may touch the file system: an add makes its
    /// directories), then hands the answer to `deliver` on `channel`'s loop, held back when calls carried a wrong
    /// secret: by ``unauthorizedDelay`` for each, after the wrong guesses answered before (``guesses``), the channel
    /// one of `connections` that may be closed meanwhile to make room.
    func answer(
        _ bytes: [UInt8], with endpoint: RPCEndpoint, session: RPCSession? = nil, signedIn: Bool,
        on channel: any Channel, of connections: ConnectionSlots,
        deliver: @escaping @Sendable ([UInt8]?) -> Void
    ) {
        let (delay, guesses) = (unauthorizedDelay, self.guesses)
        Task {
            let (answer, wrongSecrets) = await endpoint.answer(bytes, session: session, signedIn: signedIn)
            guard wrongSecrets > 0 else { return channel.eventLoop.execute { deliver(answer) } }
            connections.hold(channel, for: guesses.hold(wrongSecrets, each: delay)) { deliver(answer) }
        }
    }
}

/// aria2's JSON-RPC over HTTP POST and WebSocket at `/jsonrpc`, and the dashboard at `/`, on swift-nio, hostile input
/// assumed: a request (and a WebSocket upgrade) must name the daemon in its `Host` (a DNS-rebinding page names its
/// own), come from no origin or an allowed one (a page of another site is refused, its CORS preflight too), and stay
/// within the size limit; then the endpoint checks the secret of every call.
///
/// The dashboard signs in at `/session` (`POST {"secret": ...}`) for a session cookie and a CSRF token; a call that
/// carries both (the token in the `X-Haul-CSRF` header, or the `csrf` query parameter of a WebSocket upgrade) needs no
/// secret of its own.
///
/// Notifications (``notify(_:gid:)``) go to every WebSocket session, as aria2 sends them: they carry a GID only,
/// which is of no use without the secret. A session that does not read them is closed once 4 MiB wait for it.
public final class RPCServer: Sendable {
    /// Where the server listens.
    public let address: SocketAddress
    /// The port it listens on.
    public var port: Int { address.port ?? 0 }
    private let channel: any Channel
    private let sessions: WebSocketSessions
    private let connections: ConnectionSlots

    /// How much may wait to be sent to a WebSocket client before a notification closes it instead (it does not read):
    /// room for the largest answers, a page of a thousand statuses, and a burst of notifications behind them.
    static let webSocketBacklog = ChannelOptions.Types.WriteBufferWaterMark(low: 1 << 20, high: 4 << 20)

    /// The host names the daemon answers to (without the port): its loopback names, the address bound (every
    /// interface's address when bound to all of them) and `allowed`.
    static func hostNames(boundTo address: SocketAddress, allowed: Set<String>) -> Set<String> {
        var names: Set<String> = ["localhost", "127.0.0.1", "[::1]"]
        func add(_ address: SocketAddress) {
            guard var ip = address.ipAddress else { return }
            if address.protocol == .inet6 {
                // A link-local address's zone (`%eth0`) is not part of a Host header.
                if let zone = ip.firstIndex(of: "%") { ip = String(ip[..<zone]) }
                ip = "[\(ip)]"
            }
            names.insert(ip)
        }
        if ["0.0.0.0", "::"].contains(address.ipAddress ?? "") {
            for device in (try? System.enumerateDevices()) ?? [] {
                if let interface = device.address { add(interface) }
            }
        } else {
            add(address)
        }
        return names.union(allowed.map { $0.lowercased() })
    }

    /// Starts serving `endpoint` on `host`:`port` (0 picks a free port) on `group` (NIO's shared one by default),
    /// over TLS when `tls` is given.
    /// `monitoring`, when given, answers `/metrics`, `/healthz` and `/readyz` (after the same `Host` check).
    public static func start(
        endpoint: RPCEndpoint, host: String, port: Int, access: RPCAccess = RPCAccess(), tls: RPCTLS? = nil,
        monitoring: MonitoringEndpoint? = nil, group: (any EventLoopGroup)? = nil
    ) async throws -> RPCServer {
        let group = group ?? MultiThreadedEventLoopGroup.singleton
        let access = {
            var access = access
            if let monitoring { access.guesses = monitoring.guesses }
            return access
        }()
        // Which Host and Origin to accept depends on the bound port (0 picks one). A connection accepted before that
        // is known waits for it: a client that knew the port, as one reconnecting to a restarted daemon does, can
        // come that early.
        let checksKnown = group.next().makePromise(of: RequestChecks.self)
        let sessions = WebSocketSessions()
        let connections = ConnectionSlots(limit: access.maxConnections)
        let dashboard = DashboardSessions()
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: 256)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                checksKnown.futureResult.hop(to: channel.eventLoop).flatMapThrowing { checks in
                    guard connections.admit(channel) else {
                        channel.close(promise: nil)
                        return
                    }
                    if let tls {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls.context))
                    }
                    let upgrader = NIOWebSocketServerUpgrader(
                        maxFrameSize: access.maxRequestSize,
                        shouldUpgrade: { channel, head in
                            let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri
                            let refused =
                                path != "/jsonrpc"
                                || checks.refusal(
                                    host: head.headers.first(name: "host"), origin: head.headers.first(name: "origin"))
                                    != nil
                            // Refused: the request goes on as plain HTTP, where it is answered 403 or 405.
                            return channel.eventLoop.makeSucceededFuture(refused ? nil : HTTPHeaders())
                        },
                        upgradePipelineHandler: { channel, head in
                            // Looked at again for every message: a session that ends (signed out, unused too long)
                            // ends for its open WebSockets too.
                            let (cookie, csrf) = (head.headers.cookie, Self.queryValue("csrf", in: head.uri))
                            let signedIn = { @Sendable in dashboard.isSignedIn(cookieHeader: cookie, csrf: csrf) }
                            // The HTTP handler goes; the session's takes its place.
                            return channel.eventLoop.makeCompletedFuture {
                                let handler = try channel.pipeline.syncOperations.handler(
                                    type: RPCConnectionHandler.self)
                                return channel.pipeline.syncOperations.removeHandler(handler)
                            }.flatMap { $0 }.flatMapThrowing {
                                try channel.syncOptions?.setOption(
                                    ChannelOptions.writeBufferWaterMark, value: Self.webSocketBacklog)
                                try channel.pipeline.syncOperations.addHandler(
                                    WebSocketRPCHandler(
                                        endpoint: endpoint, access: access, sessions: sessions,
                                        connections: connections, signedIn: signedIn))
                            }
                        })
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withPipeliningAssistance: true,
                        withServerUpgrade: (upgraders: [upgrader], completionHandler: { _ in })
                    )
                    try channel.pipeline.syncOperations.addHandler(
                        RPCConnectionHandler(
                            endpoint: endpoint, checks: checks, access: access, connections: connections,
                            dashboard: dashboard, monitoring: monitoring, secure: tls != nil))
                }
            }
        let channel: any Channel
        do {
            channel = try await bootstrap.bind(host: host, port: port).get()
        } catch {
            checksKnown.fail(error)
            throw error
        }
        guard let address = channel.localAddress, let bound = address.port else {
            checksKnown.fail(ChannelError.unknownLocalAddress)
            try? await channel.close()
            throw ChannelError.unknownLocalAddress
        }
        dashboard.useCookieName(forPort: bound)
        let names = hostNames(boundTo: address, allowed: access.allowedHosts)
        let scheme = tls == nil ? "http" : "https"
        // Browsers leave the scheme's own port out of Host and Origin.
        let authorities = names.map { "\($0):\(bound)" } + (bound == (tls == nil ? 80 : 443) ? Array(names) : [])
        checksKnown.succeed(
            RequestChecks(
                hosts: Set(authorities),
                // Compared lowercased, as a request's Origin is (and as browsers send it).
                origins: Set(access.allowedOrigins.map { $0.lowercased() }).union(
                    authorities.map { "\(scheme)://\($0)" })))
        return RPCServer(address: address, channel: channel, sessions: sessions, connections: connections)
    }

    private init(
        address: SocketAddress, channel: any Channel, sessions: WebSocketSessions, connections: ConnectionSlots
    ) {
        self.address = address
        self.channel = channel
        self.sessions = sessions
        self.connections = connections
    }

    /// The value of the query parameter `name` in a request target, percent-decoded.
    static func queryValue(_ name: String, in uri: String) -> String? {
        guard let query = uri.split(separator: "?", maxSplits: 1).dropFirst().first else { return nil }
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.first == Substring(name) { return parts.count > 1 ? String(parts[1]).removingPercentEncoding : "" }
        }
        return nil
    }

    /// Sends the notification `method` (`aria2.onDownloadStart`...) about `gid` to every WebSocket session.
    public func notify(_ method: String, gid: String) {
        // Made only for someone: a batch of small files is thousands of notifications nobody may be listening to.
        guard !sessions.isEmpty else { return }
        let message: JSON = ["jsonrpc": "2.0", "method": .string(method), "params": [["gid": .string(gid)]]]
        sessions.send(message.encoded())
    }

    /// Stops accepting connections, closes the listening socket and every connection (WebSocket sessions, and HTTP
    /// connections a client keeps alive, which would otherwise go on being answered).
    public func stop() async {
        try? await channel.close()
        sessions.closeAll()
        connections.closeAll()
    }
}

/// The WebSocket sessions open now, to send notifications to.
final class WebSocketSessions: Sendable {
    private let channels = Locked<[ObjectIdentifier: (channel: any Channel, outbox: NotificationOutbox)]>([:])

    var isEmpty: Bool { channels.withLock { $0.isEmpty } }

    /// Adds the session on `channel`; the notifications sent to it go through `outbox`.
    func add(_ channel: any Channel, outbox: NotificationOutbox) {
        channels.withLock { $0[ObjectIdentifier(channel)] = (channel, outbox) }
    }

    func remove(_ channel: any Channel) { _ = channels.withLock { $0.removeValue(forKey: ObjectIdentifier(channel)) } }

    /// Sends `text` to every channel, after what was sent before from any thread: always through the channel's event
    /// loop, since a write made on the loop itself would go out at once, ahead of one queued there from another
    /// thread a moment before (a download's start, told on its loop, ahead of its resumption told by an RPC call).
    func send(_ text: [UInt8]) {
        let open = channels.withLock { Array($0.values) }
        for (channel, outbox) in open {
            channel.eventLoop.execute { outbox.deliver(text, on: channel) }
        }
    }

    func closeAll() {
        let open = channels.withLock { channels in
            defer { channels = [:] }
            return Array(channels.values)
        }
        for (channel, _) in open { channel.close(promise: nil) }
    }
}

/// The notifications of one WebSocket session on their way out: held while the session's own call is being answered,
/// sent after its answer. A script that sends `addUri` and reads the next message as its answer works, as with
/// aria2, whose notifications about a download come after the answer that added it. Used on the channel's event loop
/// only.
final class NotificationOutbox: @unchecked Sendable {
    // unchecked Sendable: its state is touched on the channel's event loop only (deliver, hold, release).
    private var holding = false
    private var held: [[UInt8]] = []
    private var heldBytes = 0

    /// Sends `text`, or keeps it for after the answer being made.
    func deliver(_ text: [UInt8], on channel: any Channel) {
        channel.eventLoop.preconditionInEventLoop()
        guard holding else { return write(text, on: channel) }
        held.append(text)
        heldBytes += text.count
        // A call that takes long while many downloads start holds no more than a client's backlog: past it, what
        // is held goes out at once, ahead of the answer (and what comes next is held again).
        if heldBytes > RPCServer.webSocketBacklog.high { flush(on: channel) }
    }

    /// Holds the notifications from now until ``release(on:)``.
    func hold(on channel: any Channel) {
        channel.eventLoop.preconditionInEventLoop()
        holding = true
    }

    /// Sends what was held, and what comes from now on at once.
    func release(on channel: any Channel) {
        channel.eventLoop.preconditionInEventLoop()
        holding = false
        flush(on: channel)
    }

    private func flush(on channel: any Channel) {
        let texts = held
        (held, heldBytes) = ([], 0)
        for text in texts { write(text, on: channel) }
    }

    private func write(_ text: [UInt8], on channel: any Channel) {
        // A client that does not read what it is sent is closed, not sent more: what waits for it is kept in memory
        // (up to the WebSocket's high-water mark, RPCServer.webSocketBacklog).
        guard channel.isWritable else { return channel.close(promise: nil) }
        channel.writeAndFlush(WebSocketFrame.text(text, on: channel), promise: nil)
    }
}

/// A WebSocket client's connection, as the methods it calls see it: what they push to it (`haul.subscribe`'s
/// changes) goes out as JSON-RPC notifications, until it closes.
public final class RPCSession: Sendable {
    private let channel: any Channel
    private let connections: ConnectionSlots

    private let push = Locked<RepeatedTask?>(nil)
    /// For a session whose calls a signed-in dashboard page made: whether that page is still signed in. Once it is
    /// not (signed out, or unused too long), the session ends instead of being pushed anything more.
    private let pushesWhile = Locked<(@Sendable () -> Bool)?>(nil)

    /// Notes that a call of the session passed the secret's check (or needed none but the daemon's, with no secret
    /// set): a session that never did may be closed to make room for another connection (``ConnectionSlots``).
    func vouch() { connections.mark(channel, .unvouched, false) }

    /// A session on `channel`, one of `connections`, which no call has vouched for yet.
    init(channel: any Channel, of connections: ConnectionSlots) {
        self.channel = channel
        self.connections = connections
        connections.mark(channel, .unvouched, true)
    }

    /// Calls `produce` every `interval`, off the event loop, the next call only after the last one's message went
    /// out, and sends what it returns (nothing for `nil`); replaces the session's earlier push, ends with the session.
    public func every(_ interval: Duration, _ produce: @escaping @Sendable () -> JSON?) {
        let delay = TimeAmount(interval)
        let (channel, pushesWhile) = (self.channel, self.pushesWhile)
        let task = channel.eventLoop.scheduleRepeatedAsyncTask(initialDelay: delay, delay: delay) { task in
            let sent = channel.eventLoop.makePromise(of: Void.self)
            // Asked for as the session closed, or its dashboard page signed out: it ends here.
            guard channel.isActive, pushesWhile.withLock({ $0 })?() ?? true else {
                task.cancel()
                channel.close(promise: nil)
                sent.succeed(())
                return sent.futureResult
            }
            Task {
                guard let message = produce() else { return sent.succeed(()) }
                // The next one waits for this one to be written: a slow reader is not sent more than it reads.
                channel.writeAndFlush(WebSocketFrame.text(message.encoded(), on: channel)).whenComplete { _ in
                    sent.succeed(())
                }
            }
            return sent.futureResult
        }
        let earlier = push.withLock { push in
            defer { push = task }
            return push
        }
        earlier?.cancel()
    }

    /// Makes what ``every(_:_:)`` pushes depend on `signedIn`, the sign-in of the dashboard page whose calls this
    /// session makes.
    func pushOnlyWhile(_ signedIn: @escaping @Sendable () -> Bool) {
        pushesWhile.withLock { $0 = signedIn }
    }

    /// Stops what ``every(_:_:)`` pushes.
    public func stopPushing() {
        push.withLock { push in
            defer { push = nil }
            return push
        }?.cancel()
    }
}

extension WebSocketFrame {
    /// A whole text message of `bytes` (a JSON-RPC answer or notification) for `channel`.
    static func text(_ bytes: [UInt8], on channel: any Channel) -> WebSocketFrame {
        WebSocketFrame(fin: true, opcode: .text, data: channel.allocator.buffer(bytes: bytes))
    }
}

/// One WebSocket session: each text message a JSON-RPC call or batch, answered in a text message (a wrong secret's
/// answer held back as over HTTP); pings answered; notifications sent to it. Messages are answered one after another,
/// in order, as requests on an HTTP connection are: guesses sent back to back wait for each other's hold-back, and
/// reading stops while messages wait, so that a client cannot pile them up.
private final class WebSocketRPCHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    let endpoint: RPCEndpoint
    let access: RPCAccess
    let sessions: WebSocketSessions
    let connections: ConnectionSlots
    /// Whether it was opened by a page signed in to the dashboard whose session is still on: its calls need no
    /// secret.
    let signedIn: @Sendable () -> Bool
    private var message: ByteBuffer?
    private var session: RPCSession?
    private let outbox = NotificationOutbox()
    /// Whether a message is being answered, and the complete messages waiting for their turn.
    private var answering = false
    private var waiting: [[UInt8]] = []
    /// Set once the session is being closed: frames read after that, in the same read, are not taken.
    private var closing = false

    init(
        endpoint: RPCEndpoint, access: RPCAccess, sessions: WebSocketSessions, connections: ConnectionSlots,
        signedIn: @escaping @Sendable () -> Bool
    ) {
        self.endpoint = endpoint
        self.access = access
        self.sessions = sessions
        self.connections = connections
        self.signedIn = signedIn
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let session = RPCSession(channel: context.channel, of: connections)
        if signedIn() { session.vouch() }
        self.session = session
        sessions.add(context.channel, outbox: outbox)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        session?.stopPushing()
        sessions.remove(context.channel)
    }

    func channelInactive(context: ChannelHandlerContext) {
        session?.stopPushing()
        sessions.remove(context.channel)
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .text, .binary, .continuation:
            var data = frame.unmaskedData
            // A continuation belongs to a message under way; a new message may start only after the last one ended
            // (RFC 6455 5.4: data frames of two messages are never interleaved).
            guard (frame.opcode == .continuation) == (message != nil) else {
                return close(context, code: .protocolError)
            }
            if message == nil { message = context.channel.allocator.buffer(capacity: data.readableBytes) }
            guard (message?.readableBytes ?? 0) + data.readableBytes <= access.maxRequestSize else {
                return close(context, code: .messageTooLarge)
            }
            message?.writeBuffer(&data)
            if frame.fin, let complete = message {
                message = nil
                let bytes = Array(complete.readableBytesView)
                guard !answering, context.channel.isWritable else {
                    waiting.append(bytes)
                    try? context.channel.syncOptions?.setOption(ChannelOptions.autoRead, value: false)
                    return
                }
                answer(bytes, on: context.channel)
            }
        case .ping:
            let pong = WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)
            context.writeAndFlush(wrapOutboundOut(pong), promise: nil)
        case .connectionClose:
            close(context, code: .normalClosure)
        default:
            break
        }
    }

    private func answer(_ bytes: [UInt8], on channel: any Channel) {
        answering = true
        let signedIn = self.signedIn()
        // Its calls carry the page's sign-in, not the secret: what they subscribe to lasts as long as the sign-in.
        if signedIn { session?.pushOnlyWhile(self.signedIn) }
        let handler = NIOLoopBound(self, eventLoop: channel.eventLoop)
        outbox.hold(on: channel)
        access.answer(bytes, with: endpoint, session: session, signedIn: signedIn, on: channel, of: connections) {
            answer in
            if let answer { channel.writeAndFlush(WebSocketFrame.text(answer, on: channel), promise: nil) }
            handler.value.outbox.release(on: channel)
            handler.value.answering = false
            handler.value.proceed(on: channel)
        }
    }

    /// Takes the next waiting message, or reads again once none waits; neither while an answer is being made, nor
    /// before the client has read what it was sent (the channel is writable): one that reads nothing is answered
    /// nothing more.
    private func proceed(on channel: any Channel) {
        guard !answering else { return }
        guard channel.isWritable else {
            try? channel.syncOptions?.setOption(ChannelOptions.autoRead, value: false)
            return
        }
        guard !waiting.isEmpty else {
            try? channel.syncOptions?.setOption(ChannelOptions.autoRead, value: true)
            return
        }
        answer(waiting.removeFirst(), on: channel)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        proceed(on: context.channel)
        context.fireChannelWritabilityChanged()
    }

    private func close(_ context: ChannelHandlerContext, code: WebSocketErrorCode) {
        closing = true
        message = nil
        waiting = []
        var data = context.channel.allocator.buffer(capacity: 2)
        data.write(webSocketErrorCode: code)
        let frame = WebSocketFrame(fin: true, opcode: .connectionClose, data: data)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(frame)).whenComplete { _ in channel.close(promise: nil) }
    }
}

/// The `Host` values and `Origin`s a request may carry.
struct RequestChecks: Sendable {
    var hosts: Set<String>
    var origins: Set<String>

    /// Why a request with `host` and `origin` is refused, or `nil`.
    func refusal(host: String?, origin: String?) -> String? {
        guard let host, hosts.contains(host.lowercased()) else { return "the Host header does not name this daemon" }
        if let origin, !origins.contains(origin.lowercased()) { return "requests from \(origin) are not allowed" }
        return nil
    }
}

/// One connection: collects a request, checks it, answers it off the event loop.
private final class RPCConnectionHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let endpoint: RPCEndpoint
    let checks: RequestChecks
    let access: RPCAccess
    let connections: ConnectionSlots
    let dashboard: DashboardSessions
    let monitoring: MonitoringEndpoint?
    /// Served over TLS: the session cookie is marked `Secure`.
    let secure: Bool
    private var head: HTTPRequestHead?
    private var body: ByteBuffer?
    private var tooLarge = false
    /// A whole request, not answered yet.
    private var complete: (head: HTTPRequestHead, body: ByteBuffer?)?
    /// Closes the connection when the client takes longer than ``RPCAccess/requestTimeout`` to send a request.
    private var deadline: RequestDeadline

    init(
        endpoint: RPCEndpoint, checks: RequestChecks, access: RPCAccess, connections: ConnectionSlots,
        dashboard: DashboardSessions, monitoring: MonitoringEndpoint?, secure: Bool
    ) {
        self.endpoint = endpoint
        self.checks = checks
        self.access = access
        self.connections = connections
        self.dashboard = dashboard
        self.monitoring = monitoring
        self.secure = secure
        deadline = RequestDeadline(access.requestTimeout)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        deadline.arm(context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline.disarm()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            deadline.arm(context)
            self.head = head
            body = context.channel.allocator.buffer(capacity: 0)
            tooLarge = false
            if let length = head.headers.first(name: "content-length").flatMap(Int.init), length > access.maxRequestSize
            {
                // Answered (and the connection closed) at once: a body known to be too large is not read to its end.
                tooLarge = true
                self.head = nil
                body = nil
                refuseTooLarge(head: head, origin: nil, context: context)
            }
        case .body(var part):
            guard !tooLarge else { return }
            if (body?.readableBytes ?? 0) + part.readableBytes > access.maxRequestSize {
                tooLarge = true
                body = nil
            } else {
                body?.writeBuffer(&part)
            }
        case .end:
            guard let head else { return }
            self.head = nil
            complete = (head, body)
            body = nil
            // Answered once this read has returned: NIO hands over a pipelined request as the answer before it
            // ends, so answering at once would answer thousands of them one inside another, on one stack.
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.execute {
                let (handler, context) = bound.value
                handler.respondOnceWritable(context: context)
            }
        }
    }

    /// Answers the complete request, once the client has read what it was sent before (the channel is writable):
    /// one that reads nothing is answered nothing more, and the request timeout closes its connection.
    private func respondOnceWritable(context: ChannelHandlerContext) {
        guard context.channel.isWritable, let (head, body) = complete else { return }
        complete = nil
        deadline.disarm()
        respond(to: head, body: body, context: context)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        respondOnceWritable(context: context)
        context.fireChannelWritabilityChanged()
    }

    /// Answers 413: the request's body is (or says it is) larger than ``RPCAccess/maxRequestSize``.
    private func refuseTooLarge(head: HTTPRequestHead, origin: String?, context: ChannelHandlerContext) {
        write(
            status: .payloadTooLarge, text: "the request is larger than \(access.maxRequestSize) bytes\n", head: head,
            origin: origin, context: context)
    }

    private func respond(to head: HTTPRequestHead, body: ByteBuffer?, context: ChannelHandlerContext) {
        let origin = head.headers.first(name: "origin")
        if let refusal = checks.refusal(host: head.headers.first(name: "host"), origin: origin) {
            return write(status: .forbidden, text: refusal + "\n", head: head, origin: nil, context: context)
        }
        let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri
        if path == "/session" { return session(head: head, body: body, origin: origin, context: context) }
        if let monitoring, MonitoringEndpoint.serves(path) {
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            let (method, authorization) = (head.method.rawValue, head.headers.first(name: "authorization"))
            let (channel, connections) = (context.channel, connections)
            Task {
                guard
                    let (answer, hold) = await monitoring.answer(
                        method: method, path: path, authorization: authorization)
                else { return }
                let deliver: @Sendable () -> Void = {
                    let (handler, context) = bound.value
                    handler.write(
                        status: HTTPResponseStatus(statusCode: answer.status),
                        bytes: answer.body,
                        type: nil, extra: HTTPHeaders(answer.headers), head: head, origin: nil, context: context)
                }
                // A wrong token's answer is held as a wrong secret's is: its connection may be closed for a new one.
                guard let hold else { return channel.eventLoop.execute(deliver) }
                connections.hold(channel, for: hold, then: deliver)
            }
            return
        }
        guard path == "/jsonrpc" else {
            guard head.method == .GET, let file = DashboardFiles.byPath[path] else {
                return write(status: .notFound, text: "not found\n", head: head, origin: origin, context: context)
            }
            return write(
                status: .ok, bytes: file.bytes, type: file.contentType,
                extra: HTTPHeaders(DashboardFiles.securityHeaders), head: head, origin: nil, context: context)
        }
        switch head.method {
        case .OPTIONS:
            var headers = HTTPHeaders()
            headers.add(name: "Access-Control-Allow-Methods", value: "POST, OPTIONS")
            if let asked = head.headers.first(name: "access-control-request-headers") {
                headers.add(name: "Access-Control-Allow-Headers", value: asked)
            }
            headers.add(name: "Access-Control-Max-Age", value: "1728000")
            return write(
                status: .ok, bytes: [], type: nil, extra: headers, head: head, origin: origin, context: context)
        case .POST:
            break
        default:
            return write(
                status: .methodNotAllowed, text: "POST a JSON-RPC call to /jsonrpc\n", head: head, origin: origin,
                context: context)
        }
        guard !tooLarge, let body else { return refuseTooLarge(head: head, origin: origin, context: context) }
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let signedIn = dashboard.isSignedIn(
            cookieHeader: head.headers.cookie, csrf: head.headers.first(name: DashboardSessions.csrfHeader))
        access.answer(
            Array(body.readableBytesView), with: endpoint, signedIn: signedIn, on: context.channel, of: connections
        ) {
            answer in
            let (handler, context) = bound.value
            handler.write(
                status: .ok, bytes: answer ?? [], type: answer == nil ? nil : "application/json-rpc",
                extra: HTTPHeaders(), head: head, origin: origin, context: context)
        }
    }

    /// A wrong secret's answer: `200 OK` saying so, as a JSON-RPC call with a wrong token is answered (a `401`
    /// would be logged in the browser's console as a failed load).
    private static let wrongSecret = (["signedIn": false, "secretNeeded": true, "error": "wrong secret"] as JSON)
        .encoded()

    /// `/session`: `GET` with the CSRF token tells the page whether it is still signed in, `POST {"secret": ...}` signs
    /// in and gives the token (a wrong secret answered late, as a wrong RPC token, with `"error": "wrong secret"`),
    /// `DELETE` with the token signs out. Only the sign-in gives the token: the page keeps it in its origin's storage.
    private func session(head: HTTPRequestHead, body: ByteBuffer?, origin: String?, context: ChannelHandlerContext) {
        var headers = HTTPHeaders([("Cache-Control", "no-store")])
        func answer(_ status: HTTPResponseStatus, _ json: JSON) {
            write(
                status: status, bytes: json.encoded(), type: "application/json", extra: headers, head: head,
                origin: origin, context: context)
        }
        let cookieHeader = head.headers.cookie
        switch head.method {
        case .GET:
            if endpoint.secret == nil { return answer(.ok, ["signedIn": true, "secretNeeded": false]) }
            // Signed in only with the cookie and the token the page kept from its sign-in, and the token never handed
            // out again: a cookie goes to every port of its host, to another program's pages there too.
            let signedIn = dashboard.isSignedIn(
                cookieHeader: cookieHeader, csrf: head.headers.first(name: DashboardSessions.csrfHeader))
            answer(.ok, ["signedIn": .bool(signedIn), "secretNeeded": true])
        case .POST:
            guard !tooLarge, let body, let given = (try? JSON.parse(body.readableBytesView))?.object?["secret"]?.string
            else {
                return answer(.badRequest, ["error": "send {\"secret\": \"...\"} as JSON"])
            }
            guard let secret = endpoint.secret else {
                return answer(.ok, ["signedIn": true, "secretNeeded": false])
            }
            guard secret.matches(given) else {
                let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
                let headers = headers
                connections.hold(context.channel, for: access.guesses.hold(1, each: access.unauthorizedDelay)) {
                    let (handler, context) = bound.value
                    handler.write(
                        status: .ok, bytes: Self.wrongSecret,
                        type: "application/json", extra: headers, head: head, origin: origin, context: context)
                }
                return
            }
            let (cookie, csrf) = dashboard.start()
            headers.add(name: "Set-Cookie", value: dashboard.setCookie(cookie, secure: secure))
            answer(.ok, ["signedIn": true, "secretNeeded": true, "csrf": .string(csrf)])
        case .DELETE:
            guard
                dashboard.isSignedIn(
                    cookieHeader: cookieHeader, csrf: head.headers.first(name: DashboardSessions.csrfHeader))
            else {
                return answer(.forbidden, ["error": "not signed in"])
            }
            dashboard.end(cookieHeader: cookieHeader)
            headers.add(name: "Set-Cookie", value: dashboard.setCookie(nil, secure: secure))
            answer(.ok, ["signedIn": false, "secretNeeded": true])
        default:
            write(
                status: .methodNotAllowed, text: "GET, POST or DELETE /session\n", head: head, origin: origin,
                context: context)
        }
    }

    private func write(
        status: HTTPResponseStatus, text: String, head: HTTPRequestHead, origin: String?,
        context: ChannelHandlerContext
    ) {
        write(
            status: status, bytes: Array(text.utf8), type: "text/plain; charset=utf-8", extra: HTTPHeaders(),
            head: head, origin: origin, context: context)
    }

    private func write(
        status: HTTPResponseStatus, bytes: [UInt8], type: String?, extra: HTTPHeaders, head: HTTPRequestHead,
        origin: String?, context: ChannelHandlerContext
    ) {
        var headers = extra
        if let type { headers.add(name: "Content-Type", value: type) }
        if let origin {
            headers.add(name: "Access-Control-Allow-Origin", value: origin)
            headers.add(name: "Vary", value: "Origin")
        }
        // A request that asked for another protocol, refused here: NIO's decoder parses nothing after it, so a next
        // request on its connection would never be answered.
        let upgrade =
            head.method == .CONNECT
            || (head.headers.contains(name: "upgrade")
                && head.headers[canonicalForm: "connection"].contains { $0.lowercased() == "upgrade" })
        context.writeResponse(
            to: head, status: status, headers: headers, body: bytes,
            keepAlive: head.isKeepAlive && status != .payloadTooLarge && !upgrade)
        // Now the next request is awaited.
        deadline.arm(context)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A refused WebSocket upgrade is said so on its way here; the request follows, and is answered 403 or 405.
        if error is NIOWebSocketUpgradeError { return }
        context.close(promise: nil)
    }
}

extension HTTPHeaders {
    /// The request's cookies, every `Cookie` header joined.
    var cookie: String? {
        let values = self["cookie"]
        return values.isEmpty ? nil : values.joined(separator: "; ")
    }
}
