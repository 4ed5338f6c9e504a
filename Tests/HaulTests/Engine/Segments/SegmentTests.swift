import Foundation
import Haul
import HaulNIO
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// One file over several connections and sources: segments written in place, a changed file or a server without
/// ranges falling back to one stream, connections counted by the queue's limits, mirrors that fail, cut, crawl or
/// disagree. Checked against the test servers' own records of requests, connections and bytes sent.
@Suite("Segments and mirrors", .timeLimit(.minutes(2)))
struct SegmentTests {
    static let size = 8 << 20

    func downloader(
        _ kind: TransportKind = .nio, retries: Int = 3, _ change: (inout Downloader.Configuration) -> Void = { _ in }
    ) -> Downloader {
        var configuration = kind.configuration(retries: retries)
        change(&configuration)
        return Downloader(transport: kind.makeTransport(), configuration: configuration)
    }

    func request(_ url: URL, in dir: TemporaryDirectory, connections: Int, mirrors: [URL] = []) -> DownloadRequest {
        var request = DownloadRequest(url: url, destination: .directory(dir.url))
        request.maxConnections = connections
        request.minimumSegmentSize = 256 << 10
        request.mirrors = mirrors
        return request
    }

    func segmentEvents(_ log: EventLog) -> [SegmentEvent] {
        log.all.compactMap { if case .segment(let segment) = $0 { segment } else { nil } }
    }

    @Test(
        "a file in 8 segments is byte-identical; each segment request is a closed range with If-Range",
        arguments: TransportKind.allCases)
    func eightSegments(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let url = server.url(path: "/bytes/big.bin", query: ["size": "\(Self.size)", "rate": "4000000"])
            let events = EventLog()
            let result = try await downloader(kind).download(
                request(url, in: dir, connections: 8), onEvent: events.record)
            #expect(
                { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "big.bin", size: Self.size) }(),
                "not the server's bytes")
            #expect(result.size == Int64(Self.size))
            let stats = server.stats
            #expect(stats.maxInFlight >= 2, "in flight at most: \(stats.maxInFlight)")
            if kind == .nio || kind == .nioOverTLS {
                // Only NIOTransport says when it has closed a connection (ARCHITECTURE.md, "Invariants" 4): with the
                // others, a response ended early may still count at the server while the next request starts.
                #expect(stats.maxInFlight <= 8, "in flight at most: \(stats.maxInFlight)")
            }
            let segmentRequests = stats.requests.dropFirst()
            #expect(segmentRequests.count >= 7)
            let etag = TestServer.entityTag(name: "big.bin", size: Self.size)
            for sent in segmentRequests {
                #expect(sent.range?.wholeMatch(of: /bytes=\d+-\d+/) != nil, "\(sent.range ?? "no Range")")
                #expect(sent.ifRange == etag)
            }
            // Pieces are closed ranges and what is stolen was never asked for: no response is ended early, no byte
            // sent twice (but for a connection much slower than another, whose rest is taken over).
            #expect(Double(stats.bodyBytesSent) <= 1.1 * Double(Self.size), "served \(stats.bodyBytesSent)")
            #expect(stats.requests.first?.range == "bytes=0-\((256 << 10) - 1)")
            let started = Set(segmentEvents(events).filter { $0.change.isStarted }.map(\.connection))
            #expect(started == Set(0..<8))
            #expect(events.lastProgress?.bytesWritten == Int64(Self.size))
            let left = try FileManager.default.contentsOfDirectory(atPath: dir.path)
            #expect(left == ["big.bin"])
        }
    }

    @Test("a file that changes mid-way (If-Range mismatch) is fetched again as one stream from zero: one version")
    func changedFileRestarts() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 4 << 20
            let url = server.url(
                path: "/bytes/moving.bin", query: ["size": "\(size)", "rate": "4000000", "changeAfterFirst": "1"])
            let result = try await downloader().download(request(url, in: dir, connections: 4))
            let bytes = try #require(contentsOf(result.fileURL))
            let requests = server.stats.requests
            // Every request makes a new version: the file is the last request's, whole.
            #expect(
                { bytes == TestServer.expectedBytes(name: "moving.bin", size: size, version: requests.count - 1) }())
            #expect(requests.last?.range == nil)
            #expect(requests.dropFirst().contains { $0.ifRange != nil })
        }
    }

    @Test("a server without Range support gives one stream; one that says Accept-Ranges but ignores Range too")
    func withoutRanges() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 2 << 20
            let honest = server.url(path: "/bytes/plain.bin", query: ["size": "\(size)", "noRanges": "1"])
            let result = try await downloader().download(request(honest, in: dir, connections: 4))
            #expect(
                { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "plain.bin", size: size) }(),
                "not the server's bytes")
            #expect(server.stats.requestCount == 1)

            server.resetStats()
            let liar = server.url(
                path: "/bytes/liar.bin", query: ["size": "\(size)", "ignoreRange": "1", "rate": "4000000"])
            let again = try await downloader().download(request(liar, in: dir, connections: 4))
            #expect(
                { contentsOf(again.fileURL) == TestServer.expectedBytes(name: "liar.bin", size: size) }(),
                "not the server's bytes")
            #expect(server.stats.requestCount == 1)
        }
    }

    @Test("a queue counts every connection: never more than the per-host limit or the global one at the server")
    func queueLimitsCountConnections() async throws {
        try await TestServer.withRunning { server in
            for (global, perHost) in [(8, 3), (4, nil)] as [(Int, Int?)] {
                server.resetStats()
                let dir = try TemporaryDirectory()
                let queue = DownloadQueue(
                    downloader: downloader(),
                    configuration: .init(maxConcurrentDownloads: global, perHostLimit: perHost))
                let size = 4 << 20
                // Two files: each holds a slot of its own, and the slots left go to their extra connections.
                let names = ["a.bin", "b.bin"]
                let handles = names.map { name in
                    queue.add(
                        request(
                            server.url(path: "/bytes/\(name)", query: ["size": "\(size)", "rate": "1500000"]),
                            in: dir, connections: 4))
                }
                for (handle, name) in zip(handles, names) {
                    let result = try await handle.result
                    #expect(
                        { contentsOf(result.fileURL) == TestServer.expectedBytes(name: name, size: size) }(),
                        "not the server's bytes")
                }
                let limit = perHost ?? global
                let stats = server.stats
                #expect(stats.maxInFlight <= limit, "\(stats.maxInFlight) in flight for a limit of \(limit)")
                #expect(stats.maxInFlight >= 3, "no extra connection ran: \(stats.maxInFlight) in flight at most")
                #expect(stats.requestCount > names.count, "no file was split")
            }
        }
    }

    @Test("extra connections do not take download numbers: a download added while a file is split is the next one")
    func connectionsKeepDownloadNumbers() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = DownloadQueue(downloader: downloader(), configuration: .init(maxConcurrentDownloads: 8))
            let size = 4 << 20
            let split = queue.add(
                request(
                    server.url(path: "/bytes/split.bin", query: ["size": "\(size)", "rate": "2000000"]), in: dir,
                    connections: 4))
            try await eventually("the file split") { server.stats.requestCount >= 3 }
            // Its status counts its own connection and the extra ones open.
            try await eventually("its connections counted") { split.status.connections >= 3 }
            #expect(split.status.connections <= 4 && split.status.state == .running)
            let next = queue.add(
                DownloadRequest(
                    url: server.url(path: "/bytes/next.bin", query: ["size": "10"]), destination: .directory(dir.url)))
            #expect(split.id.number == 1 && next.id.number == 2)
            _ = try await (split.result, next.result)
        }
    }

    @Test("a segmented download that fails for good keeps its ranges; the rerun fetches only what is missing")
    func resumesSegmentsFromTheJournal() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let size = 6 << 20
            // The first piece (256 KiB) comes whole; the next two requests, segments' pieces of 1 MiB, are cut, and with
            // no retries the download fails for good while its other connections have written parts of the file.
            let url = server.url(
                path: "/bytes/kept.bin",
                query: ["size": "\(size)", "rate": "2000000", "cutAfter": "300000", "cutTimes": "3"])
            let first = request(url, in: dir, connections: 4)
            await #expect(throws: DownloadError.self) {
                _ = try await downloader(retries: 0) { $0.journal = journal }.download(first)
            }
            let record = try #require(journal.record(for: JournalKey(first)))
            guard case .partial(_, let total, let missing?) = record.state else {
                Issue.record("no segmented partial kept: \(record.state)")
                return
            }
            #expect(total == Int64(size))
            let missingBytes = missing.reduce(0) { $0 + $1.count }
            #expect(missingBytes > 0 && missingBytes < Int64(size), "missing: \(missing)")
            let servedBefore = server.stats.bodyBytesSent
            server.resetStats()

            let result = try await downloader { $0.journal = journal }.download(first)
            #expect(
                { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "kept.bin", size: size) }(),
                "not the server's bytes")
            let stats = server.stats
            // What the rerun was sent is what the record says is missing (a steal may cut a range short): bytes the
            // failed run's other connections had on their way when it failed are lost, as many as the machine's load
            // left unread, and are in the record's missing ranges.
            #expect(
                Double(stats.bodyBytesSent) <= 1.1 * Double(missingBytes),
                "the rerun was sent \(stats.bodyBytesSent) bytes for \(missingBytes) missing")
            #expect(servedBefore + missingBytes >= Int64(size), "the record lost bytes of \(servedBefore) served")
            #expect(stats.requests.allSatisfy { $0.range != nil && $0.ifRange != nil })
        }
    }

    @Test("mirrors: one that 404s and one that cuts are dropped; the file comes from the rest, whole")
    func failingMirrors() async throws {
        try await TestServer.withRunning { primary in
            try await TestServer.withRunning { mirrors in
                let dir = try TemporaryDirectory()
                let size = 4 << 20
                let query = ["size": "\(size)", "rate": "2000000"]
                let missing = mirrors.url(path: "/bytes/gone.bin", query: ["status": "404"])
                var cutQuery = query
                cutQuery["cutAfter"] = "100000"
                let cutting = mirrors.url(path: "/bytes/file.bin", query: cutQuery)
                let events = EventLog()
                let result = try await downloader().download(
                    request(
                        primary.url(path: "/bytes/file.bin", query: query), in: dir, connections: 6,
                        mirrors: [missing, cutting]),
                    onEvent: events.record)
                #expect(
                    { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "file.bin", size: size) }(),
                    "not the server's bytes")
                let dropped = segmentEvents(events).filter { $0.change.isDrop }.map(\.url)
                #expect(Set(dropped) == [missing, cutting])
                #expect(mirrors.stats.requestsByPath["/bytes/gone.bin"] ?? 0 >= 1)
            }
        }
    }

    @Test("a mirror much slower than the others is dropped and its segment taken over")
    func slowMirror() async throws {
        try await TestServer.withRunning { primary in
            try await TestServer.withRunning { mirror in
                let dir = try TemporaryDirectory()
                let size = 4 << 20
                let slow = mirror.url(path: "/bytes/file.bin", query: ["size": "\(size)", "rate": "30000"])
                let events = EventLog()
                let start = ContinuousClock.now
                let result = try await downloader().download(
                    request(
                        primary.url(path: "/bytes/file.bin", query: ["size": "\(size)", "rate": "2000000"]), in: dir,
                        connections: 4, mirrors: [slow]),
                    onEvent: events.record)
                #expect(
                    { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "file.bin", size: size) }(),
                    "not the server's bytes")
                #expect(segmentEvents(events).contains { $0.change.isDrop && $0.url == slow })
                // At the slow mirror's pace its first segment alone would take most of a minute.
                #expect(ContinuousClock.now - start < .seconds(20))
            }
        }
    }

    @Test("mirrors that disagree on the size fail the download with an error naming both")
    func mirrorsDisagree() async throws {
        try await TestServer.withRunning { primary in
            try await TestServer.withRunning { mirror in
                let dir = try TemporaryDirectory()
                let size = 4 << 20
                let other = mirror.url(path: "/bytes/file.bin", query: ["size": "\(size + 1)", "rate": "2000000"])
                let main = primary.url(path: "/bytes/file.bin", query: ["size": "\(size)", "rate": "2000000"])
                let error = await #expect(throws: DownloadError.self) {
                    _ = try await downloader().download(request(main, in: dir, connections: 4, mirrors: [other]))
                }
                #expect(error?.code == .invalidResponse)
                let message = error?.message ?? ""
                #expect(message.contains(main.absoluteString) && message.contains(other.absoluteString), "\(message)")
                #expect(message.contains("\(size) bytes") && message.contains("\(size + 1)"))
                let left = try FileManager.default.contentsOfDirectory(atPath: dir.path)
                #expect(left.isEmpty, "left: \(left)")
            }
        }
    }

    @Test("a redirected segment request emits .redirected; past another origin it carries no credentials, even home")
    func redirectedSegments() async throws {
        try await TestServer.withRunning { primary in
            try await TestServer.withRunning { mirror in
                let dir = try TemporaryDirectory()
                let size = 4 << 20
                let query = ["size": "\(size)", "rate": "2000000"]
                var targetQuery = query
                targetQuery["via"] = "mirror"
                let target = primary.url(path: "/bytes/file.bin", query: targetQuery)
                // The mirror sends its requests to the request's own origin, at a path and query it chose.
                let redirecting = mirror.url(path: "/m/file.bin", query: ["redirectTo": target.absoluteString])
                var wanted = request(
                    primary.url(path: "/bytes/file.bin", query: query), in: dir, connections: 4, mirrors: [redirecting])
                wanted.credentials = Credentials(user: "user", password: "secret")
                let events = EventLog()
                let result = try await downloader().download(wanted, onEvent: events.record)
                #expect(
                    { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "file.bin", size: size) }(),
                    "not the server's bytes")
                let redirects = events.all.compactMap { event -> (URL, URL)? in
                    if case .redirected(let from, let to, 302) = event { (from, to) } else { nil }
                }
                #expect(redirects.contains { $0 == (redirecting, target) }, "\(redirects)")
                let requests = primary.stats.requests
                let viaMirror = requests.filter { $0.target.contains("via=mirror") }
                #expect(!viaMirror.isEmpty, "the mirror's connections sent nothing to its target")
                #expect(viaMirror.allSatisfy { $0.authorization == nil }, "credentials sent where the mirror pointed")
                #expect(requests.filter { !$0.target.contains("via=mirror") }.allSatisfy { $0.authorization != nil })
                #expect(mirror.stats.requests.allSatisfy { $0.authorization == nil })
            }
        }
    }

    @Test("a redirect loop on a segment's source is found as on one stream: the source is dropped for it")
    func segmentRedirectLoop() async throws {
        try await TestServer.withRunning { primary in
            try await TestServer.withRunning { mirror in
                let dir = try TemporaryDirectory()
                let size = 4 << 20
                let query = ["size": "\(size)", "rate": "2000000"]
                let looping = mirror.url(path: "/bytes/file.bin", query: ["redirectLoop": "1"])
                let events = EventLog()
                let result = try await downloader().download(
                    request(
                        primary.url(path: "/bytes/file.bin", query: query), in: dir, connections: 4, mirrors: [looping]),
                    onEvent: events.record)
                #expect(
                    { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "file.bin", size: size) }(),
                    "not the server's bytes")
                let drops = segmentEvents(events).compactMap { event -> String? in
                    if case .sourceDropped(let reason) = event.change, event.url == looping { reason } else { nil }
                }
                #expect(drops.count == 1 && drops[0].hasPrefix("redirect loop"), "\(drops)")
                // Found at its first return to a URL visited (a loop is no failure another try would get past): one
                // request of each connection sent there, not the ten redirects of the limit.
                let sent = mirror.stats.requestCount
                #expect(sent >= 1 && sent <= 3, "\(sent) requests to the looping mirror")
            }
        }
    }
}

extension SegmentEvent.Change {
    var isStarted: Bool { if case .started = self { true } else { false } }
    var isDrop: Bool { if case .sourceDropped = self { true } else { false } }
}
