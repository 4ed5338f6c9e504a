import Foundation
import HaulDaemon
import HaulOperations
import HaulTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A bare WebSocket client (RFC 6455) over a blocking socket: sends masked text frames, collects the text messages
/// the server sends on a thread of its own.
final class WebSocketClient: Sendable {
    private let fd: Int32
    private let received = Locked<[[UInt8]]>([])
    private let closed = Locked(false)
    private let closing = Locked<UInt16?>(nil)
    /// The status line of the answer to the upgrade request.
    let statusLine: String

    /// Opens a session on `port` with `headers` (Host, Origin...) sent as given; `statusLine` says whether the server
    /// upgraded (101) or refused. The upgrade's blocking connect and read run on a thread of their own: on the
    /// cooperative pool (one thread a core) they could hold the thread the server needs to answer them.
    static func open(port: Int, path: String = "/jsonrpc", headers: [(String, String)]) async throws
        -> WebSocketClient
    {
        try await onOwnThread { try WebSocketClient(port: port, path: path, headers: headers) }
    }

    private init(port: Int, path: String, headers: [(String, String)]) throws {
        let fd = try connectedLoopbackSocket(port: port)
        self.fd = fd
        let answer = sendUpgrade(on: fd, path: path, headers: headers)
        statusLine = String(decoding: answer, as: UTF8.self).components(separatedBy: "\r\n").first ?? ""
        guard statusLine.contains(" 101 ") else { return }
        let received = self.received
        let closed = self.closed
        let closing = self.closing
        Thread {
            while let message = Self.readMessage(fd, closing: closing) { received.withLock { $0.append(message) } }
            closed.withLock { $0 = true }
        }.start()
    }

    deinit {
        shutdown(fd, Int32(SHUT_RDWR))
        close(fd)
    }

    /// Whether the server upgraded the connection.
    var upgraded: Bool { statusLine.contains(" 101 ") }
    /// The text messages received so far.
    var messages: [JSON] { received.withLock { $0 }.compactMap { try? JSON.parse($0) } }
    /// Whether the server closed the session.
    var isClosed: Bool { closed.withLock { $0 } }
    /// The status code of the server's close frame, once one came with a code.
    var closeCode: UInt16? { closing.withLock { $0 } }

    /// Sends `text` as one masked text frame, or in `fragments` frames.
    func send(_ text: [UInt8], fragments: Int = 1) {
        let size = max(1, (text.count + fragments - 1) / fragments)
        var start = 0
        var first = true
        repeat {
            let end = min(text.count, start + size)
            writeAll(fd, Self.frame(opcode: first ? 1 : 0, fin: end == text.count, Array(text[start..<end])))
            first = false
            start = end
        } while start < text.count
    }

    /// Sends a ping with `payload`.
    func ping(_ payload: [UInt8]) { writeAll(fd, Self.frame(opcode: 9, fin: true, payload)) }

    /// Sends one masked frame as given: `opcode` 1 text, 0 continuation...
    func sendFrame(opcode: UInt8, fin: Bool, _ payload: [UInt8]) {
        writeAll(fd, Self.frame(opcode: opcode, fin: fin, payload))
    }

    private static func frame(opcode: UInt8, fin: Bool, _ payload: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = [(fin ? 0x80 : 0) | opcode]
        let mask: [UInt8] = [0x12, 0x34, 0x56, 0x78]
        switch payload.count {
        case ..<126: bytes.append(0x80 | UInt8(payload.count))
        case ..<65536: bytes += [0x80 | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        default: bytes += [0x80 | 127] + (0..<8).reversed().map { UInt8((payload.count >> ($0 * 8)) & 0xFF) }
        }
        bytes += mask
        bytes += payload.enumerated().map { $0.element ^ mask[$0.offset % 4] }
        return bytes
    }

    /// The next text message (pongs and other control frames skipped), or `nil` at the end; a close frame's status
    /// code goes to `closing`.
    private static func readMessage(_ fd: Int32, closing: Locked<UInt16?>) -> [UInt8]? {
        var message: [UInt8] = []
        while true {
            guard let head = readExactly(fd, 2) else { return nil }
            var length = Int(head[1] & 0x7F)
            if length == 126 {
                guard let extended = readExactly(fd, 2) else { return nil }
                length = Int(extended[0]) << 8 | Int(extended[1])
            } else if length == 127 {
                guard let extended = readExactly(fd, 8) else { return nil }
                length = extended.reduce(0) { $0 << 8 | Int($1) }
            }
            guard let payload = readExactly(fd, length) else { return nil }
            let opcode = head[0] & 0x0F
            if opcode == 8 {
                if payload.count >= 2 { closing.withLock { $0 = UInt16(payload[0]) << 8 | UInt16(payload[1]) } }
                return nil
            }
            if opcode >= 8 { continue }
            message += payload
            if head[0] & 0x80 != 0 { return message }
        }
    }

    private static func readExactly(_ fd: Int32, _ count: Int) -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: count)
        var got = 0
        while got < count {
            let n = bytes[got...].withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { return nil }
            got += n
        }
        return bytes
    }

}

/// Sends a WebSocket upgrade request for `path` on `fd`, with `headers` (Host, Origin...) as given, and reads the
/// answer's head byte by byte up to the blank line (a frame may follow at once).
func sendUpgrade(on fd: Int32, path: String = "/jsonrpc", headers: [(String, String)]) -> [UInt8] {
    var head = "GET \(path) HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    head += "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
    for (name, value) in headers { head += "\(name): \(value)\r\n" }
    head += "\r\n"
    writeAll(fd, Array(head.utf8))
    var answer: [UInt8] = []
    var byte: UInt8 = 0
    while !answer.suffix(4).elementsEqual(Array("\r\n\r\n".utf8)), read(fd, &byte, 1) == 1 { answer.append(byte) }
    return answer
}
