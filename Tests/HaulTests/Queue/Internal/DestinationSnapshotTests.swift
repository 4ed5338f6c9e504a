import Foundation
import Haul
import HaulTestServer
import HaulTestSupport
import Testing

/// A batch into one directory lists it once when added (DestinationSnapshot): what was there then is handled
/// without a request as before; what appears later is never overwritten, and its conflict policy applies when the
/// download publishes.
@Suite("DownloadQueue: destinations of a batch", .timeLimit(.minutes(1)))
struct DestinationSnapshotTests {
    /// Enough requests into one directory for it to be listed.
    static let count = DestinationSnapshot.minimumPerDirectory + 6

    static func batch(_ server: TestServer, into dir: TemporaryDirectory, _ policy: ConflictPolicy) -> [DownloadRequest]
    {
        (0..<count).map {
            DownloadRequest(
                url: server.url(path: "/bytes/f\($0)", query: ["size": "10"]), destination: .directory(dir.url),
                conflictPolicy: policy)
        }
    }

    static let mine = Array("mine".utf8)

    @Test(
        "there when added: fail and skip without a request; a symbolic link refused without one",
        arguments: [
            ConflictPolicy.fail, .skip,
        ])
    func presentWhenAdded(policy: ConflictPolicy) async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            try Data(Self.mine).write(to: dir.file("f3"))
            try Data(Self.mine).write(to: dir.file("target"))
            try FileManager.default.createSymbolicLink(atPath: dir.file("f10").path, withDestinationPath: "target")
            let queue = makeQueue(.init(maxConcurrentDownloads: 4), transport: .nio)
            let handles = queue.add(Self.batch(server, into: dir, policy))

            let f3 = await handles[3].ended
            if policy == .skip {
                let result = try f3.get()
                #expect(result.skipped && result.size == 4 && result.sha256 == nil)
            } else {
                #expect(f3.failure?.code == .destinationExists)
            }
            #expect(await handles[10].ended.failure?.code == .unsafePath)
            for index in 0..<Self.count where index != 3 && index != 10 { _ = try await handles[index].result }
            #expect(server.stats.requests(toPath: "/bytes/f3") == 0 && server.stats.requests(toPath: "/bytes/f10") == 0)
            #expect(server.stats.requestCount == Self.count - 2)
            #expect(contentsOf(dir.file("f3")) == Self.mine && contentsOf(dir.file("target")) == Self.mine)
            #expect(try FileManager.default.destinationOfSymbolicLink(atPath: dir.file("f10").path) == "target")
        }
    }

    @Test(
        "appeared after the batch was added: never overwritten but by overwrite; the policy applies at publishing",
        arguments: ConflictPolicy.allCases)
    func appearedAfterAdding(policy: ConflictPolicy) async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            try Data(Self.mine).write(to: dir.file("target"))
            let queue = makeQueue(.init(maxConcurrentDownloads: 2), transport: .nio)
            queue.pause()
            let handles = queue.add(Self.batch(server, into: dir, policy))
            try Data(Self.mine).write(to: dir.file("f5"))
            try FileManager.default.createSymbolicLink(atPath: dir.file("f6").path, withDestinationPath: "target")
            queue.resume()

            let f5 = await handles[5].ended
            let f6 = await handles[6].ended
            for index in 0..<Self.count where index != 5 && index != 6 { _ = try await handles[index].result }
            // Found absent when added: requested (which is what the listing saves for the rest of the batch).
            #expect(server.stats.requests(toPath: "/bytes/f5") == 1)
            let downloaded = TestServer.expectedBytes(name: "f5", size: 10)
            switch policy {
            case .fail:
                #expect(f5.failure?.code == .destinationExists)
                #expect(f6.failure?.code == .destinationExists)
            case .skip:
                let result = try f5.get()
                #expect(result.skipped && result.sha256 == nil)
                #expect(f6.failure?.code == .unsafePath)
            case .rename:
                #expect(try f5.get().fileURL.lastPathComponent == "f5 (1)")
                #expect(contentsOf(dir.file("f5 (1)")) == downloaded)
                #expect(try f6.get().fileURL.lastPathComponent == "f6 (1)")
            case .overwrite:
                #expect(try f5.get().fileURL.lastPathComponent == "f5")
                #expect(f6.failure?.code == .unsafePath)
            }
            #expect(contentsOf(dir.file("f5")) == (policy == .overwrite ? downloaded : Self.mine))
            #expect(try FileManager.default.destinationOfSymbolicLink(atPath: dir.file("f6").path) == "target")
            #expect(contentsOf(dir.file("target")) == Self.mine)
            let hidden = dir.contents().filter { $0.hasPrefix(".") }
            #expect(hidden.isEmpty, "no partial left: \(hidden)")
        }
    }

    @Test("a batch entered in slices: the first slice looks its destinations up, the rest use the listing")
    func slicedBatch() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = makeQueue(.init(maxConcurrentDownloads: 4), transport: .nio)
            queue.pause()
            let count = 600  // more than two slices of DownloadQueue.admissionSlice (256)
            let handles = queue.add(
                (0..<count).map {
                    DownloadRequest(
                        url: server.url(path: "/bytes/f\($0)", query: ["size": "10"]), destination: .directory(dir.url))
                })
            // Both appear after the batch was added: f100 (first slice) is looked up when it starts, f500 was
            // listed absent and is found when publishing.
            for name in ["f100", "f500"] { try Data(Self.mine).write(to: dir.file(name)) }
            queue.resume()
            #expect(await handles[100].ended.failure?.code == .destinationExists)
            #expect(await handles[500].ended.failure?.code == .destinationExists)
            for index in 0..<count where index != 100 && index != 500 { _ = try await handles[index].result }
            #expect(server.stats.requests(toPath: "/bytes/f100") == 0)
            #expect(server.stats.requests(toPath: "/bytes/f500") == 1)
            #expect(contentsOf(dir.file("f100")) == Self.mine && contentsOf(dir.file("f500")) == Self.mine)
        }
    }

    @Test("only directories with many destinations are listed; one that does not exist yet has no names")
    func listing() throws {
        let dir = try TemporaryDirectory()
        try Data(Self.mine).write(to: dir.file("a"))
        func requests(_ count: Int, in directory: URL) -> [DownloadRequest] {
            (0..<count).map {
                DownloadRequest(
                    url: URL(string: "http://127.0.0.1:1/\(["a", "b"][$0 % 2])\($0 < 2 ? "" : "\($0)")")!,
                    destination: .directory(directory))
            }
        }
        #expect(DestinationSnapshot.absentPaths(of: requests(Self.count - 10, in: dir.url)) == nil)
        let listed = try #require(DestinationSnapshot.absentPaths(of: requests(Self.count, in: dir.url)))
        #expect(listed[0] == nil && listed[1] == dir.file("b").path && listed.compactMap { $0 }.count == Self.count - 1)
        let missing = dir.url.appendingPathComponent("not-yet", isDirectory: true)
        let none = try #require(DestinationSnapshot.absentPaths(of: requests(Self.count, in: missing)))
        #expect(none.allSatisfy { $0 != nil })
    }

    @Test("a listing reads no more names than its budget: a directory that holds more is not listed")
    func listingBudget() throws {
        let dir = try TemporaryDirectory()
        for name in ["a", "b", "c", "d"] { try Data(Self.mine).write(to: dir.file(name)) }
        let request = DownloadRequest(url: URL(string: "http://127.0.0.1:1/e")!, destination: .directory(dir.url))
        var generous = DestinationSnapshot.Listing()
        #expect(generous.absentPath(of: request) == dir.file("e").path)
        // Four names (and the directory's own two) are more than three: its downloads look their files up.
        var small = DestinationSnapshot.Listing(budget: 3)
        #expect(small.absentPath(of: request) == nil)
        var enough = DestinationSnapshot.Listing(budget: 64)
        #expect(enough.absentPath(of: request) == dir.file("e").path)
    }
}

extension DownloadHandle {
    /// The result as a `Result` once the download has ended, for tests that expect failures.
    var ended: Result<DownloadResult, DownloadError> {
        get async {
            do { return .success(try await result) } catch { return .failure(error) }
        }
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
