import Foundation
import HTTPTypes
import Testing

@testable import Haul

/// The head of each request the engine sends, built from its URL's text: the scheme, authority and path that
/// `HTTPRequest(method:url:)` gives, for every form of URL a download or a redirect can have (no I/O).
@Suite("The request head from a URL (no I/O)")
struct RequestHeadTests {
    @Test(
        "scheme, authority and path are HTTPRequest(url:)'s",
        arguments: [
            "http://127.0.0.1:8080/small/f001.bin", "https://example.test/a/b/c.tar.gz?x=1&y=%20z",
            "http://example.test", "http://example.test/", "HTTP://Example.TEST:80/Mixed/Case",
            "http://[::1]:9000/v6/file", "http://[fe80::1%25eth0]/zone", "http://h/a%20b/c%2Fd?q=%C3%A9#fragment",
            "http://h/path#only-fragment", "http://h#frag", "https://h:443/",
            "http://h/a b", "http://h/%E2%82%AC?currency", "http://h?x=1",
            // Forms the fast reading leaves to HTTPRequest(url:) itself.
            "http://user:pw@h/with-userinfo", "http://h:/empty-port",
        ])
    func sameAsHTTPTypes(text: String) throws {
        let url = try #require(URL(string: text))
        let head = HTTPRules.getRequest(for: url)
        let reference = HTTPRequest(method: .get, url: url)
        #expect(head.method == .get)
        #expect(head.scheme == reference.scheme)
        #expect(head.authority == reference.authority)
        #expect(head.path == reference.path)
        #expect(head.headerFields.isEmpty)
    }

    @Test("a redirect's target, resolved against the URL it came from, gives its own head")
    func resolvedTarget() throws {
        let base = try #require(URL(string: "http://h:8080/dir/page?old=1"))
        let target = try HTTPRules.redirectTarget(location: "../other/file.bin?new=2", from: base).get()
        let head = HTTPRules.getRequest(for: target)
        #expect(head.scheme == "http" && head.authority == "h:8080" && head.path == "/other/file.bin?new=2")
    }
}
