import Foundation
import Testing

@testable import Haul

/// A hostile server against the cookie jar.
@Suite("Cookie jar review")
struct CookieReviewTests {
    static let now = Date(timeIntervalSince1970: 1_700_000_000)

    /// One host of a domain (a user's page on a shared site, a host a redirect passes through) sets thousands of
    /// cookies for the whole domain: every later request to every host of the domain would carry a Cookie header of
    /// megabytes, which servers refuse, so downloads from the domain's other hosts fail for the rest of the run (and,
    /// with --cookie-jar, in later runs). curl caps what it sends at 150 cookies and 8190 bytes (CVE-2022-32205).
    @Test("the Cookie header stays bounded however many cookies a server sets")
    func cookieHeaderIsBounded() throws {
        let jar = CookieJar()
        let evil = try #require(URL(string: "https://evil.example.com/"))
        let filler = String(repeating: "x", count: 200)
        for batch in 0..<40 {
            let values = (0..<50).map { "c\(batch)_\($0)=\(filler); Domain=example.com; Path=/" }
            jar.store(setCookie: values, from: evil, now: Self.now)
        }
        let www = try #require(URL(string: "https://www.example.com/"))
        jar.store(setCookie: ["session=abc; Path=/files"], from: www, now: Self.now)

        let file = try #require(URL(string: "https://www.example.com/files/a.iso"))
        let header = try #require(jar.cookieHeader(for: file, now: Self.now))
        #expect(header.utf8.count <= 8190, "a Cookie header of \(header.utf8.count) bytes")
        #expect(header.split(separator: ";").count <= 150)
        // The longest path comes first, so the host's own session cookie still goes.
        #expect(header.hasPrefix("session=abc"))
    }
}
