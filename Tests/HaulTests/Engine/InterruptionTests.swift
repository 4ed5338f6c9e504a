import Foundation
import HTTPTypes
import Haul
import HaulNIO
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// Stalls on an ``InterruptibleHTTPTransport``: the engine interrupts the exchange instead of cancelling a task,
/// and goes on in a task of its own from a redirect on to a request the transport cannot interrupt.
@Suite("Interruption", .timeLimit(.minutes(1)))
struct InterruptionTests {
    @Test("an interruption runs the handler once, and a handler registered after it at once")
    func handlerOnce() {
        let interruption = TransferInterruption()
        let calls = Locked(0)
        interruption.onInterrupt { calls.withLock { $0 += 1 } }
        #expect(!interruption.isInterrupted)
        interruption.interrupt()
        interruption.interrupt()
        #expect(interruption.isInterrupted)
        #expect(calls.withLock { $0 } == 1)
        interruption.onInterrupt { calls.withLock { $0 += 10 } }
        #expect(calls.withLock { $0 } == 11)
    }

    @Test("a redirect to a request the transport cannot interrupt: still watched, the stall still ends it")
    func redirectToUninterruptible() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            var configuration = testConfiguration(retries: 0)
            // Long enough that the redirect's own exchange never counts as a stall, even under ThreadSanitizer on a
            // loaded machine (300 ms did once there): only the silent second request may stall.
            configuration.stallTimeout = .seconds(4)
            let transport = PartlyInterruptible(refusing: "/bytes/silent")
            let downloader = Downloader(transport: transport, configuration: configuration)
            let silent = server.url(path: "/bytes/silent", query: ["size": "1000", "headOnly": "1"])
            let url = server.url(path: "/bytes/start", query: ["size": "10", "redirectTo": silent.absoluteString])
            let error = try await #require(throws: DownloadError.self) {
                try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            }
            #expect(error.code == .stalled)
            #expect(transport.sent == ["/bytes/start: interruptible", "/bytes/silent: plain"])
            #expect(dir.contents().isEmpty)
        }
    }

    @Test("an interruptible transport's downloads are sent the interruptible way, and complete")
    func interruptiblePath() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let transport = PartlyInterruptible(refusing: "/none")
            let downloader = Downloader(transport: transport, configuration: testConfiguration())
            let url = server.url(path: "/bytes/small", query: ["size": "5000"])
            let result = try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            #expect(contentsOf(result.fileURL) == TestServer.expectedBytes(name: "small", size: 5000))
            #expect(transport.sent == ["/bytes/small: interruptible"])
        }
    }
}

/// NIOTransport that refuses interruption for paths starting with a prefix, and notes how each request was sent.
final class PartlyInterruptible: InterruptibleHTTPTransport {
    private let inner = NIOTransport()
    private let refused: String
    private let log = Locked<[String]>([])
    var sent: [String] { log.withLock { $0 } }

    init(refusing prefix: String) { refused = prefix }

    func canInterrupt(_ request: HTTPRequest, options: TransportOptions) -> Bool {
        !(request.path ?? "").hasPrefix(refused)
    }

    func send(_ request: HTTPRequest, options: TransportOptions) async throws -> TransportResponse {
        note(request, "plain")
        return try await inner.send(request, options: options)
    }

    func send(
        _ request: HTTPRequest, options: TransportOptions, interruption: TransferInterruption
    ) async throws -> TransportResponse {
        note(request, "interruptible")
        return try await inner.send(request, options: options, interruption: interruption)
    }

    private func note(_ request: HTTPRequest, _ way: String) {
        let path = (request.path ?? "").split(separator: "?").first.map(String.init) ?? ""
        log.withLock { $0.append("\(path): \(way)") }
    }
}
