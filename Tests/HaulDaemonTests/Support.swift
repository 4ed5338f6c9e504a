import Foundation
import Haul
import HaulDaemon
import HaulNIO
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// An HTTP answer as the client saw it.
struct HTTPAnswer {
    var status: Int
    var headers: [(String, String)]
    var body: [UInt8]

    func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name.lowercased() }?.1 }
    var json: JSON? { try? JSON.parse(body) }
    var text: String { String(decoding: body, as: UTF8.self) }
}

/// A bare HTTP/1.1 client over a socket: it sends exactly the head it is given (any `Host`, any `Origin`), as a
/// hostile page or tool would.
enum RawHTTP {
    static func send(
        port: Int, method: String = "POST", path: String = "/jsonrpc", headers: [(String, String)],
        body: [UInt8] = []
    ) async throws -> HTTPAnswer {
        try await onOwnThread {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { throw POSIXError(.EIO) }
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
            var head = "\(method) \(path) HTTP/1.1\r\n"
            for (name, value) in headers { head += "\(name): \(value)\r\n" }
            head += "Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
            let request = Array(head.utf8) + body
            var sent = 0
            while sent < request.count {
                let count = request[sent...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                guard count > 0 else { break }  // the server may close on a body it refuses
                sent += count
            }
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

/// A daemon on a free loopback port, downloading into a temporary root with a journal in memory, and a client
/// that calls it with the right secret.
final class DaemonHarness: Sendable {
    static let secret = "test-secret-0123"
    let root: TemporaryDirectory
    let daemon: Daemon
    let server: RPCServer
    let queue: DownloadQueue

    init(
        maxConcurrent: Int = 4, access: RPCAccess = RPCAccess(unauthorizedDelay: .milliseconds(300)),
        secret: String? = DaemonHarness.secret
    ) async throws {
        root = try TemporaryDirectory()
        var configuration = testConfiguration()
        configuration.keepsPartialOnCancel = true
        queue = DownloadQueue(
            downloader: Downloader(transport: NIOTransport(), configuration: configuration),
            configuration: .init(maxConcurrentDownloads: maxConcurrent, recordsRequests: false))
        daemon = try Daemon(queue: queue, configuration: Daemon.Configuration(root: root.url))
        server = try await RPCServer.start(
            endpoint: daemon.endpoint(secret: secret.flatMap(RPCSecret.init)), host: "127.0.0.1", port: 0,
            access: access)
    }

    var port: Int { server.port }
    var host: String { "127.0.0.1:\(port)" }

    func stop() async {
        await server.stop()
        queue.cancelAll()
        await queue.waitUntilIdle()
        daemon.close()
    }

    /// Calls `method` with the secret and `params`; the answer's `result`, or the error object thrown.
    @discardableResult
    func call(_ method: String, _ params: [JSON] = [], token: String? = DaemonHarness.secret) async throws -> JSON {
        let answer = try await post([
            "jsonrpc": "2.0", "id": "t", "method": .string(method),
            "params": .array(
                (token.map { [JSON.string("token:\($0)")] } ?? []) + params),
        ])
        let members = try #require(answer.json?.object, "not a JSON-RPC answer: \(answer.text)")
        if let error = members["error"] { throw CallError(object: error) }
        return try #require(members["result"])
    }

    /// POSTs `body` to /jsonrpc with a right Host and no Origin, as a local tool does.
    func post(_ body: JSON, headers: [(String, String)] = []) async throws -> HTTPAnswer {
        try await RawHTTP.send(
            port: port, headers: [("Host", host), ("Content-Type", "application/json")] + headers, body: body.encoded())
    }

    /// Waits until `gid` has the status `status`.
    func waitFor(_ gid: String, status: String) async throws {
        try await eventually("\(gid) \(status)") {
            // A blocking poll of the daemon itself: its methods answer from memory.
            (try? daemon.call("aria2.tellStatus", [.string(gid), ["status"]]))?.object?["status"]?.string == status
        }
    }
}

/// An error object an RPC call answered with.
struct CallError: Error, CustomStringConvertible {
    var object: JSON
    var message: String { object.object?["message"]?.string ?? "" }
    var code: Int64? { object.object?["code"]?.int }
    var description: String { "\(object)" }
}
