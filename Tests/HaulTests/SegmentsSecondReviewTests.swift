import Foundation
import Haul
import HaulNIO
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// Split downloads, mirrors and resumes, a second hostile look: a range whose end only its `Content-Range` tells, and
/// the per-host limit of a queue against sources that redirect to another host. Measured by the server's own counts.
@Suite("Segments, a second look", .timeLimit(.minutes(2)))
struct SegmentsSecondReviewTests {
    /// A journal that offers the one-stream partial of `request` beside `destination`: `held` bytes in order, to be
    /// resumed under `validator` for a file of `size` bytes.
    static func streamLeftByKilledRun(
        _ request: DownloadRequest, at destination: URL, held: [UInt8], size: Int, validator: String
    ) throws -> MemoryJournal {
        let partial = destination.deletingLastPathComponent()
            .appendingPathComponent(".\(destination.lastPathComponent).haul-partial")
        try Data(held).write(to: partial)
        let journal = MemoryJournal()
        journal.store(
            JournalRecord(
                key: JournalKey(request), path: destination.path,
                state: .partial(validator: validator, totalBytes: Int64(size), missingRanges: nil), request: request))
        return journal
    }

    /// A `206` without `Content-Length` (an HTTP/1.0 server) ends where the connection closes: cut short, only its
    /// `Content-Range` says bytes are missing. What came is the file's, under the validator: the retry asks for the
    /// rest from there, as after a cut body whose length was given.
    @Test("a resumed 206 without Content-Length, cut short, is resumed from what came, not fetched again from zero")
    func rangeWithoutLengthCutShortResumes() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 1 << 20
            let held = 256 << 10
            let cut = 256 << 10
            let url = server.url(
                path: "/bytes/n.bin",
                query: ["size": "\(size)", "noLength": "1", "cutAfter": "\(cut)", "cutTimes": "1"])
            let destination = dir.file("n.bin")
            let request = DownloadRequest(url: url, destination: .file(destination))
            let bytes = TestServer.expectedBytes(name: "n.bin", size: size)
            let journal = try Self.streamLeftByKilledRun(
                request, at: destination, held: Array(bytes[..<held]), size: size,
                validator: TestServer.entityTag(name: "n.bin", size: size))
            var configuration = TransportKind.nio.configuration(retries: 3)
            configuration.journal = journal
            let result = try await Downloader(transport: NIOTransport(), configuration: configuration)
                .download(request)
            #expect({ contentsOf(result.fileURL) == bytes }(), "not the server's bytes")
            let ranges = server.stats.requests.map { $0.range ?? "none" }
            #expect(
                ranges == ["bytes=\(held)-", "bytes=\(held + cut)-"],
                "the bytes that came before the cut were fetched again: requests asked for \(ranges)")
            #expect(server.stats.bodyBytesSent == size - held, "\(server.stats.bodyBytesSent) body bytes sent")
        }
    }

    /// A resumed split file starts in segments at once, with no first stream to move the download's slot: its
    /// connections' requests follow the URL's redirect to another host, and must count there.
    @Test("resumed segments of a URL redirected to another host: the per-host limit holds at that host")
    func resumedSegmentsCountAtTheRedirectTarget() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 8 << 20
            let perHost = 2
            let target = server.url(path: "/bytes/r.bin", query: ["size": "\(size)", "rate": "1500000"])
            let start = server.url(
                path: "/bytes/start.bin", query: ["redirectTo": target.absoluteString], host: "localhost")
            let destination = dir.file("r.bin")
            let request = SegmentHazardTests.segmented(start, to: .file(destination), connections: 8)
            let bytes = TestServer.expectedBytes(name: "r.bin", size: size)
            // Four ranges missing, as a killed run of four connections leaves them: four segments to go on with.
            let missing = (0..<4).map { Int64($0 * size / 4 + (256 << 10))..<Int64(($0 + 1) * size / 4) }
            var held = bytes
            for range in missing {
                held.replaceSubrange(
                    Int(range.lowerBound)..<Int(range.upperBound), with: [UInt8](repeating: 0, count: range.count))
            }
            let journal = try SegmentHazardTests.leftByKilledRun(
                request, at: destination, held: held[...], size: size,
                validator: TestServer.entityTag(name: "r.bin", size: size), missing: missing)
            let queue = makeQueue(
                .init(maxConcurrentDownloads: 8, perHostLimit: perHost), transport: .nio, journal: journal)
            let result = try await queue.add(request).result
            #expect({ contentsOf(result.fileURL) == bytes }(), "not the server's bytes")
            let stats = server.stats
            #expect(stats.requests.count(where: { $0.path == "/bytes/r.bin" }) > 2, "the file was not split")
            let most = stats.maxInFlightByHost["127.0.0.1:\(server.port)"] ?? 0
            #expect(
                most <= perHost, "\(most) requests in flight at once at 127.0.0.1 for a per-host limit of \(perHost)")
        }
    }

    /// A mirror that redirects sends its connections to the redirect's host: they count there, as the primary's do.
    @Test("a split file whose mirror redirects to the primary's host: the per-host limit holds at that host")
    func redirectingMirrorCountsAtItsTarget() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 8 << 20
            let perHost = 2
            let primary = server.url(path: "/bytes/m.bin", query: ["size": "\(size)", "rate": "1500000"])
            let mirror = server.url(
                path: "/bytes/m.bin", query: ["redirectTo": primary.absoluteString], host: "localhost")
            var request = SegmentHazardTests.segmented(primary, to: .directory(dir.url), connections: 4)
            request.mirrors = [mirror]
            let queue = makeQueue(.init(maxConcurrentDownloads: 8, perHostLimit: perHost), transport: .nio)
            let result = try await queue.add(request).result
            #expect(
                { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "m.bin", size: size) }(),
                "not the server's bytes")
            let stats = server.stats
            #expect(stats.requests.contains { $0.host?.hasPrefix("localhost") == true }, "the mirror was never asked")
            let most = stats.maxInFlightByHost["127.0.0.1:\(server.port)"] ?? 0
            #expect(
                most <= perHost, "\(most) requests in flight at once at 127.0.0.1 for a per-host limit of \(perHost)")
        }
    }

    /// A killed split run leaves one range missing when it ends before its first checkpoint (the record made as the
    /// segments start says the whole rest is missing), or when one segment was left: the rerun goes on in segments
    /// over the connections asked for, not over one connection that asks for all of it.
    @Test("resumed segments with one range missing go on over several connections")
    func resumedSingleRangeIsSplit() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 8 << 20
            let url = server.url(path: "/bytes/one.bin", query: ["size": "\(size)", "rate": "1500000"])
            let destination = dir.file("one.bin")
            let request = SegmentHazardTests.segmented(url, to: .file(destination), connections: 4)
            let bytes = TestServer.expectedBytes(name: "one.bin", size: size)
            let journal = try SegmentHazardTests.leftByKilledRun(
                request, at: destination, held: bytes[..<(1 << 20)], size: size,
                validator: TestServer.entityTag(name: "one.bin", size: size), missing: [Int64(1 << 20)..<Int64(size)])
            var configuration = TransportKind.nio.configuration(retries: 0)
            configuration.journal = journal
            let result = try await Downloader(transport: NIOTransport(), configuration: configuration)
                .download(request)
            #expect({ contentsOf(result.fileURL) == bytes }(), "not the server's bytes")
            let most = server.stats.maxInFlight
            #expect(most > 1, "7 MiB at 1.5 MB/s per connection came over \(most) connection at a time of 4 asked for")
        }
    }
}
