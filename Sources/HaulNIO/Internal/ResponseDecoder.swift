import NIOCore
import NIOHTTP1

/// NIO's HTTP/1.1 response parser, without its part in the outbound path.
///
/// `HTTPResponseDecoder` learns each request's method (a response to `HEAD` has no body) by watching the
/// pipeline's outbound request parts, which puts `HTTPRequestEncoder` and a header validator in the way of every
/// request: three handlers and a promise for a few hundred bytes, ~4% of Haul's CPU on 10,000 small files (perf).
/// Here the request goes out as bytes it encoded itself (``RequestEncoding``) and the connection's handler
/// tells the parser the method (``expect(_:)``).
struct ResponseDecoder: ByteToMessageDecoder {
    typealias InboundOut = HTTPClientResponsePart

    /// The parser; a class, shared with the connection's handler.
    let parser = HTTPResponseDecoder(leftOverBytesStrategy: .dropBytes)

    /// Registers a request sent on the connection: its response is parsed as an answer to `method`.
    func expect(_ method: HTTPMethod) {
        parser.write(
            data: .head(method == .GET ? Self.get : HTTPRequestHead(version: .http1_1, method: method, uri: "")))
    }

    /// The parser reads only the method of the heads it is given.
    private static let get = HTTPRequestHead(version: .http1_1, method: .GET, uri: "")

    func decoderAdded(context: ChannelHandlerContext) {
        parser.decoderAdded(context: context)
    }

    func decoderRemoved(context: ChannelHandlerContext) {
        parser.decoderRemoved(context: context)
    }

    func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        try parser.decode(context: context, buffer: &buffer)
    }

    func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        try parser.decodeLast(context: context, buffer: &buffer, seenEOF: seenEOF)
    }
}
