import Foundation
import Haul
import HaulTestServer
import HaulTestSupport
import HTTPTypes
import Testing

@testable import HaulURLSession

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A gzip stream of no bytes: the body of a response from a server that gzips whatever it sends.
private let emptyGzip: [UInt8] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0]

@Suite("Transports: second review", .timeLimit(.minutes(1)))
struct TransportsSecondReviewTests {
    /// URLSession decodes a body on its own, so `URLSessionTransport` refuses an encoded body the engine would store.
    /// A redirect's or an error's body is never stored: its encoding must not turn it into another failure.
    @Test("through URLSession, an encoded redirect is followed and an encoded 404 is a 404, not a transport error")
    func encodedBodiesNotStored() async throws {
        let gzipped = "Content-Encoding: gzip\r\nContent-Length: \(emptyGzip.count)\r\n\r\n"
        try await RawServer.withRunning(respond: { _, head in
            if head.hasPrefix("GET /start ") {
                return Array("HTTP/1.1 302 Found\r\nLocation: /file.bin\r\n\(gzipped)".utf8) + emptyGzip
            }
            if head.hasPrefix("GET /file.bin ") {
                return Array("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".utf8)
            }
            return Array("HTTP/1.1 404 Not Found\r\n\(gzipped)".utf8) + emptyGzip
        }) { port in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: URLSessionTransport(), configuration: testConfiguration())
            let events = EventLog()
            let result = try await downloader.download(
                DownloadRequest(
                    url: try #require(URL(string: "http://127.0.0.1:\(port)/start")),
                    destination: .file(dir.file("out"))),
                onEvent: events.record)
            #expect(contentsOf(result.fileURL) == Array("hello".utf8))
            #expect(events.redirects == 1 && events.retries == 0, "\(events.all)")

            let missing = EventLog()
            let error = try await #require(throws: DownloadError.self) {
                try await downloader.download(
                    DownloadRequest(
                        url: try #require(URL(string: "http://127.0.0.1:\(port)/missing")),
                        destination: .file(dir.file("gone"))),
                    onEvent: missing.record)
            }
            #expect(error.code == .httpStatus, "\(error)")
            #expect(missing.retries == 0)
            #expect(dir.contents() == ["out"])
        }
    }

    /// A server that encodes a body although `identity` was asked does so again on every attempt.
    @Test("an encoded body through URLSession fails at once, without retries")
    func encodedBodyNotRetried() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: URLSessionTransport(), configuration: testConfiguration())
            let events = EventLog()
            let error = try await #require(throws: DownloadError.self) {
                try await downloader.download(
                    DownloadRequest(
                        url: server.url(path: "/bytes/z", query: ["size": "3000", "gzip": "1"]),
                        destination: .directory(dir.url)),
                    onEvent: events.record)
            }
            #expect(error.code == .transport && error.description.contains("Content-Encoding"), "\(error)")
            #expect(events.retries == 0 && server.stats.requestCount == 1, "\(events.retries) retries")
            #expect(dir.contents().isEmpty)
        }
    }

    /// FoundationNetworking reports what libcurl could not name by code as an unknown error, with libcurl's words.
    @Test("a chunked body cut short through URLSession fails as truncated, naming why")
    func cutChunkedBodyNamed() async throws {
        let response = Array(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n1000\r\nabc".utf8)
        try await RawServer.withRunning(responses: [response]) { port in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: URLSessionTransport(), configuration: testConfiguration(retries: 0))
            let url = try #require(URL(string: "http://127.0.0.1:\(port)/cut"))
            let error = try await #require(throws: DownloadError.self) {
                try await downloader.download(DownloadRequest(url: url, destination: .file(dir.file("out"))))
            }
            #expect(error.code == .truncated, "\(error)")
            #expect(!error.message.contains("URLError -1"), "\(error)")
            #if canImport(FoundationNetworking)
            #expect(error.message.contains("transfer closed with outstanding read data remaining"), "\(error)")
            #endif
            #expect(dir.contents().isEmpty)
        }
    }
}

/// Over a minute: a head later than URLSession's default request timeout (60 seconds).
/// URLSession ends a request idle for its timeout interval (on Linux a head that comes after it never arrives); the
/// engine's stall timeout is the limit that must hold, so URLSession's own is out of its way. (A server answering
/// after 62 s is the end-to-end form of this: it fails at 60 s with URLSession's defaults, and takes a minute.)
extension TransportsSecondReviewTests {
    @Test("URLSession's own idle timeouts, the request's and the session's, are a day: the stall timeout decides")
    func urlSessionIdleTimeoutOutOfTheWay() throws {
        let url = try #require(URL(string: "http://127.0.0.1:1/f"))
        var options = TransportOptions()
        options.connectTimeout = .seconds(10)
        let request = URLSessionTransport.urlRequest(HTTPRequest(method: .get, url: url), url: url, options: options)
        #expect(request.timeoutInterval >= 24 * 3600)
        #expect(request.value(forHTTPHeaderField: "Accept-Encoding") == "identity")
        #expect(URLSessionTransport().sessionIdleTimeout >= 24 * 3600)
        let configured = URLSessionConfiguration.ephemeral
        configured.timeoutIntervalForRequest = 5
        #expect(URLSessionTransport(configuration: configured).sessionIdleTimeout >= 24 * 3600)
    }
}
