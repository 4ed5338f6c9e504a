import Foundation
import Haul
import HaulNIO
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// ``Downloader/Configuration/containingDirectory``: no file is written, or published, through a symbolic link planted
/// under the directory downloads stay inside.
@Suite("Containment: no file through a link under the containing directory", .timeLimit(.minutes(2)))
struct ContainmentTests {
    /// ROOT/D, the containing directory (with `subdirectory` in it), and ROOT/outside, where a link leads.
    static func directories(in root: TemporaryDirectory, making subdirectory: String = "") throws -> (URL, URL) {
        let base = root.url.appendingPathComponent("D")
        let outside = root.url.appendingPathComponent("outside")
        for directory in [base.appendingPathComponent(subdirectory), outside] {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        }
        return (base, outside)
    }

    @Test("a directory replaced by a link while its file downloads: refused at publishing, nothing published outside")
    func linkPlantedMidDownload() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let (base, outside) = try Self.directories(in: root, making: "sub")
            var configuration = testConfiguration(retries: 0)
            configuration.containingDirectory = base
            let downloader = Downloader(transport: NIOTransport(), configuration: configuration)
            let size = 300_000
            let url = server.url(
                path: "/bytes/f", query: ["size": "\(size)", "stallAfter": "200000", "stall": "gate:s"])
            let destination = base.appendingPathComponent("sub/f")
            let download = Task {
                try await downloader.download(DownloadRequest(url: url, destination: .file(destination)))
            }
            let partial = base.appendingPathComponent("sub/.f.haul-partial").path
            try await eventually("the bytes before the stall written") {
                let size = (try? FileManager.default.attributesOfItem(atPath: partial)[.size] as? Int) ?? 0
                return size >= 200_000
            }
            // `sub` goes aside with the partial in it; a link out of the destination takes its name.
            try FileManager.default.moveItem(
                at: base.appendingPathComponent("sub"), to: base.appendingPathComponent("old"))
            #expect(symlink(outside.path, base.appendingPathComponent("sub").path) == 0)
            server.openGate("s")
            let error = await #expect(throws: DownloadError.self) { try await download.value }
            #expect(error?.code == .unsafePath, "\(String(describing: error))")
            #expect(
                error?.message.contains(base.appendingPathComponent("sub").path) == true, "\(String(describing: error))"
            )
            #expect(try FileManager.default.contentsOfDirectory(atPath: outside.path).isEmpty)
        }
    }

    @Test("a link there before the download starts: refused before any request; without containment it is followed")
    func linkBeforeStart() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            let (base, outside) = try Self.directories(in: root)
            #expect(symlink(outside.path, base.appendingPathComponent("sub").path) == 0)
            let request = DownloadRequest(
                url: server.url(path: "/bytes/g", query: ["size": "1000"]),
                destination: .file(base.appendingPathComponent("sub/g")))
            var configuration = testConfiguration(retries: 0)
            configuration.containingDirectory = base
            let error = await #expect(throws: DownloadError.self) {
                try await Downloader(transport: NIOTransport(), configuration: configuration).download(request)
            }
            #expect(error?.code == .unsafePath)
            #expect(server.stats.requests.isEmpty)
            // The same request with no containing directory: the link is the caller's business.
            configuration.containingDirectory = nil
            _ = try await Downloader(transport: NIOTransport(), configuration: configuration).download(request)
            #expect(try FileManager.default.contentsOfDirectory(atPath: outside.path) == ["g"])
        }
    }
}
