import Foundation
import HTTPTypes
import Testing

@testable import Haul

/// Proxy URLs, the environment as curl reads it, and `no_proxy` matching: pure rules, no I/O.
@Suite struct ProxyConfigurationTests {
    private func url(_ text: String) throws -> URL { try #require(URL(string: text)) }

    @Test func proxyURLsParseAsCurlTakesThem() throws {
        let plain = try Proxy(url: "proxy.example:3128")
        #expect(plain == Proxy(kind: .http, host: "proxy.example", port: 3128))
        #expect(try Proxy(url: "http://proxy.example").port == 1080)
        #expect(try Proxy(url: "https://proxy.example").port == 443)
        #expect(try Proxy(url: "SOCKS5H://[::1]:9050") == Proxy(kind: .socks5h, host: "::1", port: 9050))
        let withUser = try Proxy(url: "socks5://us%40er:p%3Ass@127.0.0.1:1080")
        #expect(withUser.credentials == Credentials(user: "us@er", password: "p:ss"))
        #expect(withUser.authority == "127.0.0.1:1080")
        #expect(try Proxy(url: "http://[::1]:8080").authority == "[::1]:8080")
    }

    @Test func badProxyURLsAreRefusedWithoutShowingThePassword() {
        for text in ["socks4://u:hunter2@h:1", "http://u:hunter2@h:1/path", "http://u:hunter2@:1", "http://h:99999"] {
            let error = #expect(throws: ProxyError.self) { try Proxy(url: text) }
            #expect(error?.message.contains("hunter2") == false, "\(text)")
            #expect(error?.message.isEmpty == false)
        }
        #expect(Proxy.redacted("http://u:hunter2@h:1") == "http://u:***@h:1")
        #expect(Proxy.redacted("u:hunter2@h:1") == "u:***@h:1")
        #expect(Proxy.redacted("http://h:1") == "http://h:1")
    }

    @Test func descriptionsHideThePassword() throws {
        let proxy = try Proxy(url: "http://user:hunter2@127.0.0.1:3128")
        #expect(proxy.description == "http://user:***@127.0.0.1:3128")
        #expect(!"\(proxy)".contains("hunter2") && !String(reflecting: proxy.credentials).contains("hunter2"))
        #expect(proxy.authenticationFailure(answered: "407 Proxy Authentication Required").contains("refused"))
    }

    @Test func environmentIsReadAsCurlReadsIt() throws {
        let http = try ProxyConfiguration.environment(["http_proxy": "http://a:1", "HTTP_PROXY": "http://evil:1"])
        #expect(http.http?.host == "a" && http.https == nil)
        // HTTP_PROXY alone is ignored: a CGI program gets a client's `Proxy:` header under that name.
        #expect(try ProxyConfiguration.environment(["HTTP_PROXY": "http://evil:1"]) == .none)
        let secure = try ProxyConfiguration.environment(["HTTPS_PROXY": "http://b:2", "all_proxy": "socks5h://c:3"])
        #expect(secure.https?.host == "b" && secure.http?.host == "c" && secure.http?.kind == .socks5h)
        #expect(
            try ProxyConfiguration.environment(["https_proxy": "http://l:1", "HTTPS_PROXY": "http://u:1"]).https?.host
                == "l")
        #expect(try ProxyConfiguration.environment(["http_proxy": "  ", "ALL_PROXY": "http://d:4"]).http?.host == "d")
        let error = #expect(throws: ProxyError.self) {
            try ProxyConfiguration.environment(["https_proxy": "gopher://u:hunter2@x:1"])
        }
        #expect(error?.message.hasPrefix("https_proxy: ") == true && error?.message.contains("hunter2") == false)
    }

    @Test func theProxyIsChosenPerURLAndNoProxyWins() throws {
        let proxy = Proxy(kind: .http, host: "p", port: 1)
        let configuration = try ProxyConfiguration.environment([
            "all_proxy": "http://p:1", "no_proxy": "internal.example, .corp.example,10.0.0.0/8,[::1]:8443,localhost:81",
        ])
        #expect(configuration.proxy(for: try url("http://example.com/a")) == proxy)
        #expect(configuration.proxy(for: try url("https://example.com/a")) == proxy)
        #expect(configuration.proxy(for: try url("ftp://example.com/a")) == nil)
        for direct in [
            "http://internal.example/", "http://a.b.internal.example/", "http://corp.example/",
            "http://x.corp.example/",
            "http://10.1.2.3/", "https://[::1]:8443/", "http://localhost:81/", "http://INTERNAL.example./",
        ] {
            #expect(configuration.proxy(for: try url(direct)) == nil, "\(direct)")
        }
        for proxied in [
            "http://notinternal.example/", "http://11.0.0.1/", "https://[::1]/", "http://localhost/",
            "http://internal.example.evil/",
        ] {
            #expect(configuration.proxy(for: try url(proxied)) == proxy, "\(proxied)")
        }
        #expect(ProxyConfiguration.all(proxy, except: NoProxyList("*")).proxy(for: try url("http://x/")) == nil)
    }

    @Test func noProxyMatchesNetworksAndPorts() {
        let list = NoProxyList("192.168.0.0/16, fd00::/8, 127.0.0.1, example.org:8080")
        #expect(list.matches(host: "192.168.44.1", port: 80))
        #expect(!list.matches(host: "192.169.0.1", port: 80))
        #expect(list.matches(host: "fd12::1", port: 443) && list.matches(host: "[fd12::1]", port: 443))
        #expect(!list.matches(host: "fe80::1", port: 443))
        #expect(list.matches(host: "127.0.0.1", port: 1) && !list.matches(host: "127.0.0.2", port: 1))
        #expect(list.matches(host: "www.example.org", port: 8080) && !list.matches(host: "example.org", port: 80))
        // `:PORT` alone: every host on that port.
        #expect(NoProxyList(":8080").matches(host: "anything.example", port: 8080))
        #expect(!NoProxyList(":8080").matches(host: "anything.example", port: 80))
        #expect(!NoProxyList("").matches(host: "anything", port: 80))
    }

    @Test func credentialsParseAndNeverShowThePassword() throws {
        #expect(Credentials(userColonPassword: "a:b:c") == Credentials(user: "a", password: "b:c"))
        #expect(Credentials(userColonPassword: "alone") == Credentials(user: "alone", password: ""))
        let fromURL = try #require(Credentials(userInfoOf: try url("https://us%20er:p%40ss@h/")))
        #expect(fromURL == Credentials(user: "us er", password: "p@ss"))
        #expect(Credentials(userInfoOf: try url("https://h/")) == nil)
        #expect(fromURL.basicAuthorization == "Basic " + Data("us er:p@ss".utf8).base64EncodedString())
        #expect("\(fromURL)" == "us er:***" && !String(reflecting: fromURL).contains("p@ss"))
    }

    @Test func aRequestKeepsNoUserInfoInItsURL() throws {
        var request = DownloadRequest(
            url: try url("https://user:hunter2@example.com/f.bin"), destination: .file(URL(fileURLWithPath: "/tmp/f")))
        #expect(request.url.absoluteString == "https://example.com/f.bin")
        #expect(request.credentials == Credentials(user: "user", password: "hunter2"))
        let encoded = String(decoding: try JSONEncoder().encode(request), as: UTF8.self)
        #expect(!encoded.contains("hunter2") && !encoded.contains("user"))
        #expect(try JSONDecoder().decode(DownloadRequest.self, from: Data(encoded.utf8)).credentials == nil)
        request.headerFields[.authorization] = "Bearer t0ken"
        request.headerFields[.cookie] = "session=c00kie"
        request.headerFields[.proxyAuthorization] = "Basic cHJveHk="
        request.headerFields[.accept] = "text/plain"
        let withFields = String(decoding: try JSONEncoder().encode(request), as: UTF8.self)
        #expect(!withFields.contains("t0ken") && !withFields.contains("c00kie") && !withFields.contains("cHJveHk="))
        let decoded = try JSONDecoder().decode(DownloadRequest.self, from: Data(withFields.utf8))
        #expect(decoded.headerFields == [.accept: "text/plain"] && decoded.url == request.url)
        request.url = try url("https://other:pw@example.com/g.bin")
        #expect(request.credentials?.user == "other" && request.url.user == nil)
        request.url = try url("https://example.com/h.bin")
        #expect(request.credentials?.user == "other")
    }

    @Test func originCredentialsAnswerForTheirOriginOnly() throws {
        var provider = OriginCredentials()
        provider.add(Credentials(user: "a", password: "b"), for: try url("https://example.com/x"))
        #expect(provider.credentials(for: try url("https://EXAMPLE.com:443/other"))?.user == "a")
        #expect(provider.credentials(for: try url("http://example.com/x")) == nil)
        #expect(provider.credentials(for: try url("https://example.com:8443/x")) == nil)
        #expect(provider.credentials(for: try url("https://www.example.com/x")) == nil)
    }
}
