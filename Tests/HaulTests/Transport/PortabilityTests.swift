import Foundation
import Haul
import HaulOperations
import HaulTestServer
import HaulTestSupport
import HTTPTypes
import Testing

@testable import Haul
@testable import HaulURLSession

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What Apple platforms do differently, checked where it can be on Linux: the umask read without `/proc`, repeated
/// `Set-Cookie` fields through Foundation's header dictionary, `URLError`s classified as `NIOTransport`'s failures
/// are, and a background session refused in words.
@Suite("Portability (checked on Linux)", .timeLimit(.minutes(1)))
struct PortabilityTests {
    @Test("the umask read from a probe file is the one /proc shows; a published file takes it")
    func umask() throws {
        let dir = try TemporaryDirectory()
        let probed = try #require(PartialFile.probedUmask(in: dir.path))
        #expect(probed == PartialFile.processUmask)
        #expect(PartialFile.publishedMode == 0o644 & ~probed)
        #expect(dir.contents().isEmpty, "the probe file was left behind")
    }

    @Test(
        "a folded Set-Cookie value is split into its cookies, never inside an Expires date",
        arguments: [
            ("a=1", ["a=1"]),
            ("a=1; Path=/, b=2; Secure, c=3", ["a=1; Path=/", "b=2; Secure", "c=3"]),
            (
                "sid=x; Expires=Wed, 09 Jun 2021 10:18:14 GMT; Path=/,theme=dark; Max-Age=60",
                ["sid=x; Expires=Wed, 09 Jun 2021 10:18:14 GMT; Path=/", "theme=dark; Max-Age=60"]
            ),
            ("", []),
        ])
    func unfold(folded: String, cookies: [String]) {
        #expect(SetCookieFolding.unfold(folded) == cookies)
    }

    @Test("three Set-Cookie fields through URLSessionTransport are three cookies in the jar")
    func threeCookiesThroughURLSession() async throws {
        let response = [
            "HTTP/1.1 200 OK", "Content-Length: 2", "Set-Cookie: a=1; Path=/",
            "Set-Cookie: b=2; Expires=Wed, 09 Jun 2100 10:18:14 GMT; Path=/", "Set-Cookie: c=3; Path=/", "", "ok",
        ].joined(separator: "\r\n")
        try await RawServer.withRunning(responses: [Array(response.utf8)]) { port in
            let dir = try TemporaryDirectory()
            let jar = CookieJar()
            var configuration = testConfiguration()
            configuration.cookies = jar
            let downloader = Downloader(transport: URLSessionTransport(), configuration: configuration)
            let url = try #require(URL(string: "http://127.0.0.1:\(port)/c"))
            _ = try await downloader.download(DownloadRequest(url: url, destination: .file(dir.file("c"))))
            #expect(jar.count == 3)
            let header = jar.cookieHeader(for: url) ?? ""
            #expect(header.contains("a=1") && header.contains("b=2") && header.contains("c=3"), "\(header)")
        }
    }

    @Test("URLError codes: permanent where another attempt meets them again, transient otherwise")
    func urlErrors() {
        let permanent: [URLError.Code] = [
            .appTransportSecurityRequiresSecureConnection, .serverCertificateUntrusted, .serverCertificateHasBadDate,
            .serverCertificateNotYetValid, .serverCertificateHasUnknownRoot, .clientCertificateRequired,
            .clientCertificateRejected, .secureConnectionFailed, .cannotFindHost, .unsupportedURL, .badURL,
            .userAuthenticationRequired, .dataNotAllowed,
        ]
        let transient: [URLError.Code] = [
            .timedOut, .cannotConnectToHost, .networkConnectionLost, .notConnectedToInternet, .dnsLookupFailed,
            .badServerResponse, .resourceUnavailable,
        ]
        for code in permanent {
            let error = URLSessionTransport.readable(URLError(code), host: "h.example")
            #expect((error as? TransportError)?.isTransient == false, "\(code.rawValue)")
        }
        for code in transient {
            let error = URLSessionTransport.readable(URLError(code), host: "h.example")
            #expect((error as? TransportError)?.isTransient == true, "\(code.rawValue)")
        }
        #expect(URLSessionTransport.describe(.cannotFindHost, host: "h.example").message == "no such host: h.example")
        // A cancellation stays what it is: the engine reads it as one.
        #expect(URLSessionTransport.readable(URLError(.cancelled), host: "h") is URLError)
    }

    @Test("a refused certificate through URLSession is not retried")
    func certificateNotRetried() async throws {
        try await TestServer.withRunning(TestTLS.server(certificate: .expired)) { server in
            let dir = try TemporaryDirectory()
            let clock = RecordingClock()
            let downloader = Downloader(
                transport: URLSessionTransport(), configuration: testConfiguration(clock: clock, retries: 3))
            let error = try await #require(throws: DownloadError.self) {
                try await downloader.download(
                    DownloadRequest(
                        url: server.url(path: "/bytes/x", query: ["size": "10"]), destination: .file(dir.file("x"))))
            }
            #expect(clock.recorded.isEmpty, "retried: \(error.message) \(String(describing: error.underlying))")
        }
    }

    @Test("a background configuration is refused with a permanent error that says why")
    func backgroundRefused() async throws {
        let error = try #require(URLSessionTransport.refusal(ofBackground: "haul.test.background"))
        #expect(!error.isTransient)
        #expect(error.message.contains("background configuration 'haul.test.background'"), "\(error.message)")
        #expect(URLSessionTransport.refusal(ofBackground: nil) == nil)
        #if canImport(Darwin)
        // Only Apple's Foundation makes background configurations.
        let transport = URLSessionTransport(configuration: .background(withIdentifier: "haul.test.background"))
        let request = HTTPRequest(method: .get, url: try #require(URL(string: "http://127.0.0.1:1/x")))
        let sent = try await #require(throws: TransportError.self) {
            _ = try await transport.send(request, options: TransportOptions())
        }
        #expect(!sent.isTransient)
        #endif
    }
}
