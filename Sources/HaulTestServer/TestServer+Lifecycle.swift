import Foundation
import HaulOperations
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

extension TestServer {
    /// Binds the configured host and port (and `::1` on the same port when the host is `127.0.0.1`).
    ///
    /// - Throws: ``TestServerError`` when the server was already started or binding fails.
    public func start() async throws {
        let group: MultiThreadedEventLoopGroup? = configuration.eventLoopThreads.map {
            MultiThreadedEventLoopGroup(numberOfThreads: max(1, $0))
        }
        let loops: any EventLoopGroup = group ?? MultiThreadedEventLoopGroup.singleton
        var resolver: FileResolver?
        if let root = configuration.root {
            resolver = FileResolver(rootPath: root.path)
            if resolver == nil {
                try await group?.shutdownGracefully()
                throw TestServerError.rootNotFound(root.path)
            }
        }
        let context = ServerContext(
            state: state,
            resolver: resolver,
            filesMount: configuration.filesPath,
            chunkSize: configuration.chunkSize,
            scheme: configuration.tls == nil ? "http" : "https",
            recordsBodyTimeline: configuration.recordsBodyTimeline,
            requiresAddressHost: configuration.requiresAddressHost,
            idleTimeout: configuration.idleTimeout
        )
        let tlsContext: NIOSSLContext?
        do {
            tlsContext = try configuration.tls.map(Self.makeTLSContext)
        } catch {
            try await group?.shutdownGracefully()
            throw TestServerError.tlsSetupFailed(underlying: error)
        }
        var bootstrap = makeBootstrap(group: loops, context: context, tls: tlsContext)
        if let size = configuration.sendBufferSize {
            bootstrap = bootstrap.childChannelOption(
                ChannelOptions.socketOption(.so_sndbuf), value: SocketOptionValue(size))
        }
        var channels: [any Channel] = []
        do {
            var (primary, port) = try await bindPrimary(bootstrap)
            channels.append(primary)
            if configuration.host == "127.0.0.1", configuration.bindIPv6Loopback {
                // `localhost` may resolve to ::1 first, so ::1 must be this server on the same port. A free port
                // picked for 127.0.0.1 may be taken on ::1 by another server (tests run side by side): `localhost`
                // would reach that one, so another port is picked. Without IPv6 it is skipped.
                for attempt in 1...Self.portAttempts {
                    do {
                        channels.append(try await bootstrap.bind(host: "::1", port: port).get())
                        break
                    } catch let error as IOError
                        where error.errnoCode == EADDRINUSE && configuration.port == 0 && attempt < Self.portAttempts
                    {
                        try? await primary.close()
                        channels.removeAll()
                        (primary, port) = try await bindPrimary(bootstrap)
                        channels.append(primary)
                    } catch {
                        break
                    }
                }
            }
            try markRunning(port: port, channels: channels, group: group)
        } catch {
            for channel in channels { try? await channel.close() }
            try? await group?.shutdownGracefully()
            if let error = error as? TestServerError { throw error }
            throw TestServerError.bindFailed(host: configuration.host, port: configuration.port, underlying: error)
        }
    }

    /// How many free ports are tried for one that is free on `::1` too.
    private static let portAttempts = 20

    /// Binds the configured host and port: the listener and the port it got.
    private func bindPrimary(_ bootstrap: ServerBootstrap) async throws -> (any Channel, Int) {
        let channel = try await bootstrap.bind(host: configuration.host, port: configuration.port).get()
        return (channel, channel.localAddress?.port ?? configuration.port)
    }

    /// Closes the listeners and every connection, releases held requests, and stops owned event loops.
    /// Calling it twice is harmless.
    public func shutdown() async throws {
        let (channels, group) = takeForShutdown()
        for channel in channels { try? await channel.close() }
        for connection in openConnections() { try? await connection.close() }
        releaseHeldRequests()
        try await group?.shutdownGracefully()
    }

    private static func makeTLSContext(_ tls: TLS) throws -> NIOSSLContext {
        let issued = try tls.authority.serverCertificate(tls.certificate)
        let chain = try NIOSSLCertificate.fromPEMBytes(Array(issued.certificatePEM.utf8))
        let key = try NIOSSLPrivateKey(bytes: Array(issued.keyPEM.utf8), format: .pem)
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        configuration.applicationProtocols = ["http/1.1"]
        if tls.requiresClientCertificate {
            configuration.certificateVerification = .noHostnameVerification
            configuration.trustRoots = .certificates(
                try NIOSSLCertificate.fromPEMBytes(Array(tls.authority.certificatePEM.utf8)))
        }
        return try NIOSSLContext(configuration: configuration)
    }

    private func makeBootstrap(
        group: any EventLoopGroup, context: ServerContext, tls: NIOSSLContext?
    ) -> ServerBootstrap {
        let registry = ConnectionRegistry(server: self)
        return ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: 256)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .childChannelOption(
                ChannelOptions.writeBufferWaterMark,
                value: ChannelOptions.Types.WriteBufferWaterMark(low: 256 << 10, high: 1 << 20)
            )
            .childChannelInitializer { channel in
                registry.add(channel)
                return channel.eventLoop.makeCompletedFuture {
                    if let tls { try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls)) }
                    // No outbound header validation: a fault server must be able to send what a lying one sends
                    // (a control character in `Content-Disposition` or `Location`, say).
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withPipeliningAssistance: true,
                        withErrorHandling: true,
                        withOutboundHeaderValidation: false
                    )
                    try channel.pipeline.syncOperations.addHandler(
                        HTTPConnectionHandler(server: context, usesTLS: tls != nil))
                }
            }
    }
}

extension TestServer {
    func markRunning(port: Int, channels: [any Channel], group: MultiThreadedEventLoopGroup?) throws {
        try lifecycle.withLock { lifecycle in
            guard case .idle = lifecycle else { throw TestServerError.alreadyStarted }
            lifecycle = .running(port: port, channels: channels, group: group)
        }
    }

    func takeForShutdown() -> ([any Channel], MultiThreadedEventLoopGroup?) {
        lifecycle.withLock { lifecycle in
            guard case .running(_, let channels, let group) = lifecycle else { return ([], nil) }
            lifecycle = .stopped
            return (channels, group)
        }
    }

    func openConnections() -> [any Channel] { connections.withLock { Array($0.values) } }

    func releaseHeldRequests() { state.releaseAllGates() }

    func register(_ channel: any Channel) {
        connections.withLock { $0[ObjectIdentifier(channel)] = channel }
    }

    func unregister(_ channel: any Channel) {
        _ = connections.withLock { $0.removeValue(forKey: ObjectIdentifier(channel)) }
    }
}

/// Tracks accepted connections for one server (a Sendable box the initializer closure can hold).
struct ConnectionRegistry: Sendable {
    let server: TestServer

    func add(_ channel: any Channel) {
        server.state.connectionAccepted()
        server.register(channel)
        channel.closeFuture.whenComplete { [server] _ in server.unregister(channel) }
    }
}
