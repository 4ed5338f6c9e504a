import Foundation
import Haul
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// How a verified file reaches its destination: never visible before it is complete, never replacing what
/// appeared meanwhile, readable by others once there.
@Suite("Publishing", .timeLimit(.minutes(1)))
struct PublishingTests {
    /// What the destination directory held when each download was about to publish.
    final class Snapshots: Sendable {
        private let taken = Locked<[[String]]>([])
        var all: [[String]] { taken.withLock { $0 } }
        func take(_ dir: TemporaryDirectory) { taken.withLock { $0.append(dir.contents()) } }
    }

    @Test(
        "a small body is written under no name at all (Linux), a large one under its partial name",
        arguments: TransportKind.allCases)
    func partialNames(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let snapshots = Snapshots()
            var configuration = kind.configuration()
            configuration.hooks.beforePublish = { snapshots.take(dir) }
            let downloader = Downloader(transport: kind.makeTransport(), configuration: configuration)
            for (name, size) in [("small", 4096), ("large", 300_000)] {
                let url = server.url(path: "/bytes/\(name)", query: ["size": "\(size)"])
                let result = try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
                #expect(result.size == Int64(size))
                let same = contentsOf(dir.file(name)) == TestServer.expectedBytes(name: name, size: size)
                #expect(same, "\(name) has the wrong bytes")
                let mode = try FileManager.default.attributesOfItem(atPath: dir.file(name).path)[.posixPermissions]
                #expect(mode as? Int == 0o644)
            }
            #if os(Linux)
            let small: [String] = []  // O_TMPFILE: nothing named until linkat gives it its final name
            #else
            let small = [".small.haul-partial"]
            #endif
            #expect(snapshots.all == [small, [".large.haul-partial", "small"]])
            #expect(dir.contents() == ["large", "small"])
        }
    }

    @Test(
        "a file that appears at the destination while downloading is left alone, small or large",
        arguments: TransportKind.allCases)
    func appearedMeanwhile(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            for (name, size) in [("small", 4096), ("large", 300_000)] {
                var configuration = kind.configuration()
                configuration.hooks.beforePublish = { try? Data("theirs".utf8).write(to: dir.file(name)) }
                let downloader = Downloader(transport: kind.makeTransport(), configuration: configuration)
                let url = server.url(path: "/bytes/\(name)", query: ["size": "\(size)"])
                let error = try await #require(throws: DownloadError.self) {
                    try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
                }
                #expect(error.code == .destinationExists)
                #expect(contentsOf(dir.file(name)) == Array("theirs".utf8))
            }
            #expect(dir.contents() == ["large", "small"], "a partial was left behind")
        }
    }
}
