import Haul
import HTTPTypes
import NIOCore

/// A request head as the HTTP/1.1 bytes sent for it, and whether it is a HEAD (whose response has no body).
///
/// Encoded once per request and written as one buffer, with no encoder handler, header validator or promise in the
/// pipeline (bench/compare, s3).
/// The transport sends no request bodies, so the head is the whole request: any `Content-Length` or
/// `Transfer-Encoding` of the caller's is left out (the server would wait for a body that never comes), and a method
/// that may carry a body gets `Content-Length: 0`.
struct EncodedRequest: Sendable {
    let isHead: Bool
    let bytes: ByteBuffer

    /// `proxy`, when given, is the HTTP proxy the request is sent to: the target is then the absolute URL, and the
    /// proxy's credentials go in `Proxy-Authorization`.
    init(_ request: HTTPRequest, host: String, proxy: Proxy? = nil) throws {
        let path = request.path ?? "/"
        // HTTPTypes keeps CR, LF and NUL out of a path but lets spaces and other controls through; written as they
        // are, they would end the request line early.
        guard !path.isEmpty, path.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7F }) else {
            throw NIOTransportError.invalidTarget(path)
        }
        let target = proxy == nil ? path : "http://\(host)\(path)"
        let isGet = request.method == .get
        isHead = request.method == .head
        var capacity = request.method.rawValue.utf8.count + target.utf8.count + host.utf8.count + 140
        for field in request.headerFields {
            capacity += field.name.rawName.utf8.count + field.value.utf8.count + 4
        }
        var buffer = ByteBufferAllocator().buffer(capacity: capacity)
        if isGet {
            buffer.writeStaticString("GET ")
        } else {
            buffer.writeString(request.method.rawValue)
            buffer.writeStaticString(" ")
        }
        buffer.writeString(target)
        buffer.writeStaticString(" HTTP/1.1\r\nHost: ")
        buffer.writeString(host)
        buffer.writeStaticString("\r\n")
        if let credentials = proxy?.credentials {
            buffer.writeStaticString("Proxy-Authorization: ")
            buffer.writeString(credentials.basicAuthorization)
            buffer.writeStaticString("\r\n")
        }
        request.headerFields.forEachJoiningCookies { field in
            // The host is the URL's; the body's framing is this encoder's.
            switch field.name {
            case .contentLength, .transferEncoding: return
            case .proxyAuthorization where proxy?.credentials != nil: return
            default: if field.name.canonicalName == "host" { return }
            }
            buffer.writeString(field.name.rawName)
            buffer.writeStaticString(": ")
            buffer.writeString(field.value)
            buffer.writeStaticString("\r\n")
        }
        if !isGet && !Self.withoutContent.contains(request.method) {
            buffer.writeStaticString("Content-Length: 0\r\n")
        }
        buffer.writeStaticString("\r\n")
        bytes = buffer
    }

    /// Methods whose requests carry no content by definition (RFC 9110, 8.6: no `Content-Length` is sent for them).
    private static let withoutContent: Set<HTTPRequest.Method> = [.get, .head, .delete, .options, .trace, .connect]
}
