import Foundation
import Haul
import HaulTestServer
import HaulTestSupport
import Testing

/// Downloads over HTTP/2 from a real h2 server (nginx, started by the test), on each transport that speaks it when
/// asked (`NIOTransport` through its fallback): many files over one connection, a stream reset mid-body, GOAWAY in
/// the middle of a batch; HTTP/1.1 when asked, and by default on `NIOTransport`.
@Suite(
    "HTTP/2", .timeLimit(.minutes(2)),
    .enabled(if: TestPlatform.isLinux, "runs Debian's nginx as the HTTP/2 server, which scripts/test installs"))
struct HTTP2Tests {
    static let kinds: [TransportKind] = [.asyncHTTPClientOverTLS, .nioOverTLS]

    static let files: [String: [UInt8]] = Dictionary(
        uniqueKeysWithValues: (0..<30).map {
            ("f\($0).bin", TestServer.expectedBytes(name: "f\($0).bin", size: 20_000 + $0))
        })

    /// The kind's test configuration, asking for HTTP/2.
    static func http2(_ kind: TransportKind, clock: RecordingClock = RecordingClock()) -> Downloader.Configuration {
        var configuration = kind.configuration(clock: clock)
        configuration.httpVersion = .http2
        return configuration
    }

    func download(_ nginx: Nginx, kind: TransportKind, _ configuration: Downloader.Configuration? = nil, width: Int = 4)
        async throws -> TemporaryDirectory
    {
        let dir = try TemporaryDirectory()
        let downloader = Downloader(
            transport: kind.makeTransport(), configuration: configuration ?? Self.http2(kind))
        let names = Self.files.keys.sorted()
        // The first file alone: the connection it opens is the one the batch can share. (Requests that start while
        // no connection is up yet may each open one before the client learns the server speaks HTTP/2.)
        _ = try await downloader.download(DownloadRequest(url: nginx.url(names[0]), destination: .directory(dir.url)))
        let queue = DownloadQueue(downloader: downloader, configuration: .init(maxConcurrentDownloads: width))
        let handles = queue.add(
            names.dropFirst().map { DownloadRequest(url: nginx.url($0), destination: .directory(dir.url)) })
        for handle in handles { _ = try await handle.result }
        for (name, bytes) in Self.files { #expect(contentsOf(dir.file(name)) == bytes, "\(name)") }
        return dir
    }

    @Test("a batch goes over HTTP/2, many files on one connection", arguments: kinds)
    func batchOverOneConnection(kind: TransportKind) async throws {
        try await Nginx.withRunning(files: Self.files) { nginx in
            _ = try await download(nginx, kind: kind)
            let log = nginx.accessLog
            #expect(log.count == Self.files.count)
            #expect(log.allSatisfy { $0.protocol == "HTTP/2.0" }, "\(log.map(\.protocol))")
            #expect(Set(log.map(\.connection)).count == 1, "connections: \(Set(log.map(\.connection)))")
        }
    }

    @Test("GOAWAY in the middle of a batch: the rest goes over new connections, every file whole", arguments: kinds)
    func goAwayMidBatch(kind: TransportKind) async throws {
        // nginx sends GOAWAY once a connection has served this many requests.
        try await Nginx.withRunning(files: Self.files, extraDirectives: "keepalive_requests 7;") { nginx in
            _ = try await download(nginx, kind: kind)
            let log = nginx.accessLog
            #expect(log.allSatisfy { $0.protocol == "HTTP/2.0" })
            #expect(Set(log.map(\.connection)).count >= 4, "connections: \(Set(log.map(\.connection)))")
            #expect(log.filter { $0.status == 200 }.count == Self.files.count)
        }
    }

    @Test("a stream reset mid-body is retried and resumed with Range", arguments: kinds)
    func resetStream(kind: TransportKind) async throws {
        try await TestServer.withRunning { upstream in
            // nginx proxies /cut/ to a server that closes after 100,000 bytes once: nginx resets that h2 stream.
            let proxy = "location /cut/ { proxy_pass http://127.0.0.1:\(upstream.port)/bytes/; proxy_buffering off; }"
            try await Nginx.withRunning(files: [:], extraDirectives: proxy) { nginx in
                let dir = try TemporaryDirectory()
                let clock = RecordingClock()
                let downloader = Downloader(
                    transport: kind.makeTransport(), configuration: Self.http2(kind, clock: clock))
                let url = try #require(
                    URL(string: "https://127.0.0.1:\(nginx.port)/cut/big.bin?size=400000&cutAfter=100000&cutTimes=1"))
                let result = try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
                #expect(
                    { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "big.bin", size: 400_000) }(),
                    "not the server's bytes")
                #expect(result.attempts == 2 && clock.recorded.count == 1)
                let ranges = upstream.stats.requests.map { $0.value(forHeader: "range") }
                #expect(ranges.count == 2 && ranges[0] == nil && ranges[1]?.hasPrefix("bytes=") == true, "\(ranges)")
                #expect(nginx.accessLog.allSatisfy { $0.protocol == "HTTP/2.0" })
            }
        }
    }

    @Test("HTTPVersionPreference.http1_1 asks for HTTP/1.1 where the server offers HTTP/2", arguments: kinds)
    func http1WhenAsked(kind: TransportKind) async throws {
        try await Nginx.withRunning(files: Self.files) { nginx in
            var configuration = kind.configuration()
            configuration.httpVersion = .http1_1
            _ = try await download(nginx, kind: kind, configuration)
            let log = nginx.accessLog
            #expect(
                log.count == Self.files.count && log.allSatisfy { $0.protocol == "HTTP/1.1" }, "\(log.map(\.protocol))")
        }
    }

    @Test("NIOTransport speaks HTTP/1.1 over TLS by default: a batch on at most as many connections as run at once")
    func nioDefaultsToHTTP1() async throws {
        try await Nginx.withRunning(files: Self.files) { nginx in
            _ = try await download(nginx, kind: .nioOverTLS, TransportKind.nioOverTLS.configuration(), width: 4)
            let log = nginx.accessLog
            #expect(
                log.count == Self.files.count && log.allSatisfy { $0.protocol == "HTTP/1.1" }, "\(log.map(\.protocol))")
            #expect((1...4).contains(Set(log.map(\.connection)).count), "connections: \(Set(log.map(\.connection)))")
        }
    }
}
