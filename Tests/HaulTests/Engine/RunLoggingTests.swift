import Foundation
import Haul
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Logging
import Testing

/// What a download logs: each line about one download names its URL (the run's logger carries it as metadata).
@Suite("A download's log lines", .timeLimit(.minutes(1)))
struct RunLoggingTests {
    /// Keeps each line's message, with the logger's own metadata merged under the line's.
    struct Capture: LogHandler {
        let lines: Locked<[(message: String, metadata: Logger.Metadata)]>
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let merged = metadata.merging(event.metadata ?? [:]) { _, line in line }
            lines.withLock { $0.append(("\(event.message)", merged)) }
        }
    }

    @Test("at debug, every line of a download names its URL, without the password it was given with")
    func linesNameTheURL() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let lines = Locked<[(message: String, metadata: Logger.Metadata)]>([])
            var configuration = TransportKind.nio.configuration()
            configuration.logger = Logger(label: "haul") { _ in
                Capture(lines: lines, logLevel: .debug)
            }
            let downloader = Downloader(transport: TransportKind.nio.makeTransport(), configuration: configuration)
            var components = try #require(
                URLComponents(
                    url: server.url(path: "/bytes/logged.bin", query: ["size": "100"]), resolvingAgainstBaseURL: false))
            components.user = "alice"
            components.password = "log-secret-1"
            let url = try #require(components.url)
            _ = try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            let kept = lines.withLock { $0 }
            #expect(kept.map(\.message).contains("published"), "\(kept.map(\.message))")
            for line in kept {
                let named = line.metadata["url"].map { "\($0)" } ?? ""
                #expect(named.hasSuffix("/bytes/logged.bin?size=100"), "\(line.message): \(line.metadata)")
            }
            #expect(!"\(kept)".contains("log-secret-1"))
        }
    }
}
