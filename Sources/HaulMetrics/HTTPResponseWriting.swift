package import NIOCore
package import NIOHTTP1

extension ChannelHandlerContext {
    /// Writes a whole HTTP/1.1 answer to `request` from a handler whose outbound parts are `HTTPServerResponsePart`s:
    /// `headers` with the body's `Content-Length` and `Connection` added, the body (none to a `HEAD`, whose length is
    /// still the body's), and the end; the connection closes once the end is written unless `keepAlive`.
    package func writeResponse(
        to request: HTTPRequestHead, status: HTTPResponseStatus, headers: HTTPHeaders, body: [UInt8], keepAlive: Bool
    ) {
        var headers = headers
        headers.add(name: "Content-Length", value: String(body.count))
        headers.add(name: "Connection", value: keepAlive ? "keep-alive" : "close")
        let head = HTTPResponseHead(version: request.version, status: status, headers: headers)
        write(NIOAny(HTTPServerResponsePart.head(head)), promise: nil)
        if request.method != .HEAD, !body.isEmpty {
            write(NIOAny(HTTPServerResponsePart.body(.byteBuffer(channel.allocator.buffer(bytes: body)))), promise: nil)
        }
        let done = eventLoop.makePromise(of: Void.self)
        writeAndFlush(NIOAny(HTTPServerResponsePart.end(nil)), promise: done)
        if !keepAlive {
            let channel = channel
            done.futureResult.whenComplete { _ in channel.close(promise: nil) }
        }
    }
}
