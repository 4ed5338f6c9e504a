import HaulOperations
import NIOCore
import NIOHTTP1

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Turns a request and its fault into a ``ResponseAction``. Runs on the connection's event loop after
/// any `hold` and `delay`.
struct ResponsePlanner {
    let server: ServerContext
    let head: HTTPRequestHead
    let target: RequestTarget
    let fault: Fault

    private static let baseModified = 1_700_000_000

    func plan() -> ResponseAction {
        if server.requiresAddressHost, !HostHeader.namesAnAddress(head.headers.first(name: "host") ?? "") {
            return plain(.forbidden, "the Host header must name this server by its address\n", headers: HTTPHeaders())
        }
        let path = String(target.path)
        if fault.dropConnection == true,
            fault.dropTimes.map({ server.state.nextOrdinal(.drop, path: path) <= $0 }) ?? true
        {
            return .drop
        }
        if let expected = fault.requiredAuthorization, head.headers.first(name: "authorization") != expected {
            var headers = HTTPHeaders()
            headers.add(name: "WWW-Authenticate", value: "Basic realm=\"haul-test\"")
            return simple(.unauthorized, headers: headers)
        }
        if let status = fault.status {
            return simple(HTTPResponseStatus(statusCode: status), headers: retryAfterHeaders())
        }
        if let failCount = fault.failCount, server.state.nextOrdinal(.fail, path: path) <= failCount {
            return simple(HTTPResponseStatus(statusCode: fault.failStatus ?? 503), headers: retryAfterHeaders())
        }
        if let redirect = redirectLocation() {
            var headers = HTTPHeaders()
            headers.add(name: "Location", value: redirect)
            return simple(HTTPResponseStatus(statusCode: fault.redirectStatus ?? 302), headers: headers)
        }
        return content(path: path)
    }

    private func retryAfterHeaders() -> HTTPHeaders {
        var headers = HTTPHeaders()
        if let seconds = fault.retryAfterSeconds {
            let value = fault.retryAfterAsDate == true ? HTTPDate.now(plusSeconds: seconds) : String(seconds)
            headers.add(name: "Retry-After", value: value)
        }
        return headers
    }

    private func redirectLocation() -> String? {
        if let target = fault.redirectTarget { return target }
        let origin = server.scheme + "://" + (head.headers.first(name: "host") ?? "127.0.0.1")
        if fault.redirectLoop == true { return origin + head.uri }
        if let count = fault.redirectCount, count > 0 {
            return origin + target.replacingRedirectCount(with: count - 1)
        }
        return nil
    }

    private func simple(_ status: HTTPResponseStatus, headers: HTTPHeaders) -> ResponseAction {
        var headers = headers
        if let cookie = fault.setCookie { headers.add(name: "Set-Cookie", value: cookie) }
        return plain(status, "\(status.code) \(status.reasonPhrase)\n", headers: headers)
    }

    /// A response of `status` whose body is `text`.
    private func plain(_ status: HTTPResponseStatus, _ text: String, headers: HTTPHeaders) -> ResponseAction {
        var headers = headers
        headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        headers.add(name: "Content-Length", value: String(text.utf8.count))
        let isHead = head.method == .HEAD
        let body = BodyPlan(
            source: .buffer(ByteBuffer(string: text)),
            range: 0..<text.utf8.count,
            sendCount: text.utf8.count,
            stallLength: .forever
        )
        return .respond(
            HTTPResponseHead(version: .http1_1, status: status, headers: headers), body: isHead ? nil : body,
            headOnly: false)
    }

    // MARK: Content

    private struct Content {
        var source: BodySource
        var size: Int
        var etag: String
        /// `Last-Modified` in seconds since 1970, and as sent.
        let modifiedSeconds: Int
        let lastModified: String

        init(source: BodySource, size: Int, etag: String, modifiedSeconds: Int) {
            self.source = source
            self.size = size
            self.etag = etag
            self.modifiedSeconds = modifiedSeconds
            lastModified = HTTPDate.string(secondsSince1970: modifiedSeconds)
        }
    }

    private func content(path: String) -> ResponseAction {
        // The content version: 0 for the first request, then 1, 2, ...
        let version = fault.changeAfterFirst == true ? server.state.nextOrdinal(.version, path: path) - 1 : 0
        var content: Content
        switch resolveContent(path: path, version: version) {
        case .found(let found): content = found
        case .notFound: return simple(.notFound, headers: HTTPHeaders())
        case .forbidden: return simple(.forbidden, headers: HTTPHeaders())
        }
        if fault.gzip == true {
            guard let gzipped = gzipBody(content) else {
                return simple(.payloadTooLarge, headers: HTTPHeaders())
            }
            content.source = .buffer(gzipped)
            content.size = gzipped.readableBytes
        }

        var headers = HTTPHeaders()
        headers.reserveCapacity(10)
        if fault.noRanges != true { headers.add(name: "Accept-Ranges", value: "bytes") }
        headers.add(name: "ETag", value: content.etag)
        headers.add(name: "Last-Modified", value: content.lastModified)
        headers.add(name: "Content-Type", value: "application/octet-stream")
        if fault.gzip == true { headers.add(name: "Content-Encoding", value: "gzip") }
        if let disposition = fault.contentDisposition { headers.add(name: "Content-Disposition", value: disposition) }
        if let cookie = fault.setCookie { headers.add(name: "Set-Cookie", value: cookie) }

        if isNotModified(content) {
            Self.release(content.source)
            return .respond(
                HTTPResponseHead(version: .http1_1, status: .notModified, headers: headers), body: nil, headOnly: false)
        }
        var status = HTTPResponseStatus.ok
        var range = 0..<content.size
        switch rangeRequest(content) {
        case .full:
            break
        case .partial(let partial):
            status = .partialContent
            range = partial
            headers.add(
                name: "Content-Range", value: "bytes \(partial.lowerBound)-\(partial.upperBound - 1)/\(content.size)")
        case .unsatisfiable:
            Self.release(content.source)
            headers.add(name: "Content-Range", value: "bytes */\(content.size)")
            headers.add(name: "Content-Length", value: "0")
            return .respond(
                HTTPResponseHead(version: .http1_1, status: .rangeNotSatisfiable, headers: headers), body: nil,
                headOnly: false)
        }
        // Without a length the body is framed by the connection's close, which HTTP/1.1 would not allow (NIO would
        // send it chunked): an HTTP/1.0 response.
        if fault.noLength != true { headers.add(name: "Content-Length", value: String(range.count)) }
        let responseHead = HTTPResponseHead(
            version: fault.noLength == true ? .http1_0 : .http1_1, status: status, headers: headers)
        if head.method == .HEAD || fault.headOnly == true {
            Self.release(content.source)
            return .respond(responseHead, body: nil, headOnly: fault.headOnly == true && head.method != .HEAD)
        }
        return .respond(responseHead, body: bodyPlan(content.source, range: range, path: path), headOnly: false)
    }

    private func bodyPlan(_ source: BodySource, range: Range<Int>, path: String) -> BodyPlan {
        var sendCount = range.count
        if let shortBy = fault.shortByBytes { sendCount = max(0, sendCount - min(max(0, shortBy), sendCount)) }
        if let cutAfter = fault.cutAfterBytes {
            let applies = fault.cutTimes.map { server.state.nextOrdinal(.cut, path: path) <= $0 } ?? true
            if applies { sendCount = min(sendCount, max(0, cutAfter)) }
        }
        // A negative count (any client can write one) would make negative slices: it stalls at once instead.
        var stallAfter = fault.stallAfterBytes.map { max(0, $0) }
        if stallAfter == nil, fault.stallLength != nil { stallAfter = 0 }
        if let stall = stallAfter, stall >= sendCount { stallAfter = nil }
        return BodyPlan(
            source: source,
            range: range,
            sendCount: sendCount,
            stallAfter: stallAfter,
            stallLength: fault.stallLength ?? .forever,
            bytesPerSecond: fault.bytesPerSecond.flatMap { rate in
                let applies = fault.rateTimes.map { server.state.nextOrdinal(.rate, path: path) <= $0 } ?? true
                return rate > 0 && applies ? rate : nil
            }
        )
    }

    /// Whether a conditional `GET` finds the content unchanged (RFC 9110 13.1.2, 13.1.3): `If-None-Match` lists its
    /// ETag (weak comparison) or is `*`; without `If-None-Match`, `If-Modified-Since` is not before its
    /// `Last-Modified`.
    private func isNotModified(_ content: Content) -> Bool {
        if let noneMatch = head.headers.first(name: "if-none-match") {
            let strong = { (tag: Substring) in tag.hasPrefix("W/") ? tag.dropFirst(2) : tag }
            return noneMatch.split(separator: ",").contains { tag in
                let tag = tag.drop { $0 == " " || $0 == "\t" }
                return tag == "*" || strong(tag) == strong(content.etag[...])
            }
        }
        guard let since = head.headers.first(name: "if-modified-since").flatMap(HTTPDate.parse) else { return false }
        return content.modifiedSeconds <= since
    }

    private func rangeRequest(_ content: Content) -> ByteRangeRequest {
        guard fault.ignoreRange != true, fault.noRanges != true, fault.gzip != true,
            let range = head.headers.first(name: "range")
        else {
            return .full
        }
        if let ifRange = head.headers.first(name: "if-range") {
            // A weak validator never matches (RFC 9110 13.1.5): send the full body.
            let matches = ifRange.hasPrefix("\"") ? ifRange == content.etag : ifRange == content.lastModified
            if !matches { return .full }
        }
        return ByteRangeRequest(header: range, size: content.size)
    }

    private enum Lookup {
        case found(Content)
        case notFound
        case forbidden
    }

    private func resolveContent(path: String, version: Int) -> Lookup {
        if path.hasPrefix("/bytes/") {
            let name = RequestTarget.decode(path.dropFirst("/bytes/".count), plusIsSpace: false)
            guard !name.isEmpty else { return .notFound }
            let size = max(0, target.value("size").flatMap { Int($0) } ?? 1024)
            return .found(
                Content(
                    source: .generated(server.state.content(name: name, version: version)),
                    size: size,
                    etag: TestServer.entityTag(name: name, size: size, version: version),
                    modifiedSeconds: Self.baseModified + version * 3600
                ))
        }
        guard let resolver = server.resolver, path.hasPrefix(server.filesMount) else { return .notFound }
        let relative = RequestTarget.decode(path.dropFirst(server.filesMount.count), plusIsSpace: false)
        let file: ServedFile
        switch resolver.resolve(relativePath: relative) {
        case .found(let found): file = found
        case .notFound: return .notFound
        case .forbidden: return .forbidden
        }
        let tag =
            "\"\(String(file.inode, radix: 16))-\(String(file.size, radix: 16))-\(String(file.modifiedSecondsSince1970, radix: 16))-\(version)\""
        return .found(
            Content(
                source: Self.bodySource(of: file),
                size: file.size,
                etag: tag,
                modifiedSeconds: file.modifiedSecondsSince1970 + version * 3600
            ))
    }

    private static let maxGzipBytes = 64 << 20
    /// Files up to this size are read into memory, so the head and the body leave in one `writev`; larger ones
    /// go by `sendfile`, which needs a write of its own (bench/server measures the difference).
    private static let inMemoryFileLimit = 64 << 10

    private static func bodySource(of file: ServedFile) -> BodySource {
        if file.size <= inMemoryFileLimit {
            var buffer = ByteBufferAllocator().buffer(capacity: file.size)
            let readCount = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: file.size) { pointer in
                max(0, pread(file.descriptor, pointer.baseAddress, file.size, 0))
            }
            if readCount == file.size {
                close(file.descriptor)
                return .buffer(buffer)
            }
        }
        return .file(NIOFileHandle(_deprecatedTakingOwnershipOfDescriptor: file.descriptor))
    }

    private func gzipBody(_ content: Content) -> ByteBuffer? {
        defer { Self.release(content.source) }
        guard content.size <= Self.maxGzipBytes else { return nil }
        var plain = [UInt8](repeating: 0, count: content.size)
        switch content.source {
        case .generated(let generated):
            plain.withUnsafeMutableBytes { generated.fill($0, from: 0) }
        case .file(let handle):
            let readCount =
                (try? handle.withUnsafeFileDescriptor { descriptor in
                    plain.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, 0) }
                }) ?? -1
            guard readCount == content.size else { return nil }
        case .buffer(let buffer):
            plain = Array(buffer.readableBytesView)
        }
        return ByteBuffer(bytes: Gzip.compress(plain))
    }

    static func release(_ source: BodySource) {
        if case .file(let handle) = source { try? handle.close() }
    }
}
