import Foundation
import HaulTestServer
import NIOCore
import NIOPosix
import Testing

/// The server's idle timeout: a connection that brings no request is closed, one being answered never is.
@Suite("Test server: idle connections", .timeLimit(.minutes(1)))
struct IdleTimeoutTests {
    static let timeout = Duration.milliseconds(300)

    /// What one connection received until the server closed it, and how long after its last byte (or after it was
    /// opened, when nothing came) the close came; `nil` when it was still open after 20 s.
    struct Closed {
        var bytes: [UInt8]
        var quietBeforeClose: Duration

        /// The response's head, as text.
        var head: String {
            let end = bytes.indices.first { bytes[$0...].starts(with: [13, 10, 13, 10]) } ?? bytes.endIndex
            return String(decoding: bytes[..<end], as: UTF8.self)
        }
        /// The bytes after the head.
        var body: ArraySlice<UInt8> { bytes.dropFirst(head.utf8.count + 4) }
    }

    /// How much earlier than the timeout a client may see the close: the server counts from when it has written
    /// the last byte, the client from when it read it.
    static let delivery = Duration.milliseconds(50)

    /// Connects to `port`, sends `request` if given, and reads until the server closes the connection.
    static func readUntilClosed(port: Int, sending request: String?) async throws -> Closed? {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            if let request { try await outbound.write(ByteBuffer(string: request)) }
            return try await withThrowingTaskGroup(of: Closed?.self) { group in
                group.addTask {
                    var bytes: [UInt8] = []
                    var last = ContinuousClock.now
                    do {
                        for try await buffer in inbound {
                            bytes += buffer.readableBytesView
                            last = .now
                        }
                    } catch {
                        // A reset is a close too.
                    }
                    return Closed(bytes: bytes, quietBeforeClose: .now - last)
                }
                group.addTask {
                    try await Task.sleep(for: .seconds(20))
                    return nil
                }
                let first = try await group.next() ?? nil
                group.cancelAll()
                return first
            }
        }
    }

    static func get(_ target: String, port: Int, close: Bool = false) -> String {
        "GET \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n" + (close ? "Connection: close\r\n" : "") + "\r\n"
    }

    @Test("a connection that sends nothing is closed once the idle timeout has passed, not before")
    func silentConnectionClosed() async throws {
        try await TestServer.withRunning(.init(idleTimeout: Self.timeout)) { server in
            let closed = try #require(try await Self.readUntilClosed(port: server.port, sending: nil))
            #expect(closed.bytes.isEmpty)
            #expect(closed.quietBeforeClose >= Self.timeout - Self.delivery)
            #expect(server.stats.requestCount == 0)
        }
    }

    @Test("a kept-alive connection is closed once it has been idle that long after its response")
    func idleAfterResponseClosed() async throws {
        try await TestServer.withRunning(.init(idleTimeout: Self.timeout)) { server in
            let closed = try #require(
                try await Self.readUntilClosed(
                    port: server.port, sending: Self.get("/bytes/a?size=10", port: server.port)))
            #expect(closed.head.hasPrefix("HTTP/1.1 200"), "\(closed.head)")
            #expect(!closed.head.lowercased().contains("connection: close"), "kept alive, then closed for idleness")
            #expect(closed.quietBeforeClose >= Self.timeout - Self.delivery)
        }
    }

    /// The timeout is for a connection waiting for a request: a response that takes far longer (its head delayed,
    /// its body throttled) comes whole.
    @Test("a response slower than the idle timeout is never cut", arguments: ["delay=1000", "rate=20000"])
    func slowResponseWhole(fault: String) async throws {
        try await TestServer.withRunning(.init(idleTimeout: Self.timeout)) { server in
            let size = 30_000
            let request = Self.get("/bytes/slow?size=\(size)&\(fault)", port: server.port, close: true)
            let closed = try #require(try await Self.readUntilClosed(port: server.port, sending: request))
            #expect(closed.head.hasPrefix("HTTP/1.1 200"), "\(closed.head)")
            #expect(closed.body.count == size, "\(closed.body.count) of \(size) body bytes")
            #expect(server.stats.bodyBytesSent == Int64(size))
        }
    }

    @Test("without an idle timeout a connection waits for its request as long as it takes")
    func noTimeoutKeepsConnections() async throws {
        try await TestServer.withRunning { server in
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(host: "127.0.0.1", port: server.port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                    }
                }
            try await channel.executeThenClose { inbound, outbound in
                // Three times the timeout the other tests use.
                try await Task.sleep(for: Self.timeout * 3)
                try await outbound.write(ByteBuffer(string: Self.get("/bytes/a?size=10", port: server.port)))
                var iterator = inbound.makeAsyncIterator()
                let first = try await iterator.next()
                #expect(first.map { String(buffer: $0) }?.hasPrefix("HTTP/1.1 200") == true)
            }
        }
    }
}
