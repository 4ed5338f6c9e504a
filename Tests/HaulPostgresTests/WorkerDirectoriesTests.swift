import Foundation
import Haul
import HaulNIO
import HaulTestServer
import HaulTestSupport
import PostgresNIO
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

/// A worker's credentials go to each claimed URL's origin, never into the database.
@Suite(
    "SharedQueueWorker: credentials", .timeLimit(.minutes(2)), .serialized,
    .enabled(if: TestPlatform.isLinux, "runs Debian's PostgreSQL 15, which scripts/test installs"))
struct WorkerCredentialsTests {
    @Test("with credentials the protected file arrives; without, it fails with 401; the database holds no secret")
    func credentials() async throws {
        try await withFixtures { server, database, directory in
            // "Basic " + base64("ann:secret")
            let protected = server.url(
                path: "/bytes/p", query: ["size": "500", "requireAuth": "Basic YW5uOnNlY3JldA=="])
            try await SharedQueue.withQueue(database) { queue in
                try await queue.enqueue([try SharedDownload(request: request(protected), path: "without")])
                let refused = await SharedQueueWorker(
                    queue: queue, transport: NIOTransport(),
                    configuration: .init(directory: directory.url, exitsWhenEmpty: true, retryPolicy: .none)
                ).run()
                #expect(refused.failed == 1 && refused.done == 0)
                #expect(try await queue.status().failures.first?.reason.contains("401") == true)
                try await queue.enqueue([try SharedDownload(request: request(protected), path: "with")])
                var configuration = SharedQueueWorker.Configuration(
                    directory: directory.url, exitsWhenEmpty: true, retryPolicy: .none)
                configuration.credentials = Credentials(user: "ann", password: "secret")
                let report = await SharedQueueWorker(
                    queue: queue, transport: NIOTransport(), configuration: configuration
                ).run()
                #expect(report.done == 1)
                let dump = try await queue.rows(
                    "SELECT coalesce(string_agg(d::text, ' '), '') FROM haul_download d", "reading every row",
                    as: String.self)
                #expect(dump.first?.contains("secret") == false)
            }
            #expect(contentsOf(directory.file("with")) == TestServer.expectedBytes(name: "p", size: 500))
        }
    }
}
