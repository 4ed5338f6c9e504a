import Foundation
import Haul
import HaulNIO
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// Segmented and resumed downloads against what servers and mirrors do to them: a file that changes between runs
/// behind a server that ignores If-Range, a mirror with another version, a mirror that is gone under a per-host
/// limit, pauses in the middle. Never a file of two versions, never a download lost from the journal, never more
/// connections to a host than the queue allows.
@Suite("Segments against changing servers and mirrors", .timeLimit(.minutes(2)))
struct SegmentHazardTests {
    /// Deterministic content of a version of a file.
    static func content(_ version: Int, size: Int) -> [UInt8] {
        (0..<size).map { UInt8(truncatingIfNeeded: $0 &* (version == 1 ? 31 : 17) &+ version &* 101 &+ ($0 >> 9)) }
    }

    /// A raw response to `head` for `body`: honours `Range` (one range), ignores `If-Range` (as many servers do),
    /// sends `etag`.
    static func rangeAnswer(_ head: String, body: [UInt8], etag: String) -> [UInt8] {
        let rangeLine = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("range:") }
        var status = "200 OK"
        var slice = 0..<body.count
        var extra = ""
        if let rangeLine, let spec = rangeLine.split(separator: "=").last {
            let parts = spec.split(separator: "-", omittingEmptySubsequences: false)
            let lower = Int(parts[0].trimmingCharacters(in: .whitespaces)) ?? 0
            if lower >= body.count {
                let text =
                    "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */\(body.count)\r\n"
                    + "Content-Length: 0\r\nETag: \(etag)\r\n\r\n"
                return Array(text.utf8)
            }
            let upperText = parts.count > 1 ? parts[1].trimmingCharacters(in: .whitespaces) : ""
            let upper = upperText.isEmpty ? body.count : min((Int(upperText) ?? body.count) + 1, body.count)
            slice = lower..<upper
            status = "206 Partial Content"
            extra = "Content-Range: bytes \(lower)-\(upper - 1)/\(body.count)\r\n"
        }
        let text =
            "HTTP/1.1 \(status)\r\nContent-Length: \(slice.count)\r\nETag: \(etag)\r\nAccept-Ranges: bytes\r\n"
            + extra + "\r\n"
        return Array(text.utf8) + Array(body[slice])
    }

    /// A request of `url` into `destination` over up to `connections` connections, in segments of 256 KiB or more.
    static func segmented(_ url: URL, to destination: Destination, connections: Int) -> DownloadRequest {
        var request = DownloadRequest(url: url, destination: destination)
        request.maxConnections = connections
        request.minimumSegmentSize = 256 << 10
        return request
    }

    /// What a killed segmented run of `request` into the file `destination` left: `held` written in place in its
    /// partial (the rest of `size` bytes zeros) and a journal that offers it for a resume under `validator`, with the
    /// `missing` ranges still to fetch.
    static func leftByKilledRun(
        _ request: DownloadRequest, at destination: URL, held: ArraySlice<UInt8>, size: Int, validator: String,
        missing: [Range<Int64>]
    ) throws -> MemoryJournal {
        let partial = destination.deletingLastPathComponent()
            .appendingPathComponent(".\(destination.lastPathComponent).haul-partial")
        try Data(Array(held) + [UInt8](repeating: 0, count: size - held.count)).write(to: partial)
        let journal = MemoryJournal()
        journal.store(
            JournalRecord(
                key: JournalKey(request), path: destination.path,
                state: .partial(validator: validator, totalBytes: Int64(size), missingRanges: missing),
                request: request))
        return journal
    }

    /// Adds `request` to `queue` and pauses it once three connections or more run and 1 MiB is written; returns once
    /// it waits again and the server has nothing in flight.
    func pausedMidway(_ request: DownloadRequest, in queue: DownloadQueue, at server: TestServer) async throws
        -> DownloadHandle
    {
        let handle = queue.add(request)
        try await eventually("segments running") {
            handle.status.connections >= 3 && handle.status.progress.bytesWritten > 1 << 20
        }
        #expect(handle.pause())
        try await eventually("paused, back in the waiting order") {
            handle.status.position == 0 && server.stats.inFlight == 0
        }
        return handle
    }

    func downloader(retries: Int, journal: (any Journal)? = nil) -> Downloader {
        var configuration = TransportKind.nio.configuration(retries: retries)
        configuration.journal = journal
        return Downloader(transport: NIOTransport(), configuration: configuration)
    }

    // MARK: - A resumed range of another version (If-Range ignored)

    @Test(
        "a resumed transfer whose server ignores If-Range and now has another version never publishes a mix",
        arguments: [1, 4])
    func streamResumeIgnoresChangedValidator(connections: Int) async throws {
        let size = 200_000
        let half = size / 2
        let v1 = Self.content(1, size: size)
        let v2 = Self.content(2, size: size)
        try await RawServer.withRunning(respond: { index, head in
            if index == 0 {
                // Version 1 (whole, or the first piece asked for), cut half-way: `Connection: close` ends it short.
                let answer = Self.rangeAnswer(head, body: v1, etag: "\"v1\"")
                let headEnd = answer.firstRange(of: Array("\r\n\r\n".utf8))!.lowerBound
                return Array(answer[..<headEnd]) + Array("\r\nConnection: close\r\n\r\n".utf8)
                    + Array(answer[(headEnd + 4)...].prefix(half))
            }
            // The file changed meanwhile: version 2, same size, another ETag; If-Range is not looked at.
            return Self.rangeAnswer(head, body: v2, etag: "\"v2\"")
        }) { port in
            let dir = try TemporaryDirectory()
            let url = try #require(URL(string: "http://127.0.0.1:\(port)/file.bin"))
            let request = Self.segmented(url, to: .file(dir.file("file.bin")), connections: connections)
            do {
                let result = try await downloader(retries: 1).download(request)
                let bytes = try #require(contentsOf(result.fileURL))
                let mixed =
                    bytes.count == size && Array(bytes[..<half]) == Array(v1[..<half])
                    && Array(bytes[half...]) == Array(v2[half...])
                #expect(
                    bytes == v1 || bytes == v2, "published a file that is neither version (v1 head + v2 tail: \(mixed))"
                )
            } catch {
                // Failing is acceptable; publishing a mix is not.
            }
        }
    }

    // MARK: - Resumed segments whose primary's file changed size

    @Test("resumed segments: a primary whose file changed size (If-Range ignored) starts over, as one stream does")
    func resumedSegmentsNewSize() async throws {
        let oldSize = 2 << 20
        let newSize = oldSize + 4096
        let v1 = Self.content(1, size: oldSize)
        let v2 = Self.content(2, size: newSize)
        try await RawServer.withRunning(respond: { _, head in
            Self.rangeAnswer(head, body: v2, etag: "\"v2\"")
        }) { port in
            let dir = try TemporaryDirectory()
            let destination = dir.file("seg.bin")
            let url = try #require(URL(string: "http://127.0.0.1:\(port)/seg.bin"))
            let request = Self.segmented(url, to: .file(destination), connections: 4)
            // What a killed run left: the first half written in place, the rest missing.
            let journal = try Self.leftByKilledRun(
                request, at: destination, held: v1[..<(oldSize / 2)], size: oldSize, validator: "\"v1\"",
                missing: [Int64(oldSize / 2)..<Int64(oldSize)])
            let result = try await downloader(retries: 2, journal: journal).download(request)
            #expect({ contentsOf(result.fileURL) == v2 }(), "not the server's new file")
        }
    }

    // MARK: - Pause and resume in a queue

    @Test("a segmented download paused mid-way in a queue and resumed is the server's file")
    func pauseResumeSegmentedInQueue() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let queue = makeQueue(.init(maxConcurrentDownloads: 8), transport: .nio, journal: journal)
            let size = 6 << 20
            let url = server.url(path: "/bytes/p.bin", query: ["size": "\(size)", "rate": "700000"])
            let request = Self.segmented(url, to: .directory(dir.url), connections: 4)
            let handle = try await pausedMidway(request, in: queue, at: server)
            let record = journal.record(for: JournalKey(request))
            guard case .partial(_, _, let missing?)? = record?.state else {
                Issue.record("no segmented partial kept: \(String(describing: record?.state))")
                return
            }
            #expect(!missing.isEmpty)
            let servedBefore = server.stats.bodyBytesSent
            #expect(handle.resume())
            let result = try await handle.result
            #expect(
                { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "p.bin", size: size) }(),
                "not the server's bytes")
            #expect(
                Double(server.stats.bodyBytesSent) <= 1.2 * Double(size),
                "served \(server.stats.bodyBytesSent) (before pause \(servedBefore))")
            #expect(dir.contents() == ["p.bin"])
        }
    }

    // MARK: - Resumed segments and a mirror with another version

    @Test("resumed segments whose primary is down are not completed from a mirror that has another version")
    func resumedSegmentsFromChangedMirror() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 2 << 20
            let half = size / 2
            // The primary is down now; the mirror has a newer version of the file (same size, other bytes and ETag).
            let primary = server.url(path: "/bytes/f.bin", query: ["size": "\(size)", "status": "404"])
            let mirror = server.url(path: "/bytes/g.bin", query: ["size": "\(size)"], host: "localhost")
            let destination = dir.file("f.bin")
            var request = Self.segmented(primary, to: .file(destination), connections: 4)
            request.mirrors = [mirror]
            let old = TestServer.expectedBytes(name: "f.bin", size: size)
            let journal = try Self.leftByKilledRun(
                request, at: destination, held: old[..<half], size: size,
                validator: TestServer.entityTag(name: "f.bin", size: size), missing: [Int64(half)..<Int64(size)])
            // The primary never vouches for the held bytes: they go, and the mirror's version comes whole.
            let result = try await downloader(retries: 0, journal: journal).download(request)
            #expect({ contentsOf(result.fileURL) == TestServer.expectedBytes(name: "g.bin", size: size) }())
        }
    }

    // MARK: - A per-host limit and a mirror dropped

    @Test("under a per-host limit, the connections of a dropped mirror never exceed the limit at the other host")
    func droppedMirrorKeepsPerHostLimit() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 8 << 20
            let perHost = 2
            let queue = makeQueue(.init(maxConcurrentDownloads: 8, perHostLimit: perHost), transport: .nio)
            let primary = server.url(path: "/bytes/h.bin", query: ["size": "\(size)", "rate": "1000000"])
            // The mirror is another origin (localhost) that has lost the file.
            let mirror = server.url(
                path: "/bytes/h.bin", query: ["size": "\(size)", "status": "404"], host: "localhost")
            var request = Self.segmented(primary, to: .directory(dir.url), connections: 4)
            request.mirrors = [mirror]
            let result = try await queue.add(request).result
            #expect(
                { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "h.bin", size: size) }(),
                "not the server's bytes")
            let stats = server.stats
            let atPrimary = stats.maxInFlightByHost["127.0.0.1:\(server.port)"] ?? 0
            #expect(stats.requests.contains { $0.host?.hasPrefix("localhost") == true }, "the mirror was never asked")
            #expect(
                atPrimary <= perHost, "\(atPrimary) requests in flight at once at the primary's host, limit \(perHost)")
        }
    }

    @Test("a paused segmented download that is cancelled leaves no partial and no partial record")
    func pauseThenCancelSegmented() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let queue = makeQueue(.init(maxConcurrentDownloads: 8), transport: .nio, journal: journal)
            let size = 6 << 20
            let url = server.url(path: "/bytes/c.bin", query: ["size": "\(size)", "rate": "700000"])
            let request = Self.segmented(url, to: .directory(dir.url), connections: 4)
            let handle = try await pausedMidway(request, in: queue, at: server)
            #expect(dir.contents() == [".c.bin.haul-partial"])
            handle.cancel()
            _ = try? await handle.result
            try await eventually("partial gone") { dir.contents().isEmpty }
            #expect(journal.allRecords().allSatisfy { if case .partial = $0.state { false } else { true } })
        }
    }

    // MARK: - The journal while segments are given up

    @Test("segments given up (file changed) keep the download in the journal while the one stream is retried")
    func abandonedSegmentsKeepTheRequestRecorded() async throws {
        let size = 2 << 20
        let v1 = Self.content(1, size: size)
        let v2 = Self.content(2, size: size)
        let plainGets = Locked(0)
        try await RawServer.withRunning(respond: { _, head in
            if head.lowercased().contains("\r\nrange:") {
                // The file changed: a server that honours If-Range sends the whole new version.
                return Self.rangeAnswer("GET / HTTP/1.1", body: v2, etag: "\"v2\"")
            }
            let count = plainGets.withLock { count in
                count += 1
                return count
            }
            if count == 1 {
                return Array("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n".utf8)
            }
            return Self.rangeAnswer(head, body: v2, etag: "\"v2\"")
        }) { port in
            let dir = try TemporaryDirectory()
            let destination = dir.file("a.bin")
            let url = try #require(URL(string: "http://127.0.0.1:\(port)/a.bin"))
            let request = Self.segmented(url, to: .file(destination), connections: 4)
            let journal = try Self.leftByKilledRun(
                request, at: destination, held: v1[..<(size / 2)], size: size, validator: "\"v1\"",
                missing: [Int64(size / 2)..<Int64(size)])
            let key = JournalKey(request)
            let clock = GatedClock()
            var configuration = TransportKind.nio.configuration(clock: clock, retries: 2)
            configuration.journal = journal
            let downloader = Downloader(transport: NIOTransport(), configuration: configuration)
            let download = Task { try await downloader.download(request) }
            // The run waits before its next attempt (the one stream from zero got a 503): a kill now is what the
            // journal has to survive.
            await clock.entered.wait()
            let record = journal.record(for: key)
            #expect(record != nil, "the journal no longer knows the download: a queue restarted now forgets it")
            #expect(record?.request != nil)
            clock.release.open()
            let result = try await download.value
            #expect({ contentsOf(result.fileURL) == v2 }())
        }
    }
}
