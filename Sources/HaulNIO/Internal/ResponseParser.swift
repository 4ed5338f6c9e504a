import HTTPTypes
import Haul
import NIOCore

/// What ``ResponseParser`` found in the bytes read.
enum ResponsePart {
    /// A final response head (informational ones, 1xx but 101, are skipped).
    case head(HTTPResponse)
    /// Body bytes: a slice of what was read, not a copy.
    case body(ByteBuffer)
    /// The response ended; `keepAlive` tells whether the connection may carry another request.
    case end(keepAlive: Bool)
}

/// An HTTP/1.1 response parser (RFC 9112) for the responses of one connection, in the order their requests went out.
///
/// Haul's own rather than NIO's `HTTPResponseDecoder` (llhttp behind a `ByteToMessageHandler`, building NIO's
/// `HTTPHeaders` through callbacks, then converted to HTTPTypes): here the head goes straight to an `HTTPResponse`
/// and body bytes are slices of the read (bench/compare, s3).
///
/// Strict where a lax reading could misframe a body: a `Content-Length` must be digits (repeats must agree), a
/// folded header line or a malformed chunk is an error, and so is a response, or any byte, nobody asked for. Bodies
/// are framed as RFC 9112, 6.3 says: none for a response to HEAD or with status 1xx, 204 or 304; chunked when it is
/// the final transfer coding; else by `Content-Length`; else (or with another transfer coding) up to the
/// connection's close.
struct ResponseParser {
    private enum State {
        case head
        case fixed(remaining: Int)
        case chunkSize
        case chunkData(remaining: Int)
        case chunkEnd
        case trailers(seen: Int)
        case untilClose
    }

    /// The largest head (status line and fields) or trailer section accepted, as NIO's default limit.
    static let maxHeadSize = 80 * 1024
    /// The longest chunk-size line accepted (the size and any extensions).
    static let maxChunkLineSize = 4096

    private var state = State.head
    /// Bytes read but not yet parsed: the start of a head or line whose end has not arrived.
    private var held: ByteBuffer?
    /// For each request sent and not yet answered: whether it was a HEAD (its response has no body).
    private var expected = CircularBuffer<Bool>(initialCapacity: 2)
    private var keepAlive = true

    /// Registers a request sent on the connection; its response comes after those of the requests before it.
    mutating func expect(head: Bool) {
        expected.append(head)
    }

    /// Whether the connection's close ends the current response (one framed by the close).
    var endsAtClose: Bool {
        if case .untilClose = state { return true }
        return false
    }

    /// Parses `bytes`, handing each part found to `emit`.
    mutating func parse(_ bytes: ByteBuffer, _ emit: (ResponsePart) -> Void) throws(NIOTransportError) {
        var buffer: ByteBuffer
        if var held = held.take() {
            var incoming = bytes
            held.writeBuffer(&incoming)
            buffer = held
        } else {
            buffer = bytes
        }
        while buffer.readableBytes > 0 {
            switch state {
            case .head:
                // Bytes after the last response asked for answer no request, and RFC 9112, 6.3 forbids reading
                // them as a response: kept, they would start the next download's response on the kept-alive
                // connection (its head a server's or a proxy's leftovers, a stray CRLF breaking it). The error
                // closes the connection, whether they come in the read that ended the response or later.
                guard !expected.isEmpty else { throw Self.invalid("a response to no request") }
                guard let head = try takeHead(from: &buffer) else {
                    return try hold(buffer, limit: Self.maxHeadSize, "a response head over 80 KiB")
                }
                if let head { try begin(head, emit) }
            case .fixed(let remaining):
                let slice = Self.take(remaining, from: &buffer)
                emit(.body(slice))
                if remaining == slice.readableBytes {
                    finish(emit)
                } else {
                    state = .fixed(remaining: remaining - slice.readableBytes)
                }
            case .chunkSize:
                guard let line = try takeLine(from: &buffer, limit: Self.maxChunkLineSize) else {
                    return try hold(buffer, limit: Self.maxChunkLineSize, "a chunk-size line over 4 KiB")
                }
                let size = try Self.chunkSize(line)
                state = size == 0 ? .trailers(seen: 0) : .chunkData(remaining: size)
            case .chunkData(let remaining):
                let slice = Self.take(remaining, from: &buffer)
                emit(.body(slice))
                state =
                    remaining == slice.readableBytes
                    ? .chunkEnd : .chunkData(remaining: remaining - slice.readableBytes)
            case .chunkEnd:
                guard try takeLine(from: &buffer, limit: 0) != nil else {
                    return try hold(buffer, limit: 2, "chunk data longer than its size")
                }
                state = .chunkSize
            case .trailers(let seen):
                guard let line = try takeLine(from: &buffer, limit: Self.maxHeadSize - seen) else {
                    return try hold(buffer, limit: Self.maxHeadSize - seen, "trailer fields over 80 KiB")
                }
                if line.isEmpty {
                    finish(emit)
                } else {
                    state = .trailers(seen: seen + line.count + 2)  // trailer fields are read past, not kept
                }
            case .untilClose:
                emit(.body(buffer))
                return
            }
        }
    }

    /// Keeps the unparsed rest for the next read, unless it is already longer than what it may grow to (`what` says
    /// what is then too long).
    private mutating func hold(_ rest: ByteBuffer, limit: Int, _ what: String) throws(NIOTransportError) {
        guard rest.readableBytes <= limit else { throw Self.invalid(what) }
        var rest = rest
        rest.discardReadBytes()
        held = rest
    }

    private mutating func finish(_ emit: (ResponsePart) -> Void) {
        state = .head
        emit(.end(keepAlive: keepAlive))
    }

    // MARK: Heads

    /// A parsed head: the response, the HTTP version's minor digit, and its framing fields.
    fileprivate struct Head {
        var response: HTTPResponse
        var minorVersion: UInt8
        var contentLength: Int?
        var chunked = false
        var otherCoding = false
        var close = false
        var keepAlive = false
    }

    /// Takes a whole head off `buffer`: `nil` when its end has not arrived (nothing is taken), `.some(nil)` for an
    /// informational head (skipped).
    private mutating func takeHead(from buffer: inout ByteBuffer) throws(NIOTransportError) -> Head?? {
        let found = buffer.withUnsafeReadableBytes { bytes -> Int? in
            // The end of the head: an empty line (CRLF, or a bare LF as RFC 9112, 2.2 allows a recipient to accept).
            var index = 0
            while let newline = bytes[index...].firstIndex(of: UInt8(ascii: "\n")) {
                let next = newline + 1
                if next < bytes.count, bytes[next] == UInt8(ascii: "\n") { return next + 1 }
                if next + 1 < bytes.count, bytes[next] == UInt8(ascii: "\r"), bytes[next + 1] == UInt8(ascii: "\n") {
                    return next + 2
                }
                index = next
            }
            return nil
        }
        guard let length = found else { return nil }
        guard length <= Self.maxHeadSize else { throw Self.invalid("a response head over 80 KiB") }
        let head = try buffer.withUnsafeReadableBytes { bytes throws(NIOTransportError) in
            try Self.parseHead(UnsafeRawBufferPointer(rebasing: bytes[..<length]))
        }
        buffer.moveReaderIndex(forwardBy: length)
        let code = head.response.status.code
        return code < 200 && code != 101 ? .some(nil) : head
    }

    private mutating func begin(_ head: Head, _ emit: (ResponsePart) -> Void) throws(NIOTransportError) {
        let isHeadRequest = expected.removeFirst()
        let code = head.response.status.code
        keepAlive =
            !head.close && (head.minorVersion >= 1 || head.keepAlive) && code != 101
            && !(head.contentLength != nil && (head.chunked || head.otherCoding))  // RFC 9112, 6.3: close after it
        emit(.head(head.response))
        if isHeadRequest || code < 200 || code == 204 || code == 304 {
            finish(emit)
        } else if head.chunked {
            state = .chunkSize
        } else if head.otherCoding {
            state = .untilClose
            keepAlive = false
        } else if let length = head.contentLength {
            if length == 0 { finish(emit) } else { state = .fixed(remaining: length) }
        } else {
            state = .untilClose
            keepAlive = false
        }
    }

    private static func parseHead(_ bytes: UnsafeRawBufferPointer) throws(NIOTransportError) -> Head {
        var lines = Lines(bytes)
        guard let status = lines.next() else { throw invalid("no status line") }
        // HTTP/1.x SP 3DIGIT [SP reason]
        guard status.count >= 12, status.starts(with: "HTTP/1.".utf8), (0x30...0x39).contains(status[7]),
            status[8] == UInt8(ascii: " "), status[9...11].allSatisfy({ (0x30...0x39).contains($0) }),
            status.count == 12 || status[12] == UInt8(ascii: " ")
        else {
            throw invalid("status line '\(String(decoding: status.prefix(64), as: UTF8.self))'")
        }
        let code = status[9...11].reduce(0) { $0 * 10 + Int($1 - 0x30) }
        let reason = status.count > 13 ? String(decoding: status[13...], as: UTF8.self) : ""
        var head = Head(
            response: HTTPResponse(status: .init(code: code, reasonPhrase: reason)), minorVersion: status[7] - 0x30)
        while let line = lines.next(), !line.isEmpty {
            guard line[line.startIndex] != UInt8(ascii: " "), line[line.startIndex] != UInt8(ascii: "\t") else {
                throw invalid("a folded header line (obsolete line folding)")
            }
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > line.startIndex,
                let name = HTTPField.Name(String(decoding: line[..<colon], as: UTF8.self))
            else {
                throw invalid("header line '\(String(decoding: line.prefix(64), as: UTF8.self))'")
            }
            var value = line[(colon + 1)...]
            while let first = value.first, first == 0x20 || first == 0x09 { value = value.dropFirst() }
            while let last = value.last, last == 0x20 || last == 0x09 { value = value.dropLast() }
            // Framing and redirect targets must be exact. Other fields keep their control characters, as RFC 9110
            // (5.5) allows a recipient to: HTTPField turns them into spaces, and a field that is only advice to Haul
            // (a Content-Disposition nobody asked to follow) must not fail a download.
            if name == .transferEncoding || name == .location,
                !value.allSatisfy({ $0 >= 0x20 && $0 != 0x7F || $0 == 0x09 })
            {
                throw invalid("a control character in the value of \(name)")
            }
            switch name {
            case .contentLength: try head.noteContentLength(value)
            case .transferEncoding: head.noteTransferCodings(value)
            case .connection:
                for option in ListItems(value) {
                    if option.equalsIgnoringCase("close") {
                        head.close = true
                    } else if option.equalsIgnoringCase("keep-alive") {
                        head.keepAlive = true
                    }
                }
            default: break
            }
            head.response.headerFields.append(HTTPField(name: name, value: String(decoding: value, as: UTF8.self)))
        }
        return head
    }

    /// The size on a chunk-size line: hexadecimal digits, then optional whitespace and extensions (ignored).
    private static func chunkSize(_ line: [UInt8]) throws(NIOTransportError) -> Int {
        var size = 0
        var digits = 0
        for byte in line {
            let digit: Int
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = Int(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = Int(byte - UInt8(ascii: "a")) + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = Int(byte - UInt8(ascii: "A")) + 10
            case UInt8(ascii: ";"), UInt8(ascii: " "), UInt8(ascii: "\t"):
                guard digits > 0 else { throw invalid("chunk-size line without a size") }
                return size
            default: throw invalid("chunk size is not hexadecimal")
            }
            digits += 1
            guard digits <= 15 else { throw invalid("chunk size too large") }
            size = size * 16 + digit
        }
        guard digits > 0 else { throw invalid("chunk-size line without a size") }
        return size
    }

    /// Up to `limit` bytes off the front of `buffer`, as a slice of it.
    private static func take(_ limit: Int, from buffer: inout ByteBuffer) -> ByteBuffer {
        let slice = buffer.getSlice(at: buffer.readerIndex, length: min(limit, buffer.readableBytes)) ?? ByteBuffer()
        buffer.moveReaderIndex(forwardBy: slice.readableBytes)
        return slice
    }

    /// Takes one line (without its CRLF or LF) off `buffer`; `nil` when its end has not arrived.
    private func takeLine(from buffer: inout ByteBuffer, limit: Int) throws(NIOTransportError) -> [UInt8]? {
        guard let newline = buffer.readableBytesView.firstIndex(of: UInt8(ascii: "\n")) else { return nil }
        let length = newline - buffer.readerIndex
        var line = buffer.readBytes(length: length + 1) ?? []
        _ = line.popLast()  // the LF
        if line.last == UInt8(ascii: "\r") { _ = line.popLast() }
        guard line.count <= limit else {
            throw Self.invalid(limit == 0 ? "chunk data longer than its size" : "a line over \(limit) bytes")
        }
        return line
    }

    static func invalid(_ detail: String) -> NIOTransportError {
        NIOTransportError.invalidResponse(detail)
    }
}

extension ResponseParser.Head {
    /// `Content-Length`: digits only; repeats (in one field or several) must agree.
    fileprivate mutating func noteContentLength(_ value: Slice<UnsafeRawBufferPointer>) throws(NIOTransportError) {
        for item in ListItems(value, keepingEmpty: true) {
            guard !item.isEmpty, item.count <= 18, item.allSatisfy({ (0x30...0x39).contains($0) }) else {
                throw ResponseParser.invalid("Content-Length '\(String(decoding: value, as: UTF8.self))'")
            }
            let length = item.reduce(0) { $0 * 10 + Int($1 - 0x30) }
            if let contentLength, contentLength != length {
                throw ResponseParser.invalid("Content-Length values disagree (\(contentLength) and \(length))")
            }
            contentLength = length
        }
    }

    /// `Transfer-Encoding`: chunked when it is the final coding; any other final coding is framed by the close.
    fileprivate mutating func noteTransferCodings(_ value: Slice<UnsafeRawBufferPointer>) {
        for coding in ListItems(value) {
            chunked = coding.equalsIgnoringCase("chunked")
            otherCoding = !chunked
        }
    }
}

/// The items of a comma-separated field value, without the spaces and tabs around them; empty ones only when asked
/// for. Read in place, on the bytes.
private struct ListItems: Sequence, IteratorProtocol {
    private var rest: Slice<UnsafeRawBufferPointer>
    private let keepingEmpty: Bool
    private var done = false

    init(_ value: Slice<UnsafeRawBufferPointer>, keepingEmpty: Bool = false) {
        rest = value
        self.keepingEmpty = keepingEmpty
    }

    mutating func next() -> Slice<UnsafeRawBufferPointer>? {
        while !done {
            let comma = rest.firstIndex(of: UInt8(ascii: ","))
            var item = rest[..<(comma ?? rest.endIndex)]
            if let comma { rest = rest[(comma + 1)...] } else { done = true }
            while let first = item.first, first == 0x20 || first == 0x09 { item = item.dropFirst() }
            while let last = item.last, last == 0x20 || last == 0x09 { item = item.dropLast() }
            if !item.isEmpty || keepingEmpty { return item }
        }
        return nil
    }
}

/// The lines of a head (LF or CRLF terminated), as slices.
private struct Lines {
    private let bytes: UnsafeRawBufferPointer
    private var index = 0

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    mutating func next() -> Slice<UnsafeRawBufferPointer>? {
        guard index < bytes.count, let newline = bytes[index...].firstIndex(of: UInt8(ascii: "\n")) else { return nil }
        var end = newline
        if end > index, bytes[end - 1] == UInt8(ascii: "\r") { end -= 1 }
        defer { index = newline + 1 }
        return bytes[index..<end]
    }
}
