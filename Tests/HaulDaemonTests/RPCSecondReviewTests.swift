import Foundation
import HaulDaemon
import HaulOperations
import HaulTestSupport
import NIOCore
import NIOPosix
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A hostile client without the secret, on loopback, that sends and never reads: what the server answers it must not
/// pile up in its memory, and requests queued behind one another must not be answered one inside the other.
@Suite("RPC server, second review", .timeLimit(.minutes(2)))
struct RPCSecondReviewTests {
    /// One call of a method answered without the secret.
    static let openCall: JSON = ["jsonrpc": "2.0", "id": 1, "method": "system.listMethods"]

    /// A server whose methods answer `answerSize` bytes and count how often they are called, on an event loop of its
    /// own: what it is made to do does not hold up the servers of the tests running beside it.
    static func countingServer(answerSize: Int) async throws -> (
        server: RPCServer, calls: Locked<Int>, group: MultiThreadedEventLoopGroup
    ) {
        let calls = Locked(0)
        let answer = JSON.string(String(repeating: "m", count: answerSize))
        let endpoint = RPCEndpoint(secret: RPCSecret("second-review-secret")) { _, _ in
            calls.withLock { $0 += 1 }
            return answer
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        do {
            let server = try await RPCServer.start(endpoint: endpoint, host: "127.0.0.1", port: 0, group: group)
            return (server, calls, group)
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
    }

    /// Stops `server`, then its event loop.
    static func stop(_ server: RPCServer, _ group: MultiThreadedEventLoopGroup) {
        Task {
            await server.stop()
            try? await group.shutdownGracefully()
        }
    }

    /// The count once it has not changed for half a second, or as soon as it passes `limit`.
    static func settled(_ calls: Locked<Int>, past limit: Int) async throws -> Int {
        var last = -1
        while true {
            let now = calls.withLock { $0 }
            if now == last || now > limit { return now }
            last = now
            try await Task.sleep(for: .milliseconds(500))
        }
    }

    /// A socket to `port` whose writes give up after a second of the peer reading nothing.
    static func socket(port: Int) throws -> Int32 {
        let fd = try connectedLoopbackSocket(port: port)
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }

    /// A masked client frame (RFC 6455).
    static func frame(opcode: UInt8, _ payload: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = [0x80 | opcode]
        let mask: [UInt8] = [0x0A, 0x0B, 0x0C, 0x0D]
        switch payload.count {
        case ..<126: bytes.append(0x80 | UInt8(payload.count))
        case ..<65536: bytes += [0x80 | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        default: bytes += [0x80 | 127] + (0..<8).reversed().map { UInt8((payload.count >> ($0 * 8)) & 0xFF) }
        }
        return bytes + mask + payload.enumerated().map { $0.element ^ mask[$0.offset % 4] }
    }

    @Test("a client that pipelines HTTP calls and reads nothing does not have every answer kept for it")
    func pipelinedCallsToNonReader() async throws {
        let (server, calls, group) = try await Self.countingServer(answerSize: 256 << 10)
        defer { Self.stop(server, group) }
        let port = server.port
        let body = Self.openCall.encoded()
        var request = "POST /jsonrpc HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nContent-Type: application/json\r\n"
        request += "Content-Length: \(body.count)\r\n\r\n"
        let one = Array(request.utf8) + body
        let count = 300
        let fd = try Self.socket(port: port)
        defer { close(fd) }
        // 300 answers of 256 KiB are 75 MiB: what is not sent waits in the daemon's memory.
        try await onOwnThread { writeAll(fd, Array([[UInt8]](repeating: one, count: count).joined())) }
        let answered = try await Self.settled(calls, past: count / 3)
        #expect(answered <= count / 3, "\(answered) answers of 256 KiB made for a client that read none of them")
    }

    @Test("a WebSocket client that sends calls and reads nothing does not have every answer kept for it")
    func webSocketCallsToNonReader() async throws {
        let (server, calls, group) = try await Self.countingServer(answerSize: 256 << 10)
        defer { Self.stop(server, group) }
        let port = server.port
        let fd = try Self.socket(port: port)
        defer { close(fd) }
        let count = 300
        try await onOwnThread {
            _ = sendUpgrade(on: fd, headers: [("Host", "127.0.0.1:\(port)")])
            let message = Self.frame(opcode: 1, Self.openCall.encoded())
            writeAll(fd, Array([[UInt8]](repeating: message, count: count).joined()))
        }
        let answered = try await Self.settled(calls, past: count / 3)
        #expect(answered <= count / 3, "\(answered) answers of 256 KiB made for a client that read none of them")
    }

    @Test("a data frame that starts a message before the last one ended closes the session with 1002, unanswered")
    func interleavedMessages() async throws {
        let (server, calls, group) = try await Self.countingServer(answerSize: 16)
        defer { Self.stop(server, group) }
        let session = try await WebSocketClient.open(port: server.port, headers: [("Host", "127.0.0.1:\(server.port)")])
        try #require(session.upgraded, "\(session.statusLine)")
        let call = Self.openCall.encoded()
        // The first half of one message, then a whole one: two messages' frames interleaved (RFC 6455 5.4).
        session.sendFrame(opcode: 1, fin: false, Array(call.prefix(10)))
        session.sendFrame(opcode: 1, fin: true, call)
        session.sendFrame(opcode: 0, fin: true, Array(call.dropFirst(10)))
        try await eventually("closed") { session.isClosed }
        #expect(session.closeCode == 1002)
        #expect(calls.withLock { $0 } == 0, "a message of interleaved frames was answered")
    }

    @Test("thousands of pipelined requests queued behind a slow answer are each answered, not one inside another")
    func pipelinedBehindSlowAnswer() async throws {
        let (server, _, group) = try await Self.countingServer(answerSize: 16)
        defer { Self.stop(server, group) }
        let port = server.port
        let fd = try Self.socket(port: port)
        defer { close(fd) }
        // A wrong secret's answer is held back; the requests behind it wait in the server, and are answered at once
        // (a Host that is not the daemon's is refused without a call) as soon as it goes out.
        let guess: JSON = ["jsonrpc": "2.0", "id": 1, "method": "aria2.getVersion", "params": ["token:wrong"]]
        let body = guess.encoded()
        let first =
            "POST /jsonrpc HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nContent-Length: \(body.count)\r\n\r\n"
            + String(decoding: body, as: UTF8.self)
        let count = 4000
        let refused = String(repeating: "GET / HTTP/1.1\r\n\r\n", count: count)
        let received = try await onOwnThread { () -> Int in
            writeAll(fd, Array((first + refused).utf8))
            var timeout = timeval(tv_sec: 10, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var text: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            let marker = Array("HTTP/1.1 403".utf8)
            var found = 0
            var index = text.startIndex
            while found < count {
                let got = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if got <= 0 { break }
                text += buffer[0..<got]
                while let range = text[index...].firstRange(of: marker) {
                    found += 1
                    index = range.upperBound
                }
            }
            return found
        }
        #expect(received == count)
        // The server still answers.
        let answer = try await RawHTTP.send(
            port: port, headers: [("Host", "127.0.0.1:\(port)")], body: Self.openCall.encoded())
        #expect(answer.status == 200)
    }

    @Test("after a refused WebSocket upgrade, the connection answers the next request or is closed, not left hanging")
    func requestAfterRefusedUpgrade() async throws {
        let (server, _, group) = try await Self.countingServer(answerSize: 16)
        defer { Self.stop(server, group) }
        let port = server.port
        let fd = try Self.socket(port: port)
        defer { close(fd) }
        let (refusal, next) = try await onOwnThread { () -> (String, [UInt8]?) in
            let answer = sendUpgrade(on: fd, path: "/elsewhere", headers: [("Host", "127.0.0.1:\(port)")])
            let lines = String(decoding: answer, as: UTF8.self).lowercased().components(separatedBy: "\r\n")
            let length =
                lines.first { $0.hasPrefix("content-length:") }.flatMap {
                    Int($0.dropFirst(15).trimmingCharacters(in: .whitespaces))
                } ?? 0
            var body = [UInt8](repeating: 0, count: length)
            _ = body.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_WAITALL)) }
            let status = lines.first ?? ""
            writeAll(fd, Array("GET /elsewhere HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n".utf8))
            // An answer to the second request or the end of the connection.
            return (status, readUntilClosed(fd, waiting: 3))
        }
        #expect(refusal.contains(" 404 "))
        #expect(next != nil, "the connection neither answered the request after a refused upgrade nor was closed")
    }
}
