import Foundation
import HaulOperations
public import NIOCore
import NIOHTTP1
import NIOPosix

/// ``MonitoringEndpoint``'s three paths on a listener of their own (`haul worker --metrics-listen`), on swift-nio's
/// HTTP/1.1. Anything else is 404; bodies are not read (a request with one larger than 64 KiB is refused and its
/// connection closed).
///
/// A request must arrive within `requestTimeout`, and a connection may idle as long between requests; at most
/// `maxConnections` are open at once: one more is closed as soon as it is accepted, unless a connection waits for a
/// wrong token's held-back 401, which is closed instead to make room for it.
///
/// A request must name the server in its `Host` by an IP address or `localhost` unless the endpoint asks for a bearer
/// token: without one, a page of another site that reached the listener through DNS rebinding (its own name resolved
/// to this address) would read the metrics, which name the hosts being downloaded from. Prometheus scrapes by the
/// address it was given, which passes.
public final class MonitoringServer: Sendable {
    /// Where the server listens.
    public let address: SocketAddress
    /// The port it listens on.
    public var port: Int { address.port ?? 0 }
    private let channel: any Channel

    /// Starts serving `endpoint` on `host`:`port` (0 picks a free port).
    public static func start(
        endpoint: MonitoringEndpoint, host: String, port: Int, requiresAddressHost: Bool,
        requestTimeout: Duration = .seconds(60), maxConnections: Int = 64, group: (any EventLoopGroup)? = nil
    ) async throws -> MonitoringServer {
        let connections = ConnectionSlots(limit: maxConnections)
        let channel = try await ServerBootstrap(group: group ?? MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(ChannelOptions.backlog, value: 64)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                guard connections.admit(channel) else { return channel.close() }
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withPipeliningAssistance: true)
                    try channel.pipeline.syncOperations.addHandler(
                        MonitoringHandler(
                            endpoint: endpoint, requiresAddressHost: requiresAddressHost,
                            deadline: RequestDeadline(requestTimeout), connections: connections))
                }
            }
            .bind(host: host, port: port).get()
        guard let address = channel.localAddress else {
            try? await channel.close()
            throw ChannelError.unknownLocalAddress
        }
        return MonitoringServer(address: address, channel: channel)
    }

    private init(address: SocketAddress, channel: any Channel) {
        self.address = address
        self.channel = channel
    }

    /// Stops listening.
    public func stop() async {
        try? await channel.close()
    }
}

private final class MonitoringHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let endpoint: MonitoringEndpoint
    let requiresAddressHost: Bool
    private var head: HTTPRequestHead?
    private var bodyBytes = 0
    private var deadline: RequestDeadline

    private let connections: ConnectionSlots

    init(
        endpoint: MonitoringEndpoint, requiresAddressHost: Bool, deadline: RequestDeadline, connections: ConnectionSlots
    ) {
        self.endpoint = endpoint
        self.requiresAddressHost = requiresAddressHost
        self.deadline = deadline
        self.connections = connections
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
            bodyBytes = 0
        case .body(let part):
            bodyBytes += part.readableBytes
            if bodyBytes > 64 << 10, let head {
                self.head = nil
                write(MonitoringEndpoint.text(413, "no body is read here\n"), head: head, close: true, context: context)
            }
        case .end:
            guard let head else { return }
            self.head = nil
            deadline.disarm()
            respond(to: head, context: context)
        }
    }

    private func respond(to head: HTTPRequestHead, context: ChannelHandlerContext) {
        if requiresAddressHost, !HostHeader.namesAnAddress(head.headers.first(name: "host") ?? "") {
            return write(
                MonitoringEndpoint.text(403, "the Host header must name this server by its address\n"), head: head,
                close: false, context: context)
        }
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let (channel, endpoint, connections) = (context.channel, endpoint, connections)
        let (method, uri, authorization) = (head.method.rawValue, head.uri, head.headers.first(name: "authorization"))
        Task {
            let (answer, hold) =
                await endpoint.answer(method: method, path: uri, authorization: authorization)
                ?? (MonitoringEndpoint.text(404, "not found: /metrics, /healthz and /readyz are served here\n"), nil)
            let deliver: @Sendable () -> Void = {
                let (handler, context) = bound.value
                handler.write(answer, head: head, close: false, context: context)
            }
            guard let hold else { return channel.eventLoop.execute(deliver) }
            connections.hold(channel, for: hold, then: deliver)
        }
    }

    private func write(
        _ answer: MonitoringEndpoint.Response, head: HTTPRequestHead, close: Bool, context: ChannelHandlerContext
    ) {
        context.writeResponse(
            to: head, status: HTTPResponseStatus(statusCode: answer.status), headers: HTTPHeaders(answer.headers),
            body: answer.body, keepAlive: head.isKeepAlive && !close)
        deadline.arm(context)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
