import HTTPTypes
import Haul
import HaulOperations
import NIOCore
import NIOPosix
import HaulTestSupport
import Testing

@testable import HaulNIO

/// HaulNIO's HTTP/1.1 response parser: framing (RFC 9112, 6.3), reads split anywhere, and the errors that keep a
/// misframed body from being taken for data. End to end through `NIOTransport` with a server that writes raw bytes.
@Suite("ResponseParser")
struct ResponseParserTests {
    /// What the parser reported, per response: status, fields, body bytes, and the keep-alive at its end.
    struct Parsed: Equatable {
        var status: Int
        var fields: [String] = []
        var body: [UInt8] = []
        var keepAlive: Bool?
    }

    /// Feeds `pieces` one read at a time; returns the responses seen and the state at the end.
    static func parse(
        _ pieces: [[UInt8]], expecting heads: [Bool]
    ) throws(NIOTransportError) -> (responses: [Parsed], endsAtClose: Bool) {
        var parser = ResponseParser()
        for head in heads { parser.expect(head: head) }
        var responses: [Parsed] = []
        for piece in pieces {
            try parser.parse(ByteBuffer(bytes: piece)) { part in
                switch part {
                case .head(let head):
                    responses.append(
                        Parsed(status: head.status.code, fields: head.headerFields.map { "\($0.name)=\($0.value)" }))
                case .body(let bytes): responses[responses.count - 1].body += Array(bytes.readableBytesView)
                case .end(let keepAlive): responses[responses.count - 1].keepAlive = keepAlive
                }
            }
        }
        return (responses, parser.endsAtClose)
    }

    /// Four responses on one connection: an informational head then a sized body, a chunked body with an extension
    /// and a trailer, a 204, and the answer to a HEAD (a length, no body); then a close-delimited one.
    static let stream = Array(
        ("HTTP/1.1 100 Continue\r\n\r\n"
            + "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A:  spaced value \t\r\n\r\nhello"
            + "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n4;name=value\r\nwiki\r\nA\r\npedia.org!\r\n0\r\nT: x\r\n\r\n"
            + "HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n"
            + "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"
            + "HTTP/1.0 200 OK\nServer: bare-lf\n\nuntil the close").utf8)

    static let expected: [Parsed] = [
        Parsed(
            status: 200, fields: ["Content-Length=5", "X-A=spaced value"], body: Array("hello".utf8), keepAlive: true),
        Parsed(status: 200, fields: ["Transfer-Encoding=Chunked"], body: Array("wikipedia.org!".utf8), keepAlive: true),
        Parsed(status: 204, fields: ["Content-Length=7"], keepAlive: true),
        Parsed(status: 200, fields: ["Content-Length=1000"], keepAlive: true),
        Parsed(status: 200, fields: ["Server=bare-lf"], body: Array("until the close".utf8), keepAlive: nil),
    ]

    @Test("a stream of responses parses the same whole, split in two at every byte, and one byte per read")
    func splitsAnywhere() throws {
        let heads = [false, false, false, true, false]
        let whole = try Self.parse([Self.stream], expecting: heads)
        #expect(whole.responses == Self.expected)
        #expect(whole.endsAtClose)
        for cut in 1..<Self.stream.count {
            let split = try Self.parse([Array(Self.stream[..<cut]), Array(Self.stream[cut...])], expecting: heads)
            #expect(split.responses == Self.expected, "cut at \(cut)")
        }
        let bytewise = try Self.parse(Self.stream.map { [$0] }, expecting: heads)
        #expect(bytewise.responses == Self.expected)
    }

    @Test(
        "keep-alive follows the version and Connection; a body framed otherwise ends the connection",
        arguments: [
            ("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false),
            ("HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Upgrade\r\nContent-Length: 0\r\n\r\n", true),
            ("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false),
            ("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", true),
            ("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false),
        ])
    func keepAlive(response: String, keepAlive: Bool) throws {
        let parsed = try Self.parse([Array(response.utf8)], expecting: [false])
        #expect(parsed.responses.count == 1 && parsed.responses[0].keepAlive == keepAlive)
    }

    @Test("a transfer coding other than chunked last is read to the close, whatever the length says")
    func otherCoding() throws {
        let response = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\nContent-Length: 2\r\n\r\nabcdef"
        let parsed = try Self.parse([Array(response.utf8)], expecting: [false])
        #expect(parsed.responses.first?.body == Array("abcdef".utf8))
        #expect(parsed.endsAtClose && parsed.responses.first?.keepAlive == nil)
    }

    @Test(
        "what would misframe a body is an error naming it",
        arguments: [
            ("HTTP/1.1 200 OK\r\nContent-Length: 12a\r\n\r\n", "Content-Length '12a'"),
            ("HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n", "Content-Length ''"),
            ("HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n", "disagree"),
            ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", "disagree"),
            ("HTTP/1.1 200 OK\r\nX-A: one\r\n two\r\nContent-Length: 0\r\n\r\n", "folded"),
            ("HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "header line 'no colon here'"),
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chun\u{1}ked\r\n\r\n", "control character"),
            ("HTTP/1.1 302 Found\r\nLocation: /a\u{1}b\r\n\r\n", "control character in the value of Location"),
            ("HTTP/2 200 OK\r\n\r\n", "status line 'HTTP/2 200 OK'"),
            ("HTTP/1.1 20 OK\r\n\r\n", "status line"),
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "not hexadecimal"),
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n", "longer than its size"),
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n", "too large"),
        ])
    func invalid(response: String, detail: String) {
        let error = #expect(throws: NIOTransportError.self) {
            _ = try Self.parse([Array(response.utf8)], expecting: [false])
        }
        #expect(error.map { "\($0)".contains("not valid HTTP/1.1") && "\($0)".contains(detail) } == true, "\(error!)")
    }

    @Test("a response nobody asked for, and a head or chunk line without end beyond the limit, are errors")
    func unsolicitedAndLimits() {
        #expect(throws: NIOTransportError.invalidResponse("a response to no request")) {
            _ = try Self.parse([Array("HTTP/1.1 200 OK\r\n\r\n".utf8)], expecting: [])
        }
        let longHead = Array(("HTTP/1.1 200 OK\r\nX-A: " + String(repeating: "a", count: 90_000)).utf8)
        #expect(throws: NIOTransportError.invalidResponse("a response head over 80 KiB")) {
            _ = try Self.parse(
                stride(from: 0, to: longHead.count, by: 1000).map {
                    Array(longHead[$0..<min($0 + 1000, longHead.count)])
                }, expecting: [false])
        }
        let longChunkLine = Array(
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;" + String(repeating: "x", count: 5000)).utf8)
        #expect(throws: NIOTransportError.invalidResponse("a chunk-size line over 4 KiB")) {
            _ = try Self.parse([longChunkLine], expecting: [false])
        }
    }

    @Test("through NIOTransport: chunked and close-delimited bodies arrive whole; a garbled response fails the request")
    func endToEnd() async throws {
        let body = (0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        var chunked = Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
        for start in stride(from: 0, to: body.count, by: 0x7fff) {  // sizes with hex letters: 7fff, 7fff, 1172
            let piece = body[start..<min(start + 0x7fff, body.count)]
            chunked += Array((String(piece.count, radix: 16) + "\r\n").utf8) + piece + Array("\r\n".utf8)
        }
        chunked += Array("0\r\n\r\n".utf8)
        let closeDelimited = Array("HTTP/1.1 200 OK\r\n\r\n".utf8) + body
        let garbled = Array("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n".utf8)
        try await RawServer.withRunning(responses: [chunked, closeDelimited, garbled]) { port in
            let transport = NIOTransport()
            for (index, name) in ["chunked", "close-delimited"].enumerated() {
                let request = HTTPRequest(
                    method: .get, scheme: "http", authority: "127.0.0.1:\(port)", path: "/\(index)")
                let response = try await transport.send(request, options: .init(connectTimeout: .seconds(5)))
                var received: [UInt8] = []
                for try await chunk in response.body { chunk.withUnsafeBytes { received += $0 } }
                #expect(received == body, "\(name)")
            }
            let request = HTTPRequest(method: .get, scheme: "http", authority: "127.0.0.1:\(port)", path: "/2")
            let error = await #expect(throws: NIOTransportError.self) {
                _ = try await transport.send(request, options: .init(connectTimeout: .seconds(5)))
            }
            #expect(error == .invalidResponse("Content-Length 'x'"))
        }
    }
}
