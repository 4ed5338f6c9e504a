import Foundation
import HTTPTypes
import HTTPTypesFoundation
import Haul
import HaulNIO
import HaulOperations
import HaulTestServer
import HaulTestSupport
import NIOCore
import Testing

/// A hostile reviewer's attacks on NIOTransport's HTTP/1.1 client: servers and proxies that talk raw bytes.
@Suite("NIOTransport against hostile servers and proxies", .timeLimit(.minutes(1)))
struct ClientReviewTests {
    @Test(
        "1-byte chunks padded with 4 KiB chunk extensions do not make the transport read gigabytes ahead of its reader")
    func chunkExtensionsDefeatBackPressure() async throws {
        // Each chunk: 1 byte of body behind a 4 KiB chunk-size line (the longest the parser takes). Back-pressure that
        // counts only body bytes lets ~4 GiB of such a body into memory before the 1 MiB high-water mark is reached.
        let chunk = Array("1;x=".utf8) + [UInt8](repeating: UInt8(ascii: "a"), count: 4000) + Array("\r\nA\r\n".utf8)
        var block: [UInt8] = []
        for _ in 0..<64 { block += chunk }
        let head = Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
        // The server stops at 256 MiB: enough to tell a bounded reader from an unbounded one, without taking the
        // machine's memory (an unbounded reader holds all of it).
        try await PumpServer.withRunning(head: head, block: block, limit: 256 << 20) { port, sent in
            let transport = NIOTransport()
            let url = try #require(URL(string: "http://127.0.0.1:\(port)/chunks"))
            // A 64 KiB receive window: 32 KiB of body may wait in the transport, 16 KiB in the socket (the kernel
            // doubles it); the server's send buffer is what it is.
            let response = try await transport.send(
                HTTPRequest(method: .get, url: url),
                options: .init(connectTimeout: .seconds(5), receiveWindow: 64 << 10))
            #expect(response.head.status.code == 200)
            // Nobody reads the body: what the server could send is what the client took off the socket, plus what
            // the two kernels buffer.
            try await eventually("the server sent its first megabyte") { sent.withLock { $0 } >= 1 << 20 }
            try await Task.sleep(for: .seconds(3))
            // One turn of the event loop's reads (4 of up to 256 KiB), the server's send buffer, and 1 MiB to spare.
            let bound = (2 << 20) + serverSendBuffer
            let total = sent.withLock { $0 }
            #expect(
                total < bound, "the client read \(total >> 20) MiB for a body nobody read (bound \(bound >> 20) MiB)")
            await response.body.close()
        }
    }

    @Test("a CONNECT proxy whose answer's head never ends is refused after a bound, not read into memory")
    func endlessConnectHead() async throws {
        // "HTTP/1.1 200 OK", then header lines forever: the empty line that ends the head never comes.
        let head = Array("HTTP/1.1 200 Connection established\r\n".utf8)
        let block = Array(("X-Pad: " + String(repeating: "p", count: 1017) + "\r\n").utf8)
        var blocks: [UInt8] = []
        for _ in 0..<64 { blocks += block }
        try await PumpServer.withRunning(head: head, block: blocks, limit: 256 << 20) { port, sent in
            let transport = NIOTransport()
            let proxy = Proxy(kind: .http, host: "127.0.0.1", port: port)
            // https through an HTTP proxy: a CONNECT tunnel. The connect timeout is long: the bound must stop this,
            // not the timer.
            let request = HTTPRequest(method: .get, scheme: "https", authority: "example.invalid", path: "/f")
            let started = ContinuousClock.now
            let error = await #expect(throws: (any Error).self) {
                _ = try await transport.send(request, options: .init(connectTimeout: .seconds(20), proxy: proxy))
            }
            let elapsed = ContinuousClock.now - started
            let total = sent.withLock { $0 }
            #expect(
                elapsed < .seconds(5),
                "failed after \(elapsed), the proxy having sent \(total >> 10) KiB: \(String(describing: error))")
            #expect(total < (8 << 20) + kernelSocketBuffers, "the proxy sent \(total >> 20) MiB of one head")
        }
    }

    @Test("a request the server drops on every kept-alive connection is sent again once, not once per idle connection")
    func retriedOnceNotPerIdleConnection() async throws {
        try await TestServer.withRunning { server in
            let transport = NIOTransport()
            let options = TransportOptions(connectTimeout: .seconds(5))
            // Four connections in the pool: four responses held open at once (their bodies stall behind a gate),
            // then read to their end.
            var responses: [TransportResponse] = []
            for index in 0..<4 {
                let url = server.url(
                    path: "/bytes/held\(index)", query: ["size": "10", "stallAfter": "1", "stall": "gate:g"])
                responses.append(try await transport.send(HTTPRequest(method: .get, url: url), options: options))
            }
            server.openGate("g")
            for response in responses {
                for try await _ in response.body {}
            }
            #expect(server.stats.connectionsAccepted == 4)
            // The server reads this request and closes the connection without an answer, every time.
            let url = server.url(path: "/bytes/boom", query: ["size": "10", "dropConnection": "1"])
            await #expect(throws: (any Error).self) {
                _ = try await transport.send(HTTPRequest(method: .get, url: url), options: options)
            }
            let count = server.stats.requests(toPath: "/bytes/boom")
            #expect(count <= 2, "the server received the request \(count) times")
        }
    }
}

/// A loopback server that, after reading a request head, writes `head`, then `block` over and over as fast as the
/// client takes it, up to `limit` bytes; `sent` counts the bytes the kernel accepted.
private enum PumpServer {
    static func withRunning(
        head: [UInt8], block: [UInt8], limit: Int, _ body: (Int, Locked<Int>) async throws -> Void
    ) async throws {
        let sent = Locked(0)
        try await RawServer.withRunning(handler: { Pump(head: head, block: block, limit: limit, sent: sent) }) {
            try await body($0, sent)
        }
    }

    final class Pump: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        let head: [UInt8]
        let block: ByteBuffer
        let limit: Int
        let sent: Locked<Int>
        var seen: [UInt8] = []
        var started = false
        var queued = 0

        init(head: [UInt8], block: [UInt8], limit: Int, sent: Locked<Int>) {
            self.head = head
            self.block = ByteBuffer(bytes: block)
            self.limit = limit
            self.sent = sent
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard !started else { return }
            seen += Array(unwrapInboundIn(data).readableBytesView)
            guard seen.firstRange(of: Array("\r\n\r\n".utf8)) != nil else { return }
            started = true
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(bytes: head)), promise: nil)
            pump(context)
        }

        func channelWritabilityChanged(context: ChannelHandlerContext) {
            if started { pump(context) }
        }

        private func pump(_ context: ChannelHandlerContext) {
            let sent = self.sent
            let size = block.readableBytes
            while context.channel.isActive, context.channel.isWritable, queued + size <= limit {
                queued += size
                let promise = context.eventLoop.makePromise(of: Void.self)
                promise.futureResult.whenSuccess { sent.withLock { $0 += size } }
                context.write(wrapOutboundOut(block), promise: promise)
            }
            context.flush()
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }
}
