import HaulTestSupport
import NIOCore
import NIOPosix
import Testing

@testable import HaulNIO

/// The reader a proxy tunnel is opened with, against a raw proxy whose answer and close arrive together.
@Suite("Proxy tunnel reader", .timeLimit(.minutes(1)))
struct ProxyTunnelTests {
    @Test("an answer that arrived with the proxy's close, before the read was asked for, is read; then the close")
    func answerThenClose() async throws {
        // Without a length the raw server closes right after its answer, as proxies do after a 407.
        let answer = "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"p\"\r\n\r\n"
        try await RawServer.withRunning(responses: [Array(answer.utf8)]) { port in
            let reader = TunnelReader()
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(reader) }
                }
                .connect(host: "127.0.0.1", port: port).get()
            try await channel.writeAndFlush(
                ByteBuffer(string: "CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n"))
            try await channel.closeFuture.get()
            let head = try await reader.read(.head, on: channel.eventLoop)
            #expect(String(decoding: head, as: UTF8.self) == answer)
            await #expect(throws: TunnelReader.Closed.self) { try await reader.read(.head, on: channel.eventLoop) }
        }
    }
}
