import Foundation
import Haul
import HaulNIO
import HaulOperations
import HaulTestSupport
import Testing

/// Hostile or sloppy HTTP servers, talking raw bytes to the NIO transport and the engine: a Content-Range whose
/// length overflows or whose total is unknown, and bytes after a response on a kept-alive connection.
@Suite("Servers that lie or are sloppy", .timeLimit(.minutes(1)))
struct LyingServerHazardTests {
    private static func downloader(retries: Int = 0) -> Downloader {
        Downloader(transport: NIOTransport(), configuration: testConfiguration(retries: retries))
    }

    /// The `Range: bytes=a-b` of a request head, as (a, b); b is nil for `bytes=a-`.
    private static func range(in head: String) -> (Int, Int?)? {
        guard let line = head.split(separator: "\r\n").first(where: { $0.lowercased().hasPrefix("range:") }),
            let equals = line.firstIndex(of: "=")
        else { return nil }
        let parts = line[line.index(after: equals)...].split(separator: "-", omittingEmptySubsequences: false)
        guard let first = Int(parts[0].trimmingCharacters(in: .whitespaces)) else { return nil }
        return (first, parts.count > 1 ? Int(parts[1]) : nil)
    }

    @Test("a 206 whose Content-Range total is '*' (length unknown) to a first piece: the file still comes whole")
    func firstPieceWithUnknownTotalComesWhole() async throws {
        let file = (0..<300).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 1) }
        try await RawServer.withRunning(respond: { _, head in
            // An honest server that does not know the complete length (RFC 9110 14.4 allows '*').
            guard let (first, last) = Self.range(in: head) else {
                return Array("HTTP/1.1 200 OK\r\nContent-Length: 300\r\n\r\n".utf8) + file
            }
            let end = min(last ?? 299, 299)
            let body = Array(file[first...end])
            return Array(
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes \(first)-\(end)/*\r\nContent-Length: \(body.count)\r\n\r\n"
                    .utf8) + body
        }) { port in
            let dir = try TemporaryDirectory()
            var request = DownloadRequest(
                url: try #require(URL(string: "http://127.0.0.1:\(port)/f")), destination: .file(dir.file("f")))
            request.maxConnections = 2
            request.minimumSegmentSize = 100
            let result = try? await Self.downloader().download(request)
            // Either the whole file or a failure; never the first 100 bytes published as the file.
            if result != nil {
                let got = contentsOf(dir.file("f"))
                #expect(got?.count == 300, "published \(got?.count ?? -1) bytes of a 300-byte file")
            }
        }
    }

    @Test("a 206 with Content-Range 'bytes 0-9223372036854775807/*' to a first piece fails, not traps")
    func hugeContentRangeToFirstPiece() async throws {
        let body = [UInt8](repeating: 0x41, count: 100)
        let response =
            Array(
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9223372036854775807/*\r\nContent-Length: 100\r\n\r\n"
                    .utf8) + body
        try await RawServer.withRunning(responses: [response]) { port in
            let dir = try TemporaryDirectory()
            var request = DownloadRequest(
                url: try #require(URL(string: "http://127.0.0.1:\(port)/f")), destination: .file(dir.file("f")))
            request.maxConnections = 2
            request.minimumSegmentSize = 100
            await #expect(throws: DownloadError.self) { _ = try await Self.downloader().download(request) }
        }
    }

    @Test("bytes after a Content-Length body are not read as the start of the next download's response")
    func leftoverBytesInjectIntoNextResponse() async throws {
        let first = Array(
            ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
                + "HTTP/1.1 200 OK\r\nContent-Disposition: attachment; filename=\"injected.txt\"\r\nX-Junk: ").utf8)
        let second = Array("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nworld".utf8)
        try await RawServer.withRunning(responses: [first, second]) { port in
            let dir = try TemporaryDirectory()
            let downloader = Self.downloader()
            let destination = Destination.directory(dir.url, useContentDisposition: true)
            _ = try await downloader.download(
                DownloadRequest(url: try #require(URL(string: "http://127.0.0.1:\(port)/a")), destination: destination))
            let result = try await downloader.download(
                DownloadRequest(url: try #require(URL(string: "http://127.0.0.1:\(port)/b")), destination: destination))
            #expect(
                (result.filePath as NSString).lastPathComponent == "b",
                "the second download was named by the first response's extra bytes: \(result.filePath)")
        }
    }

    @Test("an extra CRLF after a Content-Length body does not break the next download on the connection")
    func extraCRLFAfterBodyBreaksNextDownload() async throws {
        let first = Array("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello\r\n".utf8)
        let second = Array("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nworld".utf8)
        try await RawServer.withRunning(responses: [first, second]) { port in
            let dir = try TemporaryDirectory()
            let downloader = Self.downloader()
            _ = try await downloader.download(
                DownloadRequest(
                    url: try #require(URL(string: "http://127.0.0.1:\(port)/a")), destination: .directory(dir.url)))
            do {
                _ = try await downloader.download(
                    DownloadRequest(
                        url: try #require(URL(string: "http://127.0.0.1:\(port)/b")), destination: .directory(dir.url)))
            } catch {
                Issue.record("second download failed: \(error)")
            }
        }
    }

    @Test(
        "a body in a transfer coding Haul did not ask for is no file: nothing is published, the error names the coding",
        arguments: [
            "Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            "Transfer-Encoding: gzip\r\nConnection: close\r\n\r\nhello",
        ])
    func unaskedTransferCoding(framing: String) async throws {
        let response = Array(("HTTP/1.1 200 OK\r\n" + framing).utf8)
        try await RawServer.withRunning(responses: [response]) { port in
            let dir = try TemporaryDirectory()
            let request = DownloadRequest(
                url: try #require(URL(string: "http://127.0.0.1:\(port)/f.gz")), destination: .file(dir.file("f.gz")))
            let error = await #expect(throws: DownloadError.self) { _ = try await Self.downloader().download(request) }
            #expect(error?.message.contains("transfer coding 'gzip'") == true, "\(String(describing: error))")
            #expect(contentsOf(dir.file("f.gz")) == nil, "a coded body was published as the file")
        }
    }
}
