import Foundation
import HaulTestServer
import Testing

@Suite(.timeLimit(.minutes(1)))
struct DirectoryServingTests {
    /// A root with a file, a nested file, a symlink leaving the root and a secret next to the root.
    static func makeRoot() throws -> (root: URL, cleanup: () -> Void) {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("haul-root-\(UUID().uuidString)")
        let root = base.appendingPathComponent("root")
        try FileManager.default.createDirectory(
            at: root.appendingPathComponent("sub dir"), withIntermediateDirectories: true)
        try Data(TestServer.expectedBytes(name: "file", size: 300_000)).write(
            to: root.appendingPathComponent("big.bin"))
        try Data("nested".utf8).write(to: root.appendingPathComponent("sub dir/n.txt"))
        try Data("secret".utf8).write(to: base.appendingPathComponent("secret.txt"))
        try FileManager.default.createSymbolicLink(
            atPath: root.appendingPathComponent("escape").path,
            withDestinationPath: base.appendingPathComponent("secret.txt").path)
        try FileManager.default.createSymbolicLink(
            atPath: root.appendingPathComponent("inside").path,
            withDestinationPath: root.appendingPathComponent("big.bin").path)
        return (root, { try? FileManager.default.removeItem(at: base) })
    }

    @Test func servesFilesWithRangesAndValidators() async throws {
        let (root, cleanup) = try Self.makeRoot()
        defer { cleanup() }
        try await TestServer.withRunning(.init(root: root)) { server in
            let full = try await RawHTTPClient.get("/files/big.bin", port: server.port)
            #expect(full.status == 200)
            #expect(full.body == TestServer.expectedBytes(name: "file", size: 300_000))
            #expect(full.header("ETag") != nil && full.header("Last-Modified") != nil)
            let partial = try await RawHTTPClient.get(
                "/files/big.bin", port: server.port,
                headers: [("Range", "bytes=-1000"), ("If-Range", full.header("ETag")!)])
            #expect(partial.status == 206)
            #expect(partial.body == TestServer.expectedBytes(name: "file", size: 300_000, range: 299_000..<300_000))
            let nested = try await RawHTTPClient.get("/files/sub%20dir/n.txt", port: server.port)
            #expect(nested.body == Array("nested".utf8))
            let throughLink = try await RawHTTPClient.get("/files/inside", port: server.port)
            #expect(throughLink.status == 200)
            #expect(server.stats.bodyBytesByPath["/files/big.bin"] == 301_000)
        }
    }

    @Test func fileBodiesHonourFaults() async throws {
        let (root, cleanup) = try Self.makeRoot()
        defer { cleanup() }
        try await TestServer.withRunning(.init(root: root)) { server in
            let cut = try await RawHTTPClient.get("/files/big.bin?cutAfter=70000", port: server.port)
            #expect(cut.body == TestServer.expectedBytes(name: "file", size: 300_000, range: 0..<70000))
            #expect(cut.connectionClosed)
            let stalled = try await RawHTTPClient.get(
                "/files/big.bin?stallAfter=1000&stall=10&gzip=1", port: server.port)
            #expect(try GzipTests.gunzipStored(stalled.body) == TestServer.expectedBytes(name: "file", size: 300_000))
        }
    }

    @Test(arguments: [
        "/files/../secret.txt", "/files/%2e%2e/secret.txt", "/files/sub%20dir/../../secret.txt", "/files/escape",
        "/files/a%00b", "/files/..%2fsecret.txt",
    ])
    func refusesPathsLeavingTheRoot(target: String) async throws {
        let (root, cleanup) = try Self.makeRoot()
        defer { cleanup() }
        try await TestServer.withRunning(.init(root: root)) { server in
            let response = try await RawHTTPClient.get(target, port: server.port)
            #expect(response.status == 403 || response.status == 404 || response.status == 400)
            #expect(response.body != Array("secret".utf8))
        }
    }

    /// A directory served as it is holds what its owner never meant to publish under a dot name: Haul's own state
    /// (`.haul`, with a daemon's `rpc-secret`), `.git`, `.ssh`, `.env`. None is served, by name or through a link.
    @Test func dotNamesAreNotServed() async throws {
        let (root, cleanup) = try Self.makeRoot()
        defer { cleanup() }
        let hidden = root.appendingPathComponent(".haul")
        try FileManager.default.createDirectory(at: hidden, withIntermediateDirectories: true)
        try Data("secret".utf8).write(to: hidden.appendingPathComponent("rpc-secret"))
        try Data("secret".utf8).write(to: root.appendingPathComponent(".env"))
        try Data("secret".utf8).write(to: root.appendingPathComponent("sub dir/.netrc"))
        try FileManager.default.createSymbolicLink(
            atPath: root.appendingPathComponent("plain").path, withDestinationPath: hidden.path + "/rpc-secret")
        try await TestServer.withRunning(.init(root: root)) { server in
            for target in [
                "/files/.haul/rpc-secret", "/files/.env", "/files/sub%20dir/.netrc", "/files/%2eenv", "/files/plain",
            ] {
                let response = try await RawHTTPClient.get(target, port: server.port)
                #expect(response.status == 404, "\(target)")
                #expect(response.body != Array("secret".utf8), "\(target)")
            }
            #expect(try await RawHTTPClient.get("/files/sub%20dir/n.txt", port: server.port).status == 200)
        }
    }

    @Test func directoriesAreNotServed() async throws {
        let (root, cleanup) = try Self.makeRoot()
        defer { cleanup() }
        try await TestServer.withRunning(.init(root: root)) { server in
            let response = try await RawHTTPClient.get("/files/sub%20dir", port: server.port)
            #expect(response.status == 404)
        }
    }

    @Test func missingRootFailsToStartWithAClearError() async throws {
        let server = TestServer(configuration: .init(root: URL(fileURLWithPath: "/nonexistent/haul")))
        await #expect(throws: TestServerError.self) { try await server.start() }
    }
}
