import Foundation
import Haul
import HaulNIO
import HaulTestServer
import HaulTestSupport
import Testing

@testable import HaulPostgres

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A worker makes the directories of its claims' paths without following a link planted in them.
@Suite(
    "SharedQueueWorker: directories under its own", .timeLimit(.minutes(2)), .serialized,
    .enabled(if: TestPlatform.isLinux, "runs Debian's PostgreSQL 15, which scripts/test installs"))
struct WorkerDirectoriesTests {
    @Test("a path through a symbolic link fails for good, naming it; a nested path is made; nothing lands outside")
    func linkRefused() async throws {
        try await withFixtures { server, database, directory in
            let outside = try TemporaryDirectory()
            #expect(symlink(outside.url.path, directory.url.path + "/link") == 0)
            try await SharedQueue.withQueue(database) { queue in
                try await queue.enqueue([
                    try SharedDownload(request: request(server.url(path: "/bytes/a")), path: "link/a"),
                    try SharedDownload(
                        request: request(server.url(path: "/bytes/b", query: ["size": "1000"])), path: "deep/er/b"),
                ])
                let report = await SharedQueueWorker(
                    queue: queue, transport: NIOTransport(),
                    configuration: .init(directory: directory.url, maxConcurrent: 2, exitsWhenEmpty: true)
                ).run()
                #expect(report.done == 1 && report.failed == 1)
                let failures = try await queue.status().failures
                #expect(failures.map(\.path) == ["link/a"])
                let reason = failures.first?.reason ?? ""
                #expect(reason.contains("'\(directory.url.path)/link' is not a directory"), "\(reason)")
            }
            #expect(outside.contents().isEmpty)
            #expect(contentsOf(directory.file("deep/er/b")) == TestServer.expectedBytes(name: "b", size: 1000))
        }
    }
}
