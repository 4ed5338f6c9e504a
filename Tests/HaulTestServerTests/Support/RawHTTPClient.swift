import Foundation
import NIOCore
import NIOPosix

/// One request as raw HTTP/1.1 text goes out: no redirects followed, nothing decompressed.
struct RawRequest: Sendable {
    var method = "GET"
    var target: String
    /// `Host` header; the connected address when `nil`.
    var host: String?
    var headers: [(String, String)] = []
    /// Stop reading (and hand back what came) after this many body bytes; for stalls and head-only.
    var stopAfterBodyBytes: Int?
    var connectionClose = false

    init(_ method: String = "GET", _ target: String, host: String? = nil, headers: [(String, String)] = []) {
        self.method = method
        self.target = target
        self.host = host
        self.headers = headers
    }
}

/// A parsed response, as received.
struct RawResponse: Sendable {
    var status = 0
    var headers: [(name: String, value: String)] = []
    var body: [UInt8] = []
    /// The body reached `Content-Length`.
    var isComplete = false
    /// The server closed the connection while or before this response came.
    var connectionClosed = false

    func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    var contentLength: Int? { header("content-length").flatMap { Int($0) } }
}

/// A tiny HTTP/1.1 client over a raw NIO socket, so tests see exactly what the server sent.
enum RawHTTPClient {
    /// Sends `requests` pipelined on one connection and reads their responses in order. Stops at the
    /// first response the server cuts off (the rest come back empty, marked `connectionClosed`).
    static func send(
        _ requests: [RawRequest],
        port: Int,
        address: String = "127.0.0.1"
    ) async throws -> [RawResponse] {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: address, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        let hostHeader = address.contains(":") ? "[\(address)]:\(port)" : "\(address):\(port)"
        return try await channel.executeThenClose { inbound, outbound in
            var text = ""
            for request in requests {
                text += "\(request.method) \(request.target) HTTP/1.1\r\nHost: \(request.host ?? hostHeader)\r\n"
                for (name, value) in request.headers { text += "\(name): \(value)\r\n" }
                if request.connectionClose { text += "Connection: close\r\n" }
                text += "\r\n"
            }
            try await outbound.write(ByteBuffer(string: text))
            var reader = ResponseReader(iterator: inbound.makeAsyncIterator())
            var responses: [RawResponse] = []
            for request in requests {
                let response = try await reader.read(for: request)
                responses.append(response)
                if response.connectionClosed || request.stopAfterBodyBytes != nil { break }
            }
            return responses
        }
    }

    /// One request on its own connection.
    static func get(
        _ target: String,
        port: Int,
        method: String = "GET",
        host: String? = nil,
        headers: [(String, String)] = [],
        stopAfterBodyBytes: Int? = nil
    ) async throws -> RawResponse {
        var request = RawRequest(method, target, host: host, headers: headers)
        request.stopAfterBodyBytes = stopAfterBodyBytes
        return try await send([request], port: port).first ?? RawResponse(connectionClosed: true)
    }
}

/// Parses responses out of the inbound byte stream.
private struct ResponseReader {
    var iterator: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator
    var pending: [UInt8] = []
    var closed = false

    mutating func fill() async throws {
        guard !closed else { return }
        do {
            if let buffer = try await iterator.next() {
                pending += buffer.readableBytesView
            } else {
                closed = true
            }
        } catch {
            // A reset is a close as far as the tests are concerned.
            closed = true
        }
    }

    mutating func read(for request: RawRequest) async throws -> RawResponse {
        var response = RawResponse()
        var found = Self.find([13, 10, 13, 10], in: pending)
        while found == nil {
            if closed {
                response.connectionClosed = true
                return response
            }
            try await fill()
            found = Self.find([13, 10, 13, 10], in: pending)
        }
        guard let headEnd = found else { return response }
        let headText = String(decoding: pending[0..<headEnd], as: UTF8.self)
        pending.removeFirst(headEnd + 4)
        let lines = headText.components(separatedBy: "\r\n")
        response.status = Int(lines[0].split(separator: " ")[1]) ?? 0
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let value = line[line.index(after: colon)...].drop { $0 == " " }
            response.headers.append((String(line[..<colon]), String(value)))
        }
        let noBody = request.method == "HEAD" || response.status == 204 || response.status == 304
        let expected = noBody ? 0 : response.contentLength
        while true {
            if let stop = request.stopAfterBodyBytes, pending.count >= stop {
                response.body = Array(pending.prefix(stop))
                return response
            }
            if let expected, pending.count >= expected {
                response.body = Array(pending.prefix(expected))
                pending.removeFirst(expected)
                response.isComplete = true
                return response
            }
            if closed {
                response.body = pending
                pending = []
                response.connectionClosed = true
                response.isComplete = expected == nil
                return response
            }
            try await fill()
        }
    }

    static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
            if Array(haystack[start..<(start + needle.count)]) == needle { return start }
        }
        return nil
    }
}
