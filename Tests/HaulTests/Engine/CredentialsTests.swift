import Foundation
import HTTPTypes
import Haul
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// Credentials (a URL's user info, a request's own, a provider's) and cookies (a jar), on every transport, against
/// the test server's own record of what each request carried.
@Suite(.timeLimit(.minutes(2)))
struct CredentialsTests {
    private static let user = "us@er"
    private static let password = "p:ss w@rd"
    private static let basic = Credentials(user: user, password: password).basicAuthorization

    /// `url` with the test user and password as its user info.
    private func withUserInfo(_ url: URL) throws -> URL {
        var components = try #require(URLComponents(url: url, resolvingAgainstBaseURL: false))
        components.user = Self.user
        components.password = Self.password
        return try #require(components.url)
    }

    @Test(
        "A URL's user and password go (Basic, before any 401) to its origin, never to another a redirect leads to",
        arguments: TransportKind.allCases)
    func userInfoStaysWithItsOrigin(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let events = Locked([String]())
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration())
            let elsewhere = server.url(path: "/bytes/elsewhere", query: ["size": "10"], host: "localhost")
            let start = server.url(
                path: "/bytes/start",
                query: [
                    "size": "10", "requireAuth": Self.basic, "redirects": "1", "redirectTo": elsewhere.absoluteString,
                ])
            let request = DownloadRequest(url: try withUserInfo(start), destination: .file(dir.file("out")))
            #expect(request.url.user == nil && request.credentials?.password == Self.password)
            _ = try await downloader.download(request) { event in events.withLock { $0.append("\(event)") } }
            let requests = server.stats.requests
            #expect(requests.count == 2)
            #expect(requests[0].authorization == Self.basic)
            #expect(requests[1].host?.hasPrefix("localhost") == true && requests[1].authorization == nil)
            #expect(!events.withLock { $0.joined() }.contains("ss w@rd"))
        }
    }

    @Test("A 401 without credentials fails at once and says none were sent", arguments: TransportKind.allCases)
    func unauthorizedWithoutCredentials(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(transport: kind.makeTransport(), configuration: kind.configuration())
            let url = server.url(path: "/bytes/locked", query: ["size": "10", "requireAuth": Self.basic])
            let error = try await #require(throws: DownloadError.self) {
                try await downloader.download(DownloadRequest(url: url, destination: .file(dir.file("out"))))
            }
            #expect(error.status == 401 && error.message.contains("none were sent"))
            #expect(server.stats.requests.count == 1)

            var wrong = DownloadRequest(url: url, destination: .file(dir.file("out")))
            wrong.credentials = Credentials(user: Self.user, password: "not it")
            let refused = try await #require(throws: DownloadError.self) { try await downloader.download(wrong) }
            #expect(refused.status == 401 && refused.message.contains("refused"))
            #expect(!refused.description.contains("not it"))
            #expect(dir.contents().isEmpty)
        }
    }

    @Test("A credential provider answers per host: a netrc entry for the redirect's host is used there only")
    func providerAnswersPerHost() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            var configuration = testConfiguration()
            let netrc = try Netrc(parsing: "machine localhost login \(Self.user) password \"p:ss w@rd\"\n", file: "t")
            configuration.credentials = netrc
            let downloader = Downloader(transport: TransportKind.nio.makeTransport(), configuration: configuration)
            let target = server.url(
                path: "/bytes/there", query: ["size": "10", "requireAuth": Self.basic], host: "localhost")
            let url = server.url(path: "/bytes/here", query: ["size": "10", "redirectTo": target.absoluteString])
            _ = try await downloader.download(DownloadRequest(url: url, destination: .file(dir.file("out"))))
            let requests = server.stats.requests
            #expect(requests.map(\.authorization) == [nil, Self.basic])

            // The request's own credentials win on their origin; the caller's own field wins over both.
            server.resetStats()
            var own = DownloadRequest(
                url: server.url(path: "/bytes/own", query: ["size": "10"], host: "localhost"),
                destination: .file(dir.file("own")))
            own.credentials = Credentials(user: "mine", password: "x")
            _ = try await downloader.download(own)
            own.headerFields[.authorization] = "Bearer t"
            own.destination = .file(dir.file("own2"))
            _ = try await downloader.download(own)
            #expect(
                server.stats.requests.map(\.authorization) == [
                    Credentials(user: "mine", password: "x").basicAuthorization, "Bearer t",
                ])
        }
    }

    @Test(
        "Cookies: a cookie set on a redirect is sent on the next hop, a file's cookies where they match, none to another site",
        arguments: TransportKind.allCases)
    func cookiesFollowTheirScope(kind: TransportKind) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let file = dir.file("cookies.txt")
            let host = server.baseURL.host(percentEncoded: false) ?? "127.0.0.1"
            let secure = kind.usesTLS ? "TRUE" : "FALSE"
            try """
            # Netscape HTTP Cookie File
            \(host)\tFALSE\t/bytes\t\(secure)\t0\tfromfile\tyes
            \(host)\tFALSE\t/elsewhere\tFALSE\t0\twrongpath\tno
            other.example\tTRUE\t/\tFALSE\t0\tforeign\tno

            """.write(to: file, atomically: true, encoding: .utf8)
            let jar = CookieJar()
            try jar.load(contentsOf: file)
            var configuration = kind.configuration()
            configuration.cookies = jar
            let downloader = Downloader(transport: kind.makeTransport(), configuration: configuration)
            let url = server.url(
                path: "/bytes/login", query: ["size": "10", "redirects": "1", "setCookie": "session=abc; Path=/"])
            _ = try await downloader.download(DownloadRequest(url: url, destination: .file(dir.file("a"))))
            let requests = server.stats.requests
            #expect(requests.map(\.cookie) == ["fromfile=yes", "fromfile=yes; session=abc"])

            // The same cookies never go to another origin's host.
            server.resetStats()
            let elsewhere = server.url(path: "/bytes/x", query: ["size": "10"], host: "localhost")
            _ = try await downloader.download(DownloadRequest(url: elsewhere, destination: .file(dir.file("b"))))
            #expect(server.stats.requests.map(\.cookie) == [nil])
        }
    }
}
