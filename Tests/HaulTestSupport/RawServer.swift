import HaulOperations
package import NIOCore
import NIOPosix
import Testing

/// A loopback server that answers the n-th request it reads (on any connection) with `responses[n]` as raw bytes,
/// then closes the connection when that response has no length (so the close ends it) or says `Connection: close`
/// (so a response can be cut short of its length).
package enum RawServer {
    package static func withRunning(responses: [[UInt8]], _ body: (Int) async throws -> Void) async throws {
        try await withRunning(respond: { index, _ in responses[index % responses.count] }, body)
    }

    /// Answers the n-th request with `respond(n, its head as text)`.
    package static func withRunning(
        respond: @escaping @Sendable (Int, String) -> [UInt8], _ body: (Int) async throws -> Void
    ) async throws {
        let counter = Locked(0)
        try await withRunning(handler: { Answer(respond: respond, counter: counter) }, body)
    }

    /// A loopback server on a free port whose every connection is served by a new `handler()`, for a server of
    /// raw bytes of a test's own.
    package static func withRunning(
        handler: @escaping @Sendable () -> any ChannelInboundHandler & Sendable, _ body: (Int) async throws -> Void
    ) async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let channel = try await ServerBootstrap(group: group)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(handler())
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        do {
            try await body(try #require(channel.localAddress?.port))
        } catch {
            try? await channel.close()
            try? await group.shutdownGracefully()
            throw error
        }
        try await channel.close()
        try await group.shutdownGracefully()
    }

    final class Answer: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        let respond: @Sendable (Int, String) -> [UInt8]
        let counter: Locked<Int>
        var seen: [UInt8] = []

        init(respond: @escaping @Sendable (Int, String) -> [UInt8], counter: Locked<Int>) {
            self.respond = respond
            self.counter = counter
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            seen += Array(unwrapInboundIn(data).readableBytesView)
            while let end = seen.firstRange(of: Array("\r\n\r\n".utf8)) {
                let request = String(decoding: seen[..<end.lowerBound], as: UTF8.self)
                seen.removeSubrange(..<end.upperBound)
                let index = counter.withLock { count in
                    defer { count += 1 }
                    return count
                }
                let response = respond(index, request)
                let head = String(decoding: response.prefix(300), as: UTF8.self)
                let closes = !head.contains("Length") && !head.contains("chunked") || head.contains("Connection: close")
                context.writeAndFlush(wrapOutboundOut(ByteBuffer(bytes: response)), promise: nil)
                if closes { context.close(promise: nil) }
            }
        }
    }
}
