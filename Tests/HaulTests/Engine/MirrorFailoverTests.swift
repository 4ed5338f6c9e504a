import Foundation
import Haul
import HaulNIO
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// Every source of a download is a way to the file, split or not, whatever its size: a source that fails for good
/// (a 404, a refused connection, a cut or a stall after its retries) is dropped and the next one asked, bytes already
/// received resumed from it when its validator allows. Checked against the test server's own records of what it was
/// asked and sent (one server, reached as `127.0.0.1` and as `localhost`: two origins).
@Suite("Mirrors when a source fails", .timeLimit(.minutes(2)))
struct MirrorFailoverTests {
    /// Small (one request, never split) and large (split over 4 connections when asked).
    static let sizes = [20_000, 6 << 20]
    /// Long enough that a healthy source (the mirror) is never taken for a stalled one while other suites load the
    /// machine and the event loops the servers and clients share; the stalled source stalls for ever.
    static let stallTimeout = Duration.milliseconds(1500)

    func downloader(retries: Int = 3, _ change: (inout Downloader.Configuration) -> Void = { _ in }) -> Downloader {
        var configuration = TransportKind.nio.configuration(retries: retries)
        change(&configuration)
        return Downloader(transport: NIOTransport(), configuration: configuration)
    }

    func request(_ url: URL, mirrors: [URL], file: URL, connections: Int) -> DownloadRequest {
        var request = DownloadRequest(url: url, destination: .file(file))
        request.mirrors = mirrors
        request.maxConnections = connections
        request.minimumSegmentSize = 256 << 10
        return request
    }

    func drops(_ log: EventLog) -> [(url: URL, reason: String, next: URL)] {
        log.all.compactMap {
            if case .sourceDropped(let url, let reason, let next) = $0 { (url, reason, next) } else { nil }
        }
    }

    @Test(
        "the first source answers 404: the next is asked, the file comes whole from it, the events say so",
        arguments: [1, 4], sizes)
    func firstSource404(connections: Int, size: Int) async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let gone = server.url(path: "/bytes/m.bin", query: ["size": "\(size)", "status": "404"])
            let good = server.url(path: "/bytes/m.bin", query: ["size": "\(size)"], host: "localhost")
            let log = EventLog()
            let result = try await downloader().download(
                request(gone, mirrors: [good], file: dir.file("m"), connections: connections), onEvent: log.record)
            #expect(
                { contentsOf(dir.file("m")) == TestServer.expectedBytes(name: "m.bin", size: size) }(),
                "not the server's bytes")
            #expect(result.source == good)
            let dropped = drops(log)
            #expect(dropped.count == 1)
            #expect(dropped.first?.url == gone && dropped.first?.next == good)
            let reason = dropped.first?.reason ?? ""
            #expect(reason.contains("404"), "\(reason)")
            // A 404 is not retried: one request to the first source.
            #expect(server.stats.requests.filter { $0.host?.hasPrefix("127.0.0.1") == true }.count == 1)
            #expect(dir.contents() == ["m"])
        }
    }

    @Test(
        "the first source refuses connections: after its retries, the next source serves the file", arguments: [1, 4])
    func firstSourceRefused(connections: Int) async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 1 << 20
            // Port 1 on loopback refuses.
            let refused = try #require(URL(string: "http://127.0.0.1:1/bytes/r.bin"))
            let good = server.url(path: "/bytes/r.bin", query: ["size": "\(size)"])
            let log = EventLog()
            let result = try await downloader(retries: 2).download(
                request(refused, mirrors: [good], file: dir.file("r"), connections: connections), onEvent: log.record)
            #expect(
                { contentsOf(dir.file("r")) == TestServer.expectedBytes(name: "r.bin", size: size) }(),
                "not the server's bytes")
            #expect(result.source == good)
            #expect(log.retries == 2, "the refused source gets its own two retries")
            #expect(drops(log).map(\.url) == [refused])
        }
    }

    @Test(
        "the first source cuts mid-body every time: after its retries the mirror is asked for the rest, no byte twice",
        arguments: [(200_000, 1), (3 << 20, 1), (3 << 20, 4)])
    func firstSourceCut(size: Int, connections: Int) async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let cut = size / 3
            let cutting = server.url(path: "/bytes/c.bin", query: ["size": "\(size)", "cutAfter": "\(cut)"])
            let good = server.url(path: "/bytes/c.bin", query: ["size": "\(size)"], host: "localhost")
            let log = EventLog()
            let result = try await downloader(retries: 1).download(
                request(cutting, mirrors: [good], file: dir.file("c"), connections: connections), onEvent: log.record)
            #expect(
                { contentsOf(dir.file("c")) == TestServer.expectedBytes(name: "c.bin", size: size) }(),
                "not the server's bytes")
            #expect(result.source == good)
            let toFirst = server.stats.requests.filter { $0.host?.hasPrefix("127.0.0.1") == true }
            let toMirror = server.stats.requests.filter { $0.host?.hasPrefix("localhost") == true }
            #expect(toFirst.count >= 2, "the first source was not retried")
            let resumed = try #require(toMirror.first?.range)
            #expect(!resumed.hasPrefix("bytes=0-"), "the mirror was asked for the whole file: \(resumed)")
            if size < 256 << 10 {
                // One stream: the bytes from the first source are resumed only while the mirror's validator matches.
                #expect(toMirror.first?.ifRange == TestServer.entityTag(name: "c.bin", size: size))
            }
            #expect(server.stats.bodyBytesSent == size, "a byte was sent twice")
            #expect(drops(log).map(\.url) == [cutting] || connections > 1)
        }
    }

    @Test("a mirror whose validator differs sends the whole file: it is fetched from zero, never joined to the bytes")
    func mirrorWithAnotherValidator() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 200_000
            // Another file behind the mirror: its ETag and bytes differ.
            let first = server.url(path: "/bytes/v.bin", query: ["size": "\(size)", "cutAfter": "\(100_000)"])
            let mirror = server.url(path: "/bytes/w.bin", query: ["size": "\(size)"], host: "localhost")
            let result = try await downloader(retries: 0).download(
                request(first, mirrors: [mirror], file: dir.file("v"), connections: 1))
            #expect(
                { contentsOf(dir.file("v")) == TestServer.expectedBytes(name: "w.bin", size: size) }(),
                "the file is not the mirror's whole")
            #expect(result.source == mirror)
            let last = try #require(server.stats.requests.last)
            #expect(last.range?.hasPrefix("bytes=100000-") == true && last.ifRange != nil, "not asked for the rest")
            #expect(result.bytesTransferred == Int64(100_000 + size))
        }
    }

    @Test("the first source stalls: after the stall timeout the mirror serves the file", arguments: [1, 4])
    func firstSourceStalls(connections: Int) async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 1 << 20
            let stalling = server.url(path: "/bytes/s.bin", query: ["size": "\(size)", "stallAfter": "1000"])
            let good = server.url(path: "/bytes/s.bin", query: ["size": "\(size)"], host: "localhost")
            let log = EventLog()
            let result = try await downloader(retries: 0) { $0.stallTimeout = Self.stallTimeout }.download(
                request(stalling, mirrors: [good], file: dir.file("s"), connections: connections), onEvent: log.record)
            #expect(
                { contentsOf(dir.file("s")) == TestServer.expectedBytes(name: "s.bin", size: size) }(),
                "not the server's bytes")
            #expect(result.source == good)
            // One stream drops the source with `.sourceDropped`; in segments (four connections, when the first piece
            // came slowly) its connection does, in a segment event.
            let reasons =
                drops(log).map(\.reason)
                + log.all.compactMap { event -> String? in
                    guard case .segment(let segment) = event, case .sourceDropped(let reason) = segment.change,
                        segment.url == stalling
                    else { return nil }
                    return reason
                }
            #expect(reasons.first?.contains("stall") == true, "\(reasons)")
        }
    }

    @Test("one connection and mirrors: one stream however slow the first source, which stalls; the mirror resumes it")
    func slowSourceStallsInOneStream() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let size = 1 << 20
            // Slow enough that the rest would take seconds, which with two connections would be split.
            let stalling = server.url(
                path: "/bytes/s.bin",
                query: ["size": "\(size)", "rate": "200000", "stallAfter": "100000", "stall": "forever"])
            let good = server.url(path: "/bytes/s.bin", query: ["size": "\(size)"], host: "localhost")
            let log = EventLog()
            let result = try await downloader(retries: 0) { $0.stallTimeout = Self.stallTimeout }.download(
                request(stalling, mirrors: [good], file: dir.file("s"), connections: 1), onEvent: log.record)
            #expect(
                { contentsOf(dir.file("s")) == TestServer.expectedBytes(name: "s.bin", size: size) }(),
                "not the server's bytes")
            let segmented = log.all.contains { if case .segment = $0 { true } else { false } }
            #expect(!segmented, "one connection was fetched in segments")
            #expect(result.source == good)
            #expect(drops(log).map(\.url) == [stalling])
            // One stream: the rest asked of the mirror with the validator of the bytes held.
            let toMirror = try #require(server.stats.requests.first { $0.host?.hasPrefix("localhost") == true })
            #expect(toMirror.range?.hasPrefix("bytes=0-") == false && toMirror.ifRange != nil, "\(toMirror)")
        }
    }

    @Test("retries count per source: a bad first source cannot use up the budget of a good mirror")
    func retriesPerSource() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let broken = server.url(path: "/bytes/broken.bin", query: ["size": "5000", "status": "503"])
            // Fails twice, then serves: it needs two retries of its own.
            let flaky = server.url(path: "/bytes/p.bin", query: ["size": "5000", "fail": "2"], host: "localhost")
            let log = EventLog()
            let result = try await downloader(retries: 2).download(
                request(broken, mirrors: [flaky], file: dir.file("p"), connections: 1), onEvent: log.record)
            #expect({ contentsOf(dir.file("p")) == TestServer.expectedBytes(name: "p.bin", size: 5000) }())
            #expect(server.stats.requests(toPath: "/bytes/broken.bin") == 3)
            #expect(server.stats.requests(toPath: "/bytes/p.bin") == 3)
            #expect(result.attempts == 6)
            #expect(log.retries == 4)
        }
    }

    @Test("every source fails: the error names each source, without credentials, and its reason; nothing is left")
    func everySourceFails() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let gone = server.url(path: "/bytes/x.bin", query: ["status": "404"])
            let forbidden = server.url(path: "/bytes/x.bin", query: ["status": "403"], host: "localhost")
            var withUser = URLComponents(url: forbidden, resolvingAgainstBaseURL: false)
            withUser?.user = "me"
            withUser?.password = "hunter2"
            let mirror = try #require(withUser?.url)
            let log = EventLog()
            let error = try await #require(throws: DownloadError.self) {
                try await downloader().download(
                    request(gone, mirrors: [mirror], file: dir.file("x"), connections: 4), onEvent: log.record)
            }
            #expect(error.message.hasPrefix("every source failed: "), "\(error.message)")
            #expect(error.message.contains("\(gone.absoluteString): server answered 404 Not Found"), "\(error.message)")
            #expect(error.message.contains("localhost"), "\(error.message)")
            #expect(error.message.contains("403 Forbidden"), "\(error.message)")
            #expect(!error.message.contains("hunter2"))
            #expect(error.url == gone)
            #expect(dir.contents().isEmpty)
        }
    }

    @Test("under a queue, a download that goes on from a mirror counts against the mirror's host, never over its limit")
    func queueCountsTheMirrorsHost() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let queue = DownloadQueue(
                downloader: downloader(retries: 0), configuration: .init(maxConcurrentDownloads: 4, perHostLimit: 1))
            // The mirror's host is busy with a slow download when the other's first source fails.
            let busy = server.url(
                path: "/bytes/busy.bin", query: ["size": "\(400_000)", "rate": "1000000"], host: "localhost")
            let gone = server.url(path: "/bytes/moved.bin", query: ["status": "404", "delay": "50"])
            let mirror = server.url(path: "/bytes/moved.bin", query: ["size": "\(300_000)"], host: "localhost")
            let results = await queue.downloadAll([
                DownloadRequest(url: busy, destination: .file(dir.file("busy"))),
                request(gone, mirrors: [mirror], file: dir.file("moved"), connections: 1),
            ])
            for result in results { _ = try result.get() }
            #expect({ contentsOf(dir.file("moved")) == TestServer.expectedBytes(name: "moved.bin", size: 300_000) }())
            let port = server.port
            #expect(server.stats.maxInFlightByHost["localhost:\(port)"] == 1)

            // One at a time: the download gives its slot back and waits for the mirror's; nothing waits forever.
            let serial = DownloadQueue(
                downloader: downloader(retries: 0), configuration: .init(maxConcurrentDownloads: 1))
            let again = try await serial.download(
                request(gone, mirrors: [mirror], file: dir.file("moved-again"), connections: 1))
            #expect(again.source == mirror)
            #expect(queue.runningCount == 0 && serial.runningCount == 0)
        }
    }
}
