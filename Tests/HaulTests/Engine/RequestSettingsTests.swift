import Foundation
import Haul
import HaulTestServer
import HaulTestSupport
import Testing

/// A request's own settings in place of its downloader's (what `haul daemon` sets per download from aria2's options),
/// on every transport against a real loopback server.
@Suite("DownloadRequest: settings of its own", .timeLimit(.minutes(2)))
struct RequestSettingsTests {
    @Test("a request's retry policy replaces the downloader's", arguments: TransportKind.allCases)
    func retryPolicy(transport: TransportKind) async throws {
        try await TestServer.withRunning(transport.server()) { server in
            let dir = try TemporaryDirectory()
            let clock = RecordingClock()
            let downloader = Downloader(
                transport: transport.makeTransport(), configuration: transport.configuration(clock: clock, retries: 3))
            var request = DownloadRequest(
                url: server.url(path: "/bytes/r", query: ["status": "503"]), destination: .directory(dir.url))
            request.retryPolicy = RetryPolicy(maxRetries: 1, initialDelay: .seconds(9), jitter: .none)
            await #expect(throws: DownloadError.self) { try await downloader.download(request) }
            #expect(server.stats.requests.count == 2)
            #expect(clock.recorded == [.seconds(9)])
        }
    }

    @Test("a request's stall timeout replaces the downloader's", arguments: TransportKind.allCases)
    func stallTimeout(transport: TransportKind) async throws {
        try await TestServer.withRunning(transport.server()) { server in
            let dir = try TemporaryDirectory()
            var configuration = transport.configuration(retries: 0)
            configuration.stallTimeout = .seconds(3600)
            let downloader = Downloader(transport: transport.makeTransport(), configuration: configuration)
            var request = DownloadRequest(
                url: server.url(path: "/bytes/s", query: ["size": "100000", "stallAfter": "1000", "stall": "forever"]),
                destination: .directory(dir.url))
            request.stallTimeout = .seconds(1)
            await #expect {
                try await downloader.download(request)
            } throws: { error in
                (error as? DownloadError)?.code == .stalled
            }
            #expect(dir.contents().filter { !$0.hasPrefix(".") }.isEmpty)
        }
    }

    @Test(
        "a request's TLS settings replace the downloader's: trusted for it alone",
        arguments: TransportKind.allCases.filter(\.usesTLS))
    func tls(transport: TransportKind) async throws {
        try await TestServer.withRunning(transport.server()) { server in
            let dir = try TemporaryDirectory()
            var configuration = transport.configuration(retries: 0)
            configuration.tls = .default  // the test CA is not trusted
            let downloader = Downloader(transport: transport.makeTransport(), configuration: configuration)
            let untrusted = DownloadRequest(url: server.url(path: "/bytes/u"), destination: .directory(dir.url))
            await #expect(throws: DownloadError.self) { try await downloader.download(untrusted) }
            var trusted = DownloadRequest(
                url: server.url(path: "/bytes/t", query: ["size": "1000"]), destination: .directory(dir.url))
            trusted.tls = TestTLS.settings
            let result = try await downloader.download(trusted)
            let same = contentsOf(result.fileURL) == TestServer.expectedBytes(name: "t", size: 1000)
            #expect(same)
        }
    }

    @Test("a request's proxy replaces the downloader's, and none means none", arguments: TransportKind.allCases)
    func proxy(transport: TransportKind) async throws {
        try await TestServer.withRunning(transport.server()) { server in
            let dir = try TemporaryDirectory()
            var configuration = transport.configuration(retries: 0)
            // Nothing listens there.
            let closed = try freeLoopbackPort()
            configuration.proxy = .all(Proxy(kind: .http, host: "127.0.0.1", port: closed))
            let downloader = Downloader(transport: transport.makeTransport(), configuration: configuration)
            let proxied = DownloadRequest(url: server.url(path: "/bytes/p"), destination: .directory(dir.url))
            await #expect(throws: DownloadError.self) { try await downloader.download(proxied) }
            var direct = DownloadRequest(url: server.url(path: "/bytes/d"), destination: .directory(dir.url))
            direct.proxy = ProxyConfiguration.none
            _ = try await downloader.download(direct)
            #expect(server.stats.requests.map(\.path) == ["/bytes/d"])
        }
    }

    @Test("a request's choice of the file's time replaces the downloader's", arguments: TransportKind.allCases)
    func remoteTime(transport: TransportKind) async throws {
        try await TestServer.withRunning(transport.server()) { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(
                transport: transport.makeTransport(), configuration: transport.configuration(retries: 0))
            var request = DownloadRequest(url: server.url(path: "/bytes/m"), destination: .directory(dir.url))
            request.usesRemoteModificationTime = false
            let result = try await downloader.download(request)
            let modified = try FileManager.default.attributesOfItem(atPath: result.fileURL.path)[.modificationDate]
            #expect(-((modified as? Date) ?? .distantPast).timeIntervalSinceNow < 3600)
        }
    }
}
