import Foundation
import Haul
import HaulNIO
import HaulTestServer
import HaulTestSupport
import Testing

/// What must never be published: another download's unfinished bytes, or a body a lying server framed wrong. In the
/// collision tests the first writer's body stops at a gate after 100,000 bytes and the second is held at another
/// until those bytes are in the first's partial; the first goes on only once the second has ended. So the two
/// writers meet every run, whatever the load.
@Suite("Integrity", .timeLimit(.minutes(2)))
struct IntegrityTests {
    /// Runs `first` and `second` (both to `destination`) so that they meet: `first` must stop at gate `first` after
    /// 100,000 body bytes and `second` be held at gate `second`, which opens once those bytes are in the partial.
    /// `first` goes on once `second` has ended. Returns `first`'s result and how `second` failed (`nil`: it did not).
    private static func collide(
        _ first: DownloadRequest, _ second: DownloadRequest, at destination: URL, on server: TestServer,
        kind: TransportKind
    ) async throws -> (DownloadResult, DownloadError?) {
        let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration(retries: 0))
        async let winner = downloader.download(first)
        async let loser = failure { () async throws(DownloadError) in try await downloader.download(second) }
        let partial =
            destination.deletingLastPathComponent()
            .appendingPathComponent(".\(destination.lastPathComponent).haul-partial").path
        try await onOwnThread {
            let deadline = Date().addingTimeInterval(20)
            while ((try? FileManager.default.attributesOfItem(atPath: partial))?[.size] as? Int ?? 0) < 100_000,
                Date() < deadline
            {
                usleep(1_000)
            }
            server.openGate("second")
        }
        let error = await loser
        server.openGate("first")
        return (try await winner, error)
    }

    /// The error `body` throws, `nil` if it succeeds.
    private static func failure(
        _ body: () async throws(DownloadError) -> DownloadResult
    ) async -> DownloadError? {
        do {
            _ = try await body()
            return nil
        } catch {
            return error
        }
    }

    /// A body that stops after 100,000 bytes until gate `first` opens.
    static let stalled = ["size": "600000", "stallAfter": "100000", "stall": "gate:first"]

    @Test(
        "two downloads whose names collide only at the response (Content-Disposition): one wins, whole; the other fails clearly",
        arguments: TransportKind.allCases)
    func lateNameCollision(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let disposition = ["disposition": "attachment; filename=\"same.bin\""]
            let destination = Destination.directory(dir.url, useContentDisposition: true)
            let first = server.url(path: "/bytes/first", query: Self.stalled.merging(disposition) { $1 })
            let second = server.url(
                path: "/bytes/second", query: ["size": "600000", "hold": "second"].merging(disposition) { $1 })
            let (result, error) = try await Self.collide(
                DownloadRequest(url: first, destination: destination),
                DownloadRequest(url: second, destination: destination), at: dir.file("same.bin"), on: server,
                kind: kind)
            #expect(error?.code == .destinationBusy, "\(String(describing: error))")
            #expect(error?.message.contains("another download") == true)
            #expect(result.fileURL.lastPathComponent == "same.bin")
            #expect(
                { contentsOf(dir.file("same.bin")) == TestServer.expectedBytes(name: "first", size: 600_000) }(),
                "not the server's bytes")
            #expect(dir.contents() == ["same.bin"])
        }
    }

    @Test(
        "two writers on one destination (overwrite): the second leaves the first's partial alone; only whole bytes are published",
        arguments: TransportKind.allCases)
    func twoWritersOneDestination(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let target = dir.file("one.bin")
            let first = DownloadRequest(
                url: server.url(path: "/bytes/first", query: Self.stalled), destination: .file(target),
                conflictPolicy: .overwrite)
            let second = DownloadRequest(
                url: server.url(path: "/bytes/second", query: ["size": "300000", "hold": "second"]),
                destination: .file(target), conflictPolicy: .overwrite)
            let (_, error) = try await Self.collide(first, second, at: target, on: server, kind: kind)
            #expect(error?.code == .destinationBusy, "\(String(describing: error))")
            #expect(
                { contentsOf(target) == TestServer.expectedBytes(name: "first", size: 600_000) }(),
                "not the server's bytes")
            #expect(dir.contents() == ["one.bin"])
        }
    }

    /// A response cut after `cut` of its `size` bytes, with a strong ETag so that it is resumed.
    static func cutResponse(_ body: [UInt8], after cut: Int) -> [UInt8] {
        Array(
            "HTTP/1.1 200 OK\r\nContent-Length: \(body.count)\r\nETag: \"v1\"\r\nAccept-Ranges: bytes\r\nConnection: close\r\n\r\n"
                .utf8) + body[..<cut]
    }

    static func partialResponse(_ bytes: ArraySlice<UInt8>, range: String) -> [UInt8] {
        Array(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes \(range)\r\nContent-Length: \(bytes.count)\r\nETag: \"v1\"\r\n\r\n"
                .utf8) + bytes
    }

    static func wholeResponse(_ body: [UInt8]) -> [UInt8] {
        Array("HTTP/1.1 200 OK\r\nContent-Length: \(body.count)\r\nETag: \"v1\"\r\n\r\n".utf8) + body
    }

    struct Lie: Sendable, CustomTestStringConvertible {
        var testDescription: String
        /// The answer to the resuming request, for bytes `from` on of 200,000.
        var resumed: @Sendable (_ body: [UInt8], _ from: Int) -> [UInt8]
    }

    static let lies: [Lie] = [
        Lie(testDescription: "a body of the whole file for the rest's range") { body, from in
            partialResponse(body[...], range: "\(from)-199999/200000")
        },
        Lie(testDescription: "a chunked body longer than its range") { body, from in
            var response = Array(
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes \(from)-199999/200000\r\nTransfer-Encoding: chunked\r\nETag: \"v1\"\r\n\r\n"
                    .utf8)
            for start in stride(from: 0, to: body.count, by: 50_000) {
                response +=
                    Array("\(String(50_000, radix: 16))\r\n".utf8) + body[start..<start + 50_000] + Array("\r\n".utf8)
            }
            return response + Array("0\r\n\r\n".utf8)
        },
        Lie(testDescription: "a total that changed since the first response") { body, from in
            partialResponse(body[from...], range: "\(from)-199999/250000")
        },
        Lie(testDescription: "a range that ends short of the total") { body, from in
            partialResponse(body[from..<150_000], range: "\(from)-149999/200000")
        },
        Lie(testDescription: "a range past the total it states") { body, from in
            partialResponse(body[from...], range: "\(from)-199999/150000")
        },
    ]

    @Test(
        "a 206 that does not fit its request or itself is never appended: the download starts over and ends whole",
        arguments: TransportKind.allCases, lies)
    func lyingPartialContent(kind: TransportKind, lie: Lie) async throws {
        let body = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) }
        // The second request resumes wherever the transport let the first one's bytes reach the file.
        let respond: @Sendable (Int, String) -> [UInt8] = { index, request in
            switch index {
            case 0: return Self.cutResponse(body, after: 100_000)
            case 1:
                let range = request.split(separator: "\r\n").first { $0.lowercased().hasPrefix("range: bytes=") }
                let from = range.flatMap { Int($0.dropFirst("range: bytes=".count).dropLast()) } ?? 0
                return lie.resumed(body, from)
            default: return Self.wholeResponse(body)
            }
        }
        try await RawServer.withRunning(respond: respond) { port in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration(retries: 3))
            let events = EventLog()
            let url = try #require(URL(string: "http://127.0.0.1:\(port)/lied.bin"))
            let result = try await downloader.download(
                DownloadRequest(url: url, destination: .directory(dir.url)), onEvent: events.record)
            #expect(result.size == 200_000)
            #expect(contentsOf(result.fileURL) == body)
            #expect(result.attempts == 3, "\(events.all)")
            #expect(events.all.contains { if case .started(2, let from) = $0 { from > 0 } else { false } })
            let reasons = events.all.compactMap { if case .retrying(_, _, let error) = $0 { error } else { nil } }
            #expect(reasons.last?.code == .invalidResponse, "\(reasons)")
            #expect(dir.contents() == ["lied.bin"])
        }
    }

    @Test(
        "a response that breaks the protocol the same way every time fails at once, without retries",
        arguments: [
            ("HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n", DownloadError.Code.transport),
            ("HTTP/1.1 200 OK\r\nX-Big: " + String(repeating: "b", count: 90_000) + "\r\n\r\n", .transport),
            ("HTTP/1.1 302 Found\r\nLocation: /a\u{1}b\r\nContent-Length: 0\r\n\r\n", .transport),
        ])
    func permanentProtocolErrors(response: String, code: DownloadError.Code) async throws {
        try await RawServer.withRunning(responses: [Array(response.utf8)]) { port in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: NIOTransport(), configuration: testConfiguration(retries: 3))
            let events = EventLog()
            let url = try #require(URL(string: "http://127.0.0.1:\(port)/broken.bin"))
            let error = await Self.failure { () async throws(DownloadError) in
                try await downloader.download(
                    DownloadRequest(url: url, destination: .directory(dir.url)), onEvent: events.record)
            }
            #expect(error?.code == code, "\(String(describing: error))")
            #expect(events.retries == 0)
            #expect(dir.contents().isEmpty)
        }
    }
}
