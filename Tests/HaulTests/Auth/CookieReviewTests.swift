import Foundation
import HaulTestSupport
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

    /// What a server sets is kept within bounds: a flood for a domain evicts that domain's oldest cookies, not the
    /// host's own; a response of thousands of fields is read for its first 50; the jar keeps at most 3,000.
    @Test("a server's cookies are stored within bounds, oldest evicted first, a host's own kept")
    func storedCookiesAreBounded() throws {
        let jar = CookieJar()
        let www = try #require(URL(string: "https://www.example.com/"))
        jar.store(setCookie: ["session=abc"], from: www, now: Self.now)
        let evil = try #require(URL(string: "https://evil.example.com/"))
        let flood = (0..<1000).map { "f\($0)=x; Domain=example.com" }
        jar.store(setCookie: flood, from: evil, now: Self.now)
        #expect(jar.count == 1 + CookieJar.maximumPerResponse)
        for batch in 0..<10 {
            jar.store(
                setCookie: (0..<50).map { "b\(batch)_\($0)=x; Domain=example.com" }, from: evil, now: Self.now)
        }
        #expect(jar.count == 1 + CookieJar.maximumPerDomain)
        // The jar as written (a Cookie header carries only its first 150).
        var names = try storedNames(jar)
        #expect(names.contains("session"))
        #expect(names.contains("b9_49"), "the newest is kept")
        #expect(!names.contains("f0"), "the oldest of the domain goes first")

        // Hosts of their own (a redirect chain through many names) fill the jar up to its bound, no further.
        for host in 0..<20 {
            let url = try #require(URL(string: "https://h\(host).other.test/"))
            for batch in 0..<4 {
                jar.store(setCookie: (0..<50).map { "c\(batch)_\($0)=x" }, from: url, now: Self.now)
            }
        }
        #expect(jar.count == CookieJar.maximumStored)
        names = try storedNames(jar)
        #expect(names.contains("c3_49"), "the newest is kept")
    }

    /// The names of the cookies `jar` holds, from the file it writes.
    private func storedNames(_ jar: CookieJar) throws -> Set<String> {
        let dir = try TemporaryDirectory()
        let file = dir.file("jar.txt")
        try jar.write(to: file, now: Self.now)
        let text = try String(contentsOf: file, encoding: .utf8)
        return Set(
            text.split(separator: "\n").filter { !$0.hasPrefix("#") }.compactMap { line in
                let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
                return fields.count == 7 ? String(fields[5]) : nil
            })
    }
}
