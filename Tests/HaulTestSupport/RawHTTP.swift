import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An HTTP answer as the client saw it.
package struct HTTPAnswer {
    package var status: Int
    package var headers: [(String, String)]
    package var body: [UInt8]

    package func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name.lowercased() }?.1 }
    package var text: String { String(decoding: body, as: UTF8.self) }
}

/// A bare HTTP/1.1 client over a socket: it sends exactly the head it is given (any `Host`, any `Origin`), as a
/// hostile page or tool would.
package enum RawHTTP {
    package static func send(
        port: Int, method: String = "POST", path: String = "/jsonrpc", headers: [(String, String)],
        body: [UInt8] = []
    ) async throws -> HTTPAnswer {
        try await onOwnThread {
            let fd = try connectedLoopbackSocket(port: port)
            defer { close(fd) }
            var head = "\(method) \(path) HTTP/1.1\r\n"
            for (name, value) in headers { head += "\(name): \(value)\r\n" }
            head += "Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
            // The server may close on a body it refuses: what was sent is enough.
            writeAll(fd, Array(head.utf8) + body)
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count <= 0 { break }
                received += buffer[0..<count]
            }
            return try parse(received)
        }
    }

    private static func parse(_ bytes: [UInt8]) throws -> HTTPAnswer {
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        guard let end = bytes.indices.first(where: { bytes[$0...].starts(with: separator) }) else {
            throw POSIXError(.EBADMSG)
        }
        let lines = String(decoding: bytes[..<end], as: UTF8.self).components(separatedBy: "\r\n")
        let status = Int(lines[0].split(separator: " ")[1]) ?? 0
        let headers = lines.dropFirst().compactMap { line -> (String, String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        return HTTPAnswer(status: status, headers: headers, body: Array(bytes[(end + 4)...]))
    }
}
