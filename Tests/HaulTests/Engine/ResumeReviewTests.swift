import Foundation
import Haul
import HaulNIO
import HTTPTypes
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

@testable import Haul

/// A file already there or partly there, attacked by a lying server and a user who edits files: a 416 that states a
/// total other than the one the held bytes were part of, and a file Haul completed that the user changes while a
/// revalidation (-N) fetches its new copy.
@Suite("Resume under review", .timeLimit(.minutes(2)))
struct ResumeReviewTests {
    func downloader(
        _ journal: MemoryJournal, revalidates: Bool = false,
        _ change: (inout Downloader.Configuration) -> Void = { _ in }
    ) -> Downloader {
        var configuration = TransportKind.nio.configuration(retries: 0)
        configuration.journal = journal
        configuration.revalidatesCompletedFiles = revalidates
        change(&configuration)
        return Downloader(transport: NIOTransport(), configuration: configuration)
    }

    @Test(
        "a 416 whose total is the held bytes' size, their file having been longer: the old start is not published"
    )
    func shrunkFileIsNotTheHeldBytes() async throws {
        let held = 100_000
        let old = [UInt8](repeating: UInt8(ascii: "a"), count: held)
        let new = [UInt8](repeating: UInt8(ascii: "b"), count: held)
        let heads = Locked<[String]>([])
        try await RawServer.withRunning(respond: { index, head in
            heads.withLock { $0.append(head) }
            switch index {
            case 0:
                // Version 1, 200,000 bytes: the connection is cut after half of it.
                return Array(
                    "HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nContent-Length: 200000\r\nConnection: close\r\n\r\n".utf8)
                    + old
            case 1:
                // Version 2 is exactly as long as the bytes held, and the server ignores If-Range: it says the range
                // starts past the end.
                return Array(
                    "HTTP/1.1 416 Range Not Satisfiable\r\nETag: \"v2\"\r\nContent-Range: bytes */\(held)\r\nContent-Length: 0\r\n\r\n"
                        .utf8)
            default:
                return Array("HTTP/1.1 200 OK\r\nETag: \"v2\"\r\nContent-Length: \(held)\r\n\r\n".utf8) + new
            }
        }) { port in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let url = try #require(URL(string: "http://127.0.0.1:\(port)/f"))
            let request = DownloadRequest(url: url, destination: .file(dir.file("f")))
            let error = try await #require(throws: DownloadError.self) {
                try await downloader(journal).download(request)
            }
            #expect(error.code == .truncated)
            #expect(dir.contents().contains(".f.haul-partial"), "the partial was not kept")

            _ = try? await downloader(journal).download(request)
            let published = contentsOf(dir.file("f"))
            #expect({ published != old }(), "the first half of version 1 was published as the file")
            #expect({ published == nil || published == new }(), "neither version")
        }
        let ranges = heads.withLock { $0 }.map { head in
            head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("range:") }.map(String.init)
        }
        #expect(ranges.count >= 2 && ranges[1] == "Range: bytes=100000-", "\(ranges)")
    }

    @Test(
        "a resumed 206 without a validator, from a server that ignores If-Range: not appended to the old version"
    )
    func rangeWithoutValidatorIsNotAppended() async throws {
        let half = 100_000
        let old = [UInt8](repeating: UInt8(ascii: "a"), count: 2 * half)
        let new = [UInt8](repeating: UInt8(ascii: "b"), count: 2 * half)
        try await RawServer.withRunning(respond: { index, head in
            switch index {
            case 0:
                return Array(
                    "HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nContent-Length: 200000\r\nConnection: close\r\n\r\n".utf8)
                    + old[..<half]
            case 1:
                // Version 2 (same length), its ETag left out of the 206 (RFC 9110 15.3.7 says it must be there).
                return Array(
                    "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes \(half)-\(2 * half - 1)/\(2 * half)\r\nContent-Length: \(half)\r\n\r\n"
                        .utf8) + new[half...]
            default:
                return Array("HTTP/1.1 200 OK\r\nETag: \"v2\"\r\nContent-Length: \(2 * half)\r\n\r\n".utf8) + new
            }
        }) { port in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let url = try #require(URL(string: "http://127.0.0.1:\(port)/f"))
            let request = DownloadRequest(url: url, destination: .file(dir.file("f")))
            _ = try? await downloader(journal).download(request)
            #expect(dir.contents().contains(".f.haul-partial"), "the partial was not kept")
            _ = try? await downloader(journal).download(request)
            let published = contentsOf(dir.file("f"))
            #expect(
                { published == nil || published == new }(),
                "a file of two versions was published: \(published.map { Set($0[..<half]) } ?? []) then \(published.map { Set($0[half...]) } ?? [])"
            )
        }
    }

    @Test(
        "-N: a completed file the user edits while its new copy comes is not replaced unasked"
    )
    func editedDuringRevalidationIsKept() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let journal = MemoryJournal()
            let file = dir.file("f")
            // Every request gets a new version: the rerun's conditional request finds the file changed.
            let url = server.url(path: "/bytes/f", query: ["size": "300000", "changeAfterFirst": "1"])
            let request = DownloadRequest(url: url, destination: .file(file))
            _ = try await downloader(journal).download(request)
            #expect(try await downloader(journal).download(request).skipped)

            // While the new copy comes, the user saves their own edit of the file.
            let edit = Array("the user's own edit\n".utf8)
            let edited = Locked(false)
            let result = try? await downloader(journal, revalidates: true) { configuration in
                configuration.hooks.beforePublish = {
                    try? Data(edit).write(to: file)
                    edited.withLock { $0 = true }
                }
            }.download(request)
            #expect(edited.withLock { $0 }, "the new copy was never about to be published")
            #expect({ contentsOf(file) == edit }(), "the user's edit was replaced by the new copy")
            #expect(result == nil, "the download succeeded over the user's file")
            // The file is the user's now: the next run applies the conflict policy (fail) to it, and leaves it.
            let error = try await #require(throws: DownloadError.self) {
                try await downloader(journal).download(request)
            }
            #expect(error.code == .destinationExists)
            #expect({ contentsOf(file) == edit }())
            #expect(dir.contents() == ["f"], "\(dir.contents())")
        }
    }

    @Test(
        "a resumed segment's 206 from the primary without a validator: segments are given up, nothing written"
    )
    func segmentWithoutValidatorIsNotWritten() {
        var head = HTTPResponse(status: .init(code: 206))
        head.headerFields[.contentRange] = "bytes 100-199/1000"
        let url = URL(string: "http://a.example/f.bin")!
        let asked = SegmentDecision.Asked(
            offset: 100, total: 1000, given: url, primary: url, isPrimary: true, validator: "\"v1\"", sentIfRange: true)
        let action = SegmentDecision(policy: RetryPolicy()).decide(
            head, from: url, asked: asked, sent: .init(proxy: nil, credentials: false))
        guard case .abandonSegments = action else {
            Issue.record("written: \(action)")
            return
        }
    }
}
