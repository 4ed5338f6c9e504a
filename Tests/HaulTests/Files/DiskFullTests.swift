import Foundation
import Haul
import HaulTestServer
import HaulTestSupport
import Testing

/// A full disk fails that download with a clear error; nothing is left and the process lives on.
@Suite("Disk full", .timeLimit(.minutes(1)))
struct DiskFullTests {
    /// Mounting a small tmpfs needs root (CI and the dev machines run as root).
    static let canMount = getuid() == 0

    @Test(
        "a full tmpfs: a clear file-system error, no partial, no destination",
        .enabled(if: canMount, "needs root to mount a small tmpfs"), arguments: TransportKind.allCases)
    func fullDisk(kind: TransportKind) async throws {
        let mountPoint = try TemporaryDirectory()
        try run("/bin/mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", mountPoint.path)
        defer { try? run("/bin/umount", "-l", mountPoint.path) }
        try await TestServer.withRunning(kind.server()) { server in
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration())
            let url = server.url(path: "/bytes/huge.bin", query: ["size": "1000000"])
            let error = try await #require(throws: DownloadError.self) {
                try await downloader.download(DownloadRequest(url: url, destination: .directory(mountPoint.url)))
            }
            #expect(error.code == .fileSystem)
            #expect(error.message.contains("No space left on device"))
            #expect(mountPoint.contents().isEmpty)
            // The process lives on and the same downloader still works elsewhere.
            let elsewhere = try TemporaryDirectory()
            let small = server.url(path: "/bytes/small", query: ["size": "1000"])
            _ = try await downloader.download(DownloadRequest(url: small, destination: .directory(elsewhere.url)))
            #expect(elsewhere.contents() == ["small"])
        }
    }

    private func run(_ executable: String, _ arguments: String...) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        try process.run()
        process.waitUntilExit()
        if process.terminationStatus != 0 {
            throw CocoaError(
                .executableLoad, userInfo: [NSLocalizedDescriptionKey: "\(executable) \(arguments) failed"])
        }
    }
}
