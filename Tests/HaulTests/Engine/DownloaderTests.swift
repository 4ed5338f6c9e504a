import Foundation
import Haul
import HaulTestServer
import HaulTestSupport
import Testing

/// The engine against a real loopback server, on both transports: every fault ends in the right file or the
/// right typed error with nothing at the destination.
@Suite("Downloader", .timeLimit(.minutes(2)))
struct DownloaderTests {
    @Test("a plain download lands byte-identical, with its SHA-256 and no leftovers", arguments: TransportKind.allCases)
    func plainDownload(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let events = EventLog()
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration())
            let url = server.url(path: "/bytes/plain.bin", query: ["size": "300000"])
            let result = try await downloader.download(
                DownloadRequest(url: url, destination: .directory(dir.url)), onEvent: events.record)

            let expected = TestServer.expectedBytes(name: "plain.bin", size: 300_000)
            #expect({ contentsOf(result.fileURL) == expected }())
            #expect(result.fileURL.lastPathComponent == "plain.bin")
            #expect(result.size == 300_000 && result.attempts == 1 && !result.skipped)
            #expect(dir.contents() == ["plain.bin"])
            #expect(events.lastProgress?.bytesWritten == 300_000)
            #expect(events.lastProgress?.totalBytes == 300_000)
            let request = try #require(server.stats.requests.first)
            #expect(request.value(forHeader: "accept-encoding") == "identity")
            #expect(request.value(forHeader: "user-agent") == Downloader.Configuration().userAgent)
        }
    }

    @Test(
        "a server that closes the connection after each response: every file arrives, none sent twice",
        arguments: TransportKind.allCases)
    func serverClosesAfterEachResponse(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration(retries: 0))
            for index in 0..<5 {
                let url = server.url(
                    path: "/bytes/closing\(index)", query: ["size": "\(20_000 + index)", "close": "1"])
                let result = try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
                #expect(result.attempts == 1)
                #expect(
                    contentsOf(result.fileURL)
                        == TestServer.expectedBytes(name: "closing\(index)", size: 20_000 + index))
            }
            #expect(server.stats.requestCount == 5 && server.stats.connectionsAccepted == 5)
        }
    }

    @Test("503 twice then success: retried with the policy's backoff", arguments: TransportKind.allCases)
    func retriesTransientStatus(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let clock = RecordingClock()
            let downloader = Downloader(
                transport: kind.makeTransport(), configuration: kind.configuration(clock: clock))
            let url = server.url(path: "/bytes/flaky", query: ["size": "1000", "fail": "2"])
            let result = try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            #expect(result.attempts == 3)
            #expect(clock.recorded == [.milliseconds(500), .seconds(1)])
            #expect(server.stats.requests(toPath: "/bytes/flaky") == 3)
            #expect({ contentsOf(result.fileURL) == TestServer.expectedBytes(name: "flaky", size: 1000) }())
        }
    }

    @Test("Retry-After in seconds and as an HTTP date is honoured", arguments: TransportKind.allCases)
    func honoursRetryAfter(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let clock = RecordingClock()
            let downloader = Downloader(
                transport: kind.makeTransport(), configuration: kind.configuration(clock: clock))
            // Short waits: the retry's own wait is the recording clock's, but the host is held for real (politeness
            // waits on the continuous clock). A date has whole seconds, so its wait is over 1 s and at most 3 s; an
            // unparsed header would leave the backoff's first wait, 500 ms.
            let seconds = server.url(path: "/bytes/ra1", query: ["size": "10", "fail": "1", "retryAfter": "2"])
            _ = try await downloader.download(DownloadRequest(url: seconds, destination: .directory(dir.url)))
            #expect(clock.recorded == [.seconds(2)])

            let date = server.url(
                path: "/bytes/ra2", query: ["size": "10", "fail": "1", "retryAfter": "3", "retryAfterDate": "1"])
            _ = try await downloader.download(DownloadRequest(url: date, destination: .directory(dir.url)))
            let wait = try #require(clock.recorded.last)
            #expect(wait > .seconds(1) && wait <= .seconds(3))
        }
    }

    @Test("retries run out: the last error, nothing at the destination", arguments: TransportKind.allCases)
    func retriesExhausted(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(
                transport: kind.makeTransport(), configuration: kind.configuration(retries: 2))
            let url = server.url(path: "/bytes/down", query: ["size": "10", "status": "503"])
            let error = try await #require(throws: DownloadError.self) {
                try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            }
            #expect(error.code == .httpStatus && error.status == 503)
            #expect(server.stats.requests(toPath: "/bytes/down") == 3)
            #expect(dir.contents().isEmpty)
        }
    }

    @Test("404 is not retried", arguments: TransportKind.allCases)
    func notFoundIsPermanent(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration())
            let url = server.url(path: "/nothing-here")
            let error = try await #require(throws: DownloadError.self) {
                try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            }
            #expect(error.code == .httpStatus && error.status == 404)
            #expect(error.description.contains("404"))
            #expect(server.stats.requestCount == 1)
            #expect(dir.contents().isEmpty)
        }
    }

    @Test("a cut connection resumes with Range + If-Range; only the rest is sent", arguments: TransportKind.allCases)
    func resumesAfterCut(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration())
            let size = 1_000_000
            let url = server.url(
                path: "/bytes/cut.bin", query: ["size": "\(size)", "cutAfter": "400000", "cutTimes": "1"])
            let result = try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))

            #expect({ contentsOf(result.fileURL) == TestServer.expectedBytes(name: "cut.bin", size: size) }())
            let requests = server.stats.requests
            #expect(requests.count == 2)
            let resumed = try #require(requests.last)
            let range = try #require(resumed.range)
            #expect(range.hasPrefix("bytes=") && range.hasSuffix("-"))
            let offset = try #require(Int(range.dropFirst(6).dropLast()))
            #expect(offset > 0 && offset <= 400_000)
            #expect(resumed.ifRange == TestServer.entityTag(name: "cut.bin", size: size))
            // Resumed, not restarted: the server sent each byte at most once, plus what was lost in the cut.
            #expect(server.stats.bodyBytesSent <= size + 400_000 - offset)
            #expect(result.bytesTransferred == Int64(size))
        }
    }

    @Test(
        "a body shorter than Content-Length is transient and resumes from what arrived",
        arguments: TransportKind.allCases)
    func shortBodyResumes(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration(retries: 2))
            // Every response is 1,000 bytes short, the resumed ones too, so the download cannot complete.
            let url = server.url(path: "/bytes/short", query: ["size": "50000", "shortBy": "1000"])
            let error = try await #require(throws: DownloadError.self) {
                try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            }
            #expect(error.code == .truncated)
            let requests = server.stats.requests
            #expect(requests.count == 3, "\(requests.map { $0.range ?? "whole" })")
            // Resumed from what reached the disk (a transport may lose bytes still in flight when it closes).
            let range = try #require(requests.dropFirst().first?.range)
            let offset = try #require(Int(range.dropFirst("bytes=".count).dropLast()))
            #expect(offset > 0 && offset <= 49000)
            #expect(dir.contents().isEmpty)
        }
    }

    @Test("a changed ETag on resume restarts from zero with the new content", arguments: TransportKind.allCases)
    func changedContentRestarts(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration())
            let size = 200_000
            let url = server.url(
                path: "/bytes/moving",
                query: ["size": "\(size)", "cutAfter": "100000", "cutTimes": "1", "changeAfterFirst": "1"])
            let result = try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            let requests = server.stats.requests
            #expect(requests.count == 2)
            #expect(requests.last?.ifRange == TestServer.entityTag(name: "moving", size: size, version: 0))
            // The If-Range no longer matches: the server sent version 1 whole, and only version 1 is on disk.
            #expect(
                { contentsOf(result.fileURL) == TestServer.expectedBytes(name: "moving", size: size, version: 1) }())
        }
    }

    @Test("a 200 answering a Range request starts over, never appends", arguments: TransportKind.allCases)
    func ignoredRangeStartsOver(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration())
            let url = server.url(
                path: "/bytes/norange",
                query: ["size": "100000", "cutAfter": "30000", "cutTimes": "1", "ignoreRange": "1"])
            let result = try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            #expect(server.stats.requests.last?.range != nil)
            #expect({ contentsOf(result.fileURL) == TestServer.expectedBytes(name: "norange", size: 100000) }())
        }
    }

    @Test("a stall mid-body is detected and the download resumes past it", arguments: TransportKind.allCases)
    func stallResumes(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            var configuration = kind.configuration(retries: 10)
            // Long enough that a loaded machine (suites run side by side) does not take a slow start for a stall.
            configuration.stallTimeout = .milliseconds(800)
            let downloader = Downloader(transport: kind.makeTransport(), configuration: configuration)
            // Every response stalls for good after 40,000 bytes; each attempt resumes 40,000 further on.
            let url = server.url(
                path: "/bytes/stally", query: ["size": "100000", "stallAfter": "40000", "stall": "forever"])
            let events = EventLog()
            let result = try await downloader.download(
                DownloadRequest(url: url, destination: .directory(dir.url)), onEvent: events.record)
            #expect({ contentsOf(result.fileURL) == TestServer.expectedBytes(name: "stally", size: 100000) }())
            // At least 3 attempts (40,000 + 40,000 + 20,000); a loaded machine may see a spurious extra stall, but
            // every attempt resumes where the last one stopped, so no byte is fetched twice.
            #expect(result.attempts >= 3)
            #expect(result.bytesTransferred == 100_000)
            let stalls = events.all.filter {
                if case .retrying(_, _, let error) = $0 { error.code == .stalled } else { false }
            }
            #expect(stalls.count == result.attempts - 1)
        }
    }

    @Test("a response head that never comes ends as stalled", arguments: TransportKind.allCases)
    func headOnlyStalls(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            var configuration = kind.configuration(retries: 1)
            configuration.stallTimeout = .milliseconds(300)
            let downloader = Downloader(transport: kind.makeTransport(), configuration: configuration)
            let url = server.url(path: "/bytes/silent", query: ["size": "1000", "headOnly": "1"])
            let error = try await #require(throws: DownloadError.self) {
                try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            }
            #expect(error.code == .stalled)
            #expect(dir.contents().isEmpty)
        }
    }

    @Test("a connection closed without a response is a transport error, retried", arguments: TransportKind.allCases)
    func droppedConnection(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration(retries: 2))
            let url = server.url(path: "/bytes/drop", query: ["size": "10", "dropConnection": "1"])
            let error = try await #require(throws: DownloadError.self) {
                try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url)))
            }
            #expect(error.code == .transport || error.code == .truncated)
            #expect(server.stats.requests(toPath: "/bytes/drop") == 3)
            #expect(dir.contents().isEmpty)
        }
    }

    @Test(
        "a gzip body is stored as sent, or refused where the transport would decode it",
        arguments: TransportKind.allCases)
    func gzipStoredAsSent(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration(retries: 0))
            let url = server.url(path: "/bytes/zipped", query: ["size": "5000", "gzip": "1"])
            let request = DownloadRequest(url: url, destination: .directory(dir.url))
            switch kind {
            case .asyncHTTPClient, .nio, .asyncHTTPClientOverTLS, .nioOverTLS:
                let result = try await downloader.download(request)
                let bytes = try #require(contentsOf(result.fileURL))
                #expect(bytes.prefix(2) == [0x1f, 0x8b])
                #expect(bytes.count == server.stats.bodyBytesSent)
            case .urlSession:
                let error = try await #require(throws: DownloadError.self) { try await downloader.download(request) }
                #expect(error.code == .transport)
                #expect(dir.contents().isEmpty)
            }
        }
    }

    @Test("a slow head still arrives; a missing Authorization is a permanent 401", arguments: TransportKind.allCases)
    func delayAndAuth(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration())
            let slow = server.url(path: "/bytes/slow", query: ["size": "100", "delay": "200"])
            let started = ContinuousClock.now
            let result = try await downloader.download(DownloadRequest(url: slow, destination: .directory(dir.url)))
            #expect(ContinuousClock.now - started >= .milliseconds(190))
            #expect({ contentsOf(result.fileURL) == TestServer.expectedBytes(name: "slow", size: 100) }())

            let guarded = server.url(path: "/bytes/guarded", query: ["size": "100", "requireAuth": "Bearer t"])
            let error = try await #require(throws: DownloadError.self) {
                try await downloader.download(DownloadRequest(url: guarded, destination: .directory(dir.url)))
            }
            #expect(error.code == .httpStatus && error.status == 401)
            #expect(server.stats.requests(toPath: "/bytes/guarded") == 1)
            #expect(dir.contents() == ["slow"])
        }
    }
}
