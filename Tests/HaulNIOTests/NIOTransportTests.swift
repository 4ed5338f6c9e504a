import Foundation
import HTTPTypes
import HTTPTypesFoundation
import Haul
import HaulNIO
import HaulOperations
import HaulTestServer
import HaulTestSupport
import NIOCore
import NIOPosix
import Testing

/// What NIOTransport does beyond the engine tests every transport runs (TransportKind): connection reuse,
/// stale connections, back-pressure, schemes it leaves to its fallback.
@Suite("NIOTransport", .timeLimit(.minutes(1)))
struct NIOTransportTests {
    /// Downloads `count` generated files into `dir` through `queue`: `name0` of `size` bytes, `name1` of `size + 1`, ...
    private func fetchNumbered(
        _ count: Int, named name: String, size: Int, from server: TestServer, into dir: TemporaryDirectory,
        through queue: DownloadQueue
    ) async throws {
        let requests = (0..<count).map { index in
            DownloadRequest(
                url: server.url(path: "/bytes/\(name)\(index)", query: ["size": "\(size + index)"]),
                destination: .directory(dir.url))
        }
        for handle in queue.add(requests) { _ = try await handle.result }
    }

    @Test("keeps connections alive: 20 downloads one after another use one connection")
    func keepAlive() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: NIOTransport(), configuration: testConfiguration())
            for index in 0..<20 {
                let url = server.url(path: "/bytes/f\(index)", query: ["size": "\(1000 + index)"])
                _ = try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            }
            #expect(server.stats.requestCount == 20)
            #expect(server.stats.connectionsAccepted == 1)
            #expect(contentsOf(dir.file("f7")) == TestServer.expectedBytes(name: "f7", size: 1007))
        }
    }

    @Test("a kept-alive connection the server closed without answering is replaced, with no error and no retry")
    func staleConnection() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let events = EventLog()
            let downloader = Downloader(transport: NIOTransport(), configuration: testConfiguration(retries: 0))
            _ = try await downloader.download(
                DownloadRequest(
                    url: server.url(path: "/bytes/first", query: ["size": "10"]), destination: .directory(dir.url)))
            // The first request on the pooled connection is dropped, as a server that timed the connection out
            // would; the transport sends it again on a new connection.
            let dropped = server.url(
                path: "/bytes/second", query: ["size": "10", "dropConnection": "1", "dropTimes": "1"])
            let result = try await downloader.download(
                DownloadRequest(url: dropped, destination: .directory(dir.url)), onEvent: events.record)
            #expect(result.attempts == 1 && events.retries == 0)
            #expect(server.stats.requests(toPath: "/bytes/second") == 2)
            #expect(server.stats.connectionsAccepted == 2)
            #expect(contentsOf(result.fileURL) == TestServer.expectedBytes(name: "second", size: 10))
        }
    }

    @Test("a body nobody reads is not read from the socket beyond a bound; read later, it arrives whole")
    func backPressure() async throws {
        try await TestServer.withRunning { server in
            // What the transport may hold (at most 1 MiB, plus the reads of one turn of the event loop: 1 MiB), what
            // the two kernels' socket buffers may grow to, and 2 MiB to spare.
            let bound = (4 << 20) + kernelSocketBuffers
            // Unbounded reading would take the whole body into memory within milliseconds on loopback; 4 MiB past the
            // bound is enough to tell, and keeps the test short under ThreadSanitizer's slowdown.
            let size = bound + (4 << 20)
            let transport = NIOTransport()
            let url = server.url(path: "/bytes/big", query: ["size": "\(size)"])
            let response = try await transport.send(
                HTTPRequest(method: .get, url: url), options: .init(connectTimeout: .seconds(5)))
            #expect(response.head.status.code == 200)
            try await eventually("the server sent the first megabyte") { server.stats.bodyBytesSent >= 1 << 20 }
            try await Task.sleep(for: .milliseconds(300))
            #expect(server.stats.bodyBytesSent < bound, "bound \(bound)")
            var received = 0
            var matches = true
            let expected = TestServer.expectedBytes(name: "big", size: size)
            for try await chunk in response.body {
                guard received + chunk.count <= size else {
                    received += chunk.count
                    break
                }
                // memcmp: a byte-by-byte comparison of 40-odd MiB is slow in a debug build under the sanitizer.
                let equal = chunk.withUnsafeBytes { bytes in
                    expected.withUnsafeBytes { all in
                        bytes.isEmpty || memcmp(bytes.baseAddress!, all.baseAddress! + received, bytes.count) == 0
                    }
                }
                if !equal { matches = false }
                received += chunk.count
            }
            #expect(received == size)
            #expect(matches)
        }
    }

    @Test("closing a body just as its response ends returns: the connection is either back in the pool or closed")
    func closeAsResponseEnds() async throws {
        try await TestServer.withRunning { server in
            let transport = NIOTransport()
            // The body's end arrives on the event loop while `close()` runs on another thread; sizes around a few
            // reads' worth make the two meet now and then.
            for index in 0..<400 {
                let url = server.url(path: "/bytes/c\(index)", query: ["size": "\(16 << 10 + (index % 8) << 12)"])
                let response = try await transport.send(
                    HTTPRequest(method: .get, url: url), options: .init(connectTimeout: .seconds(5)))
                let closed = Locked(false)
                // Unstructured: a close that never returns must fail this test, not hang it.
                Task.detached {
                    await response.body.close()
                    closed.withLock { $0 = true }
                }
                try await eventually("close() returned (request \(index))", within: .seconds(5)) {
                    closed.withLock { $0 }
                }
                if !closed.withLock({ $0 }) { break }
            }
        }
    }

    @Test("a task cancelled before its request is written fails with CancellationError instead of waiting forever")
    func cancelledBeforeSend() async throws {
        try await TestServer.withRunning { server in
            let transport = NIOTransport()
            let url = server.url(path: "/bytes/never", query: ["size": "10"])
            let task = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return try await transport.send(
                    HTTPRequest(method: .get, url: url), options: .init(connectTimeout: .seconds(5)))
            }
            await #expect(throws: CancellationError.self) { try await task.value }
            #expect(server.stats.requests(toPath: "/bytes/never") == 0)
        }
    }

    @Test(
        "an authority without a host or with a bad port is an error naming it, before any connection",
        arguments: ["", ":80", "host:0", "host:65536", "host:http", "[::1", "[::1]x", "user@:8080"])
    func invalidAuthority(authority: String) async throws {
        let request = HTTPRequest(method: .get, scheme: "http", authority: authority, path: "/file")
        let error = try await #require(throws: NIOTransportError.self) {
            _ = try await NIOTransport().send(request, options: .init(connectTimeout: .seconds(1)))
        }
        #expect(error == .invalidAuthority(authority))
        #expect("\(error)".contains("'\(authority)'"))
    }

    @Test("user info in the authority is never sent, not even in Host")
    func validAuthorities() async throws {
        try await TestServer.withRunning { server in
            for authority in ["127.0.0.1:\(server.port)", "user:secret@127.0.0.1:\(server.port)"] {
                let request = HTTPRequest(
                    method: .get, scheme: "http", authority: authority, path: "/bytes/a?size=3")
                let response = try await NIOTransport().send(request, options: .init(connectTimeout: .seconds(5)))
                #expect(response.head.status.code == 200, "\(authority)")
            }
            let hosts = server.stats.requests.map(\.host)
            #expect(hosts == ["127.0.0.1:\(server.port)", "127.0.0.1:\(server.port)"])
        }
    }

    @Test("the request is written as the caller built it: method, target and query, Host, its fields; no body framing")
    func requestAsSent() async throws {
        try await TestServer.withRunning { server in
            let transport = NIOTransport()
            let authority = "127.0.0.1:\(server.port)"
            var get = HTTPRequest(method: .get, scheme: "http", authority: authority, path: "/bytes/g?size=5&x=%20y")
            get.headerFields[HTTPField.Name("X-Haul-Test")!] = "one, two"
            get.headerFields[.contentLength] = "12"  // no body is sent: a length would make the server wait for one
            get.headerFields[.transferEncoding] = "chunked"
            let post = HTTPRequest(method: .post, scheme: "http", authority: authority, path: "/bytes/p?size=7")
            for (request, size) in [(get, 5), (post, 7)] {
                let response = try await transport.send(request, options: .init(connectTimeout: .seconds(5)))
                var received = 0
                for try await chunk in response.body { received += chunk.count }
                #expect(response.head.status.code == 200 && received == size, "\(request.method)")
            }
            let recorded = server.stats.requests
            try #require(recorded.count == 2)
            #expect(recorded[0].method == "GET" && recorded[0].target == "/bytes/g?size=5&x=%20y")
            #expect(recorded[0].host == authority)
            #expect(recorded[0].value(forHeader: "x-haul-test") == "one, two")
            #expect(recorded[0].value(forHeader: "content-length") == nil)
            #expect(recorded[0].value(forHeader: "transfer-encoding") == nil)
            #expect(recorded[1].method == "POST" && recorded[1].value(forHeader: "content-length") == "0")
            #expect(server.stats.connectionsAccepted == 1)
        }
    }

    @Test("a server that closes each connection after its response (Connection: close, framed by length): all arrive")
    func connectionClose() async throws {
        // nginx does this once a connection has carried `keepalive_requests` (1,000 by default); the close
        // happens while the transport parses the response, which once crashed it (exclusive access violated).
        try await TestServer.withRunning { server in
            var fault = Fault()
            fault.closeConnection = true
            server.addRule(FaultRule(pathPrefix: "/bytes/", fault: fault))
            let dir = try TemporaryDirectory()
            let queue = DownloadQueue(
                downloader: Downloader(transport: NIOTransport(), configuration: testConfiguration(retries: 0)),
                configuration: .init(maxConcurrentDownloads: 4))
            try await fetchNumbered(40, named: "c", size: 3000, from: server, into: dir, through: queue)
            #expect(server.stats.requestCount == 40)
            #expect(server.stats.connectionsAccepted == 40)
            #expect(contentsOf(dir.file("c17")) == TestServer.expectedBytes(name: "c17", size: 3017))
        }
    }

    @Test("a response to HEAD has no body, and the next response on the connection is read whole")
    func headThenGet() async throws {
        try await TestServer.withRunning { server in
            let transport = NIOTransport()
            let url = server.url(path: "/bytes/h", query: ["size": "1000"])
            let head = try await transport.send(
                HTTPRequest(method: .head, url: url), options: .init(connectTimeout: .seconds(5)))
            var headBytes = 0
            for try await chunk in head.body { headBytes += chunk.count }
            #expect(head.head.status.code == 200 && head.head.headerFields[.contentLength] == "1000")
            #expect(headBytes == 0)
            let get = try await transport.send(
                HTTPRequest(method: .get, url: url), options: .init(connectTimeout: .seconds(5)))
            var body: [UInt8] = []
            for try await chunk in get.body { chunk.withUnsafeBytes { body += $0 } }
            #expect(body == TestServer.expectedBytes(name: "h", size: 1000))
            #expect(server.stats.connectionsAccepted == 1)
        }
    }

    @Test("a path that cannot go on a request line is an error naming it, before anything is sent")
    func invalidTarget() async throws {
        try await TestServer.withRunning { server in
            let request = HTTPRequest(
                method: .get, scheme: "http", authority: "127.0.0.1:\(server.port)", path: "/two words")
            let error = try await #require(throws: NIOTransportError.self) {
                _ = try await NIOTransport().send(request, options: .init(connectTimeout: .seconds(1)))
            }
            #expect(error == .invalidTarget("/two words"))
            #expect("\(error)".contains("'/two words'"))
            #expect(server.stats.connectionsAccepted == 0)
        }
    }

    @Test("downloads run on the transport's loops; not with a transport naming no executor, nor with powerLoss")
    func downloadsRunOnTheLoops() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let transport = NIOTransport(eventLoopGroup: group)
        let loops = group.makeIterator().map { $0 }
        for (url, speaks) in [
            ("ftp://example.invalid/f", false), ("httpx://example.invalid/f", false), ("htt://h/f", false),
            ("http://example.invalid/f", true), ("HTTP://example.invalid/f", true), ("https://example.invalid/f", true),
        ] {
            #expect((transport.preferredExecutor(for: try #require(URL(string: url))) != nil) == speaks, "\(url)")
        }

        try await TestServer.withRunning { server in
            // Where each download's task is when it publishes: on one of `group`'s loops, or not.
            let cases: [(any HTTPTransport, Downloader.Durability, onLoops: Bool)] = [
                (transport, .processCrash, true), (NoPreference(transport), .processCrash, false),
                (transport, .powerLoss, false),
            ]
            for (transport, durability, onLoops) in cases {
                let places = Locked<[Bool]>([])
                var configuration = testConfiguration()
                configuration.durability = durability
                configuration.hooks.beforePublish = {
                    let current = MultiThreadedEventLoopGroup.currentEventLoop
                    places.withLock { $0.append(loops.contains { $0 === current }) }
                }
                let dir = try TemporaryDirectory()
                let queue = DownloadQueue(
                    downloader: Downloader(transport: transport, configuration: configuration),
                    configuration: .init(maxConcurrentDownloads: 4))
                try await fetchNumbered(24, named: "f", size: 100, from: server, into: dir, through: queue)
                let seen = places.withLock { $0 }
                #expect(
                    seen.count == 24 && seen.allSatisfy { $0 == onLoops }, "\(durability), on the loops: \(onLoops)")
                #expect(contentsOf(dir.file("f9")) == TestServer.expectedBytes(name: "f9", size: 109))
            }
        }
        transport.closeIdleConnections()
        try await group.shutdownGracefully()
    }

    @Test("other schemes and https asking for HTTP/2 go to the fallback; without one they fail with a clear error")
    func fallback() async throws {
        let other = try #require(URL(string: "ftp://example.invalid/file"))
        let secure = try #require(URL(string: "https://example.invalid/file"))
        let http2 = TransportOptions(connectTimeout: .seconds(1), httpVersion: .http2)
        let alone = NIOTransport()
        for (url, options) in [(other, TransportOptions(connectTimeout: .seconds(1))), (secure, http2)] {
            let error = try await #require(throws: NIOTransportError.self) {
                _ = try await alone.send(HTTPRequest(method: .get, url: url), options: options)
            }
            #expect(error == .unsupportedScheme(url.scheme ?? ""))
            #expect("\(error)".contains("'\(url.scheme ?? "")'") && "\(error)".contains("fallback"))
            #expect(!alone.canInterrupt(HTTPRequest(method: .get, url: url), options: options))
        }

        let recorder = RecordingTransport()
        let routed = NIOTransport(fallback: recorder)
        for (url, options) in [(other, TransportOptions(connectTimeout: .seconds(1))), (secure, http2)] {
            let response = try await routed.send(HTTPRequest(method: .get, url: url), options: options)
            #expect(response.head.status.code == 204)
        }
        #expect(recorder.authorities == ["example.invalid", "example.invalid"])
    }
}

/// Forwards to another transport but states no preferred executor.
struct NoPreference: HTTPTransport {
    let base: any HTTPTransport
    init(_ base: any HTTPTransport) { self.base = base }

    func send(_ request: HTTPRequest, options: TransportOptions) async throws -> TransportResponse {
        try await base.send(request, options: options)
    }
}

/// A transport that answers 204 to everything and records where requests went: it stands in for the fallback
/// (AsyncHTTPClient) to show which requests NIOTransport hands over, not for HTTP.
final class RecordingTransport: HTTPTransport {
    private let seen = Locked<[String]>([])
    var authorities: [String] { seen.withLock { $0 } }

    func send(_ request: HTTPRequest, options: TransportOptions) async throws -> TransportResponse {
        seen.withLock { $0.append(request.authority ?? "") }
        return TransportResponse(head: HTTPResponse(status: .noContent), body: .empty)
    }
}

/// The most the client's and the server's kernels may buffer on one loopback TCP connection: the largest receive
/// and send buffers they may grow to (Linux: the last fields of `tcp_rmem` and `tcp_wmem`, 32 MiB and 4 MiB on
/// some machines), or 10 MiB where they cannot be read.
var kernelSocketBuffers: Int {
    if let receive = largestTCPBuffer("tcp_rmem"), let send = largestTCPBuffer("tcp_wmem") { return receive + send }
    return 10 << 20
}

/// The most a server's kernel may buffer for sending on one connection (Linux: the last field of `tcp_wmem`), or
/// 4 MiB where it cannot be read.
var serverSendBuffer: Int { largestTCPBuffer("tcp_wmem") ?? 4 << 20 }

/// The largest size the kernel lets a TCP socket buffer grow to: the last field of `/proc/sys/net/ipv4/NAME`.
private func largestTCPBuffer(_ name: String) -> Int? {
    #if os(Linux)
    (try? String(contentsOfFile: "/proc/sys/net/ipv4/" + name, encoding: .utf8))?.split(whereSeparator: \.isWhitespace)
        .last.flatMap { Int($0) }
    #else
    nil
    #endif
}
