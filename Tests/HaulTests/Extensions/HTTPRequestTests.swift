import Foundation
import HTTPTypes
import HTTPTypesFoundation
import Testing

@testable import Haul

/// The quick way to a GET head gives exactly what HTTPTypes' own initializer gives.
@Suite("HTTPRequest.get")
struct HTTPRequestTests {
    @Test(
        "scheme, authority and path as HTTPRequest(method:url:) has them",
        arguments: [
            "http://127.0.0.1:8080/small/f00001", "http://example.com", "http://example.com/", "http://example.com?q=1",
            "https://example.com/a/b?c=d&e=%20f", "http://example.com:80/x", "http://[::1]:8080/v6",
            "http://user:secret@example.com/private", "http://example.com/page#fragment",
            "http://example.com/%E2%9C%93",
            "http://exämple.com/é", "HTTP://Example.COM/Case", "http://example.com/a?b=/c",
            "http://localhost/a;b=c", "https://example.com:8443",
        ])
    func sameAsInitializer(_ text: String) throws {
        let url = try #require(URL(string: text))
        let expected = HTTPRequest(method: .get, url: url)
        let quick = HTTPRequest.get(url)
        #expect(quick.method == expected.method)
        #expect(quick.scheme == expected.scheme)
        #expect(quick.authority == expected.authority)
        #expect(quick.path == expected.path)
    }
}
