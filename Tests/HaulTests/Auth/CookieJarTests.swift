import Foundation
import Testing

@testable import Haul

/// The cookie jar: Netscape files as curl and wget write them, and RFC 6265 matching and storage.
@Suite("Cookie jar")
struct CookieJarTests {
    /// A fixed "now" (2023-11-14T22:13:20Z), so expiry does not depend on the clock.
    static let now = Date(timeIntervalSince1970: 1_700_000_000)
    static let future = 1_800_000_000
    static let past = 1_600_000_000

    // MARK: - Netscape files

    @Test("a cookie file survives load, write and load again")
    func fileRoundTrip() throws {
        let directory = try makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = directory.appendingPathComponent("in.txt")
        try write(
            """
            # Netscape HTTP Cookie File
            # a comment, then a blank line

            .example.com\tTRUE\t/\tFALSE\t\(Self.future)\tdomain\tone
            #HttpOnly_www.example.com\tFALSE\t/app\tTRUE\t0\tsession\ttwo
            www.example.com\tFALSE\t/\tFALSE\t\(Self.future)\tempty\t

            """, to: source)
        let jar = CookieJar()
        try jar.load(contentsOf: source, now: Self.now)
        #expect(jar.count == 3)

        let first = directory.appendingPathComponent("out1.txt")
        try jar.write(to: first, now: Self.now)
        let written = try String(contentsOf: first, encoding: .utf8)
        #expect(written.hasPrefix("# Netscape HTTP Cookie File\n"))
        #expect(written.contains(".example.com\tTRUE\t/\tFALSE\t\(Self.future)\tdomain\tone\n"))
        #expect(written.contains("#HttpOnly_www.example.com\tFALSE\t/app\tTRUE\t0\tsession\ttwo\n"))
        #expect(written.contains("www.example.com\tFALSE\t/\tFALSE\t\(Self.future)\tempty\t\n"))

        let reloaded = CookieJar()
        try reloaded.load(contentsOf: first, now: Self.now)
        let second = directory.appendingPathComponent("out2.txt")
        try reloaded.write(to: second, now: Self.now)
        #expect(try String(contentsOf: second, encoding: .utf8) == written)
        let url = try #require(URL(string: "https://www.example.com/app/x"))
        #expect(reloaded.cookieHeader(for: url, now: Self.now) == "session=two; domain=one; empty=")
    }

    @Test("a malformed line is reported with the file and line, never the value")
    func malformedLine() throws {
        let directory = try makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("cookies.txt")
        let cases = [
            "example.com\tFALSE\t/\tFALSE\tsoon\tname\ts3cr3t",
            "example.com\tMAYBE\t/\tFALSE\t0\tname\ts3cr3t",
            "example.com\tFALSE\t/\tFALSE\t0\tname\ts3cr3t\textra",
            "example.com s3cr3t",
        ]
        for bad in cases {
            try write("# comment\nexample.com\tFALSE\t/\tFALSE\t0\tgood\tok\n\(bad)\n", to: file)
            let jar = CookieJar()
            let error = try #require(throws: CookieFileError.self) { try jar.load(contentsOf: file, now: Self.now) }
            #expect(error.path == file.path(percentEncoded: false))
            #expect(error.line == 3)
            #expect(error.description.hasPrefix("\(file.path(percentEncoded: false)):3: "))
            #expect(!error.description.contains("s3cr3t"))
            #expect(jar.count == 0, "a file that fails adds nothing")
        }
    }

    @Test("a missing file is reported with its path")
    func missingFile() throws {
        let directory = try makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("absent.txt")
        let error = try #require(throws: CookieFileError.self) { try CookieJar().load(contentsOf: file) }
        #expect(error.line == nil)
        #expect(error.description.hasPrefix(file.path(percentEncoded: false) + ": "))
    }

    @Test("expired lines are dropped on load, and expired cookies counted only until looked at")
    func expiredLines() throws {
        let directory = try makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("cookies.txt")
        try write(
            "example.com\tFALSE\t/\tFALSE\t\(Self.past)\told\t1\r\n"
                + "example.com\tFALSE\t/\tFALSE\t\(1_700_000_010)\tsoon\t2\r\n", to: file)
        let jar = CookieJar()
        try jar.load(contentsOf: file, now: Self.now)
        #expect(jar.count == 1)
        let later = Self.now.addingTimeInterval(60)
        #expect(jar.count == 1, "not looked at since it expired")
        #expect(jar.cookieHeader(for: try url("http://example.com/"), now: later) == nil)
        #expect(jar.count == 0)
    }

    // MARK: - Matching

    @Test("a domain cookie goes to subdomains, a host-only cookie does not")
    func domainMatching() throws {
        let jar = CookieJar()
        jar.store(setCookie: ["d=1; Domain=example.com", "h=2"], from: try url("http://example.com/"), now: Self.now)
        #expect(jar.cookieHeader(for: try url("http://example.com/"), now: Self.now) == "d=1; h=2")
        #expect(jar.cookieHeader(for: try url("http://www.EXAMPLE.com/"), now: Self.now) == "d=1")
        #expect(jar.cookieHeader(for: try url("http://a.b.example.com/"), now: Self.now) == "d=1")
        #expect(jar.cookieHeader(for: try url("http://notexample.com/"), now: Self.now) == nil)
        #expect(jar.cookieHeader(for: try url("http://example.org/"), now: Self.now) == nil)
        #expect(jar.cookieHeader(for: try url("http://com/"), now: Self.now) == nil)
    }

    @Test("paths match at '/' boundaries only (RFC 6265 5.1.4)")
    func pathMatching() throws {
        let jar = CookieJar()
        jar.store(setCookie: ["p=1; Path=/docs"], from: try url("http://example.com/"), now: Self.now)
        for path in ["/docs", "/docs/", "/docs/x", "/docs/x/y?q=1"] {
            #expect(jar.cookieHeader(for: try url("http://example.com" + path), now: Self.now) == "p=1", "\(path)")
        }
        for path in ["/docsx", "/", "/doc", "/other/docs"] {
            #expect(jar.cookieHeader(for: try url("http://example.com" + path), now: Self.now) == nil, "\(path)")
        }
    }

    @Test("without a Path, the path is the directory of the request path")
    func defaultPath() throws {
        let jar = CookieJar()
        jar.store(setCookie: ["a=1", "b=2; Path=relative"], from: try url("http://h.test/dir/file"), now: Self.now)
        #expect(jar.cookieHeader(for: try url("http://h.test/dir/other"), now: Self.now) == "a=1; b=2")
        #expect(jar.cookieHeader(for: try url("http://h.test/elsewhere"), now: Self.now) == nil)
        #expect(Cookie.defaultPath(of: "") == "/")
        #expect(Cookie.defaultPath(of: "/file") == "/")
        #expect(Cookie.defaultPath(of: "/a/b/") == "/a/b")
    }

    @Test("a Secure cookie goes to https only, and is refused from http")
    func secure() throws {
        let jar = CookieJar()
        jar.store(setCookie: ["s=1; Secure", "p=2"], from: try url("https://example.com/"), now: Self.now)
        #expect(jar.cookieHeader(for: try url("https://example.com/"), now: Self.now) == "s=1; p=2")
        #expect(jar.cookieHeader(for: try url("http://example.com/"), now: Self.now) == "p=2")

        let plain = CookieJar()
        plain.store(setCookie: ["s=1; secure"], from: try url("http://example.com/"), now: Self.now)
        #expect(plain.count == 0)
    }

    @Test("longer paths first, then the earlier created (RFC 6265 5.4)")
    func ordering() throws {
        let jar = CookieJar()
        let site = try url("http://example.com/")
        jar.store(setCookie: ["first=1"], from: site, now: Self.now)
        jar.store(setCookie: ["second=2"], from: site, now: Self.now.addingTimeInterval(1))
        jar.store(setCookie: ["deep=3; Path=/a/b"], from: site, now: Self.now.addingTimeInterval(2))
        jar.store(setCookie: ["mid=4; Path=/a"], from: site, now: Self.now.addingTimeInterval(3))
        let header = jar.cookieHeader(for: try url("http://example.com/a/b/c"), now: Self.now.addingTimeInterval(4))
        #expect(header == "deep=3; mid=4; first=1; second=2")
    }

    // MARK: - Set-Cookie

    @Test("a Domain the host does not domain-match is refused")
    func foreignDomain() throws {
        let jar = CookieJar()
        let from = try url("http://www.example.com/")
        jar.store(
            setCookie: ["a=1; Domain=other.com", "b=2; Domain=ww.example.com", "c=3; Domain=sub.www.example.com"],
            from: from, now: Self.now)
        #expect(jar.count == 0)
        jar.store(setCookie: ["d=4; domain=.EXAMPLE.com"], from: from, now: Self.now)
        #expect(jar.cookieHeader(for: try url("http://api.example.com/"), now: Self.now) == "d=4")
    }

    @Test("a single-label Domain is refused unless it is the host, and kept to that host")
    func singleLabelDomain() throws {
        let jar = CookieJar()
        jar.store(
            setCookie: ["a=1; Domain=com", "b=2; Domain=.com"], from: try url("http://example.com/"), now: Self.now)
        #expect(jar.count == 0)
        jar.store(setCookie: ["c=3; Domain=localhost"], from: try url("http://localhost:8080/"), now: Self.now)
        #expect(jar.cookieHeader(for: try url("http://localhost/"), now: Self.now) == "c=3")
        #expect(jar.cookieHeader(for: try url("http://x.localhost/"), now: Self.now) == nil)
    }

    @Test("for an IP address host, Domain must be that address")
    func ipAddressDomain() throws {
        let jar = CookieJar()
        let from = try url("http://192.168.1.10/")
        jar.store(setCookie: ["a=1; Domain=168.1.10", "b=2; Domain=192.168.1.10"], from: from, now: Self.now)
        #expect(jar.count == 1)
        #expect(jar.cookieHeader(for: from, now: Self.now) == "b=2")
    }

    @Test("Max-Age=0 and an Expires in the past delete the stored cookie")
    func deletion() throws {
        let jar = CookieJar()
        let site = try url("http://example.com/")
        jar.store(setCookie: ["a=1", "b=2; Path=/x"], from: site, now: Self.now)
        #expect(jar.count == 2)
        jar.store(setCookie: ["a=gone; Max-Age=0"], from: site, now: Self.now)
        #expect(jar.count == 1)
        jar.store(setCookie: ["b=gone; Path=/x; Expires=Thu, 01 Jan 1970 00:00:00 GMT"], from: site, now: Self.now)
        #expect(jar.count == 0)
    }

    @Test("Max-Age wins over Expires, whichever comes first")
    func maxAgeBeatsExpires() throws {
        let jar = CookieJar()
        let site = try url("http://example.com/")
        jar.store(
            setCookie: [
                "a=1; Expires=Thu, 01 Jan 1970 00:00:00 GMT; Max-Age=100",
                "b=2; max-AGE=100; EXPIRES=Wed, 01 Jan 2020 00:00:00 GMT",
                "c=3; Max-Age=-1; Expires=Fri, 01 Jan 2100 00:00:00 GMT",
            ], from: site, now: Self.now)
        #expect(jar.cookieHeader(for: site, now: Self.now.addingTimeInterval(99)) == "a=1; b=2")
        #expect(jar.cookieHeader(for: site, now: Self.now.addingTimeInterval(100)) == nil)
    }

    @Test(
        "Expires takes the HTTP date forms and the Netscape one",
        arguments: [
            "Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
            "Sun, 06-Nov-1994 08:49:37 GMT", "06-nov-1994 08:49:37",
        ])
    func dateForms(text: String) {
        #expect(Cookie.parseDate(text[...]) == Date(timeIntervalSince1970: 784_111_777))
    }

    @Test("a cookie date that is not one is ignored", arguments: ["soon", "Sun, 31 Feb 2024 00:00:00 GMT", ""])
    func invalidDates(text: String) {
        #expect(Cookie.parseDate(text[...]) == nil)
    }

    @Test("the same name, domain and path replaces a cookie and keeps its place")
    func replacement() throws {
        let jar = CookieJar()
        let site = try url("http://example.com/")
        jar.store(setCookie: ["a=1", "b=2"], from: site, now: Self.now)
        jar.store(setCookie: ["a=3"], from: site, now: Self.now.addingTimeInterval(5))
        #expect(jar.count == 2)
        #expect(jar.cookieHeader(for: site, now: Self.now) == "a=3; b=2")
        jar.store(setCookie: ["a=4; Path=/other"], from: site, now: Self.now)
        #expect(jar.count == 3, "another path is another cookie")
    }

    @Test("a cookie without '=', with an empty name or over 4096 bytes is refused")
    func refusedValues() throws {
        let jar = CookieJar()
        let site = try url("http://example.com/")
        let big = String(repeating: "x", count: 4096)
        jar.store(setCookie: ["novalue", "=1", " ; a=1", "n=\(big)", "a=b\u{1}c"], from: site, now: Self.now)
        #expect(jar.count == 0)
        jar.store(setCookie: [" n = \(big.dropFirst()) ; HttpOnly"], from: site, now: Self.now)
        #expect(jar.count == 1, "exactly 4096 bytes is accepted, whitespace trimmed")
    }

    // MARK: - Writing

    @Test("the written file has mode 0600 and no temporary file is left")
    func writtenFileMode() throws {
        let directory = try makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("cookies.txt")
        try write("old", to: file)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: file.path)
        let jar = CookieJar()
        jar.store(setCookie: ["a=1; Max-Age=60"], from: try url("http://example.com/"), now: Self.now)
        try jar.write(to: file, now: Self.now)

        let attributes = try FileManager.default.attributesOfItem(atPath: file.path)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["cookies.txt"])
        let text = try String(contentsOf: file, encoding: .utf8)
        #expect(text.hasSuffix("example.com\tFALSE\t/\tFALSE\t\(1_700_000_060)\ta\t1\n"))
    }

    @Test("writing into a directory that does not exist names the path")
    func writeFailure() throws {
        let directory = try makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("missing/cookies.txt")
        let jar = CookieJar()
        jar.store(setCookie: ["a=s3cr3t"], from: try url("http://example.com/"), now: Self.now)
        let error = try #require(throws: CookieFileError.self) { try jar.write(to: file, now: Self.now) }
        #expect(error.path == file.path(percentEncoded: false))
        #expect(error.description.hasPrefix(file.path(percentEncoded: false) + ": "))
        #expect(!error.description.contains("s3cr3t"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
    }

    // MARK: - Concurrency

    @Test("many tasks storing and reading at once")
    func concurrentUse() async throws {
        let jar = CookieJar()
        let site = try url("http://example.com/")
        await withTaskGroup(of: Void.self) { group in
            for task in 0..<8 {
                group.addTask {
                    for operation in 0..<200 {
                        jar.store(setCookie: ["t\(task)_\(operation % 10)=\(operation)"], from: site, now: Self.now)
                        _ = jar.cookieHeader(for: site, now: Self.now)
                    }
                }
            }
        }
        #expect(jar.count == 80)
        let header = try #require(jar.cookieHeader(for: site, now: Self.now))
        #expect(header.split(separator: ";").count == 80)
        #expect(header.contains("t7_9=199"))
    }

    // MARK: - Attacks

    @Test(
        "a Domain that is a public suffix (co.uk, github.io, a wildcard's) is refused unless it is the host itself",
        arguments: [
            // site, Domain, stored, sent to another host under the domain
            ("https://www.example.co.uk/", "co.uk", false, false), ("https://me.github.io/", "github.io", false, false),
            ("https://a.b.ck/", "b.ck", false, false), ("https://www.example.co.uk/", "example.co.uk", true, true),
            ("https://github.io/", "github.io", true, false), ("https://www.ck/", "www.ck", true, true),
        ])
    func publicSuffixes(site: String, domain: String, stored: Bool, sentToOther: Bool) throws {
        let jar = CookieJar()
        jar.store(setCookie: ["sid=1; Domain=\(domain)"], from: try url(site), now: Self.now)
        #expect((jar.count == 1) == stored, "\(domain) from \(site)")
        let other = try url("https://other." + domain + "/")
        #expect((jar.cookieHeader(for: other, now: Self.now) != nil) == sentToOther, "\(domain) from \(site)")
    }

    @Test("the compiled-in list: rules, wildcards, exceptions, Unicode rules in their ASCII form")
    func publicSuffixList() {
        for suffix in ["com", "co.uk", "github.io", "anything.ck", "xn--55qx5d.cn", "test", "localhost"] {
            #expect(PublicSuffixes.isPublicSuffix(suffix), "\(suffix)")
        }
        for domain in ["example.com", "example.co.uk", "www.ck", "me.github.io", "a.b.ck"] {
            #expect(!PublicSuffixes.isPublicSuffix(domain), "\(domain)")
        }
    }

    @Test("a plain-http response neither replaces nor deletes a Secure cookie of the same name (session fixation)")
    func secureCookiesStay() throws {
        let jar = CookieJar()
        jar.store(setCookie: ["sid=GOOD; Secure; Path=/"], from: try url("https://a.test/"), now: Self.now)
        jar.store(setCookie: ["sid=EVIL; Path=/"], from: try url("http://a.test/"), now: Self.now)
        jar.store(
            setCookie: ["sid=EVIL; Domain=a.test; Path=/app"], from: try url("http://www.a.test/app"), now: Self.now)
        jar.store(setCookie: ["sid=; Max-Age=0; Path=/"], from: try url("http://a.test/"), now: Self.now)
        #expect(jar.cookieHeader(for: try url("https://a.test/"), now: Self.now) == "sid=GOOD")
        #expect(jar.cookieHeader(for: try url("https://a.test/app"), now: Self.now) == "sid=GOOD")
        // Another name is fine, and https may replace it.
        jar.store(setCookie: ["theme=dark"], from: try url("http://a.test/"), now: Self.now)
        jar.store(setCookie: ["sid=NEW; Secure; Path=/"], from: try url("https://a.test/"), now: Self.now)
        #expect(jar.cookieHeader(for: try url("https://a.test/"), now: Self.now) == "sid=NEW; theme=dark")
    }

    // MARK: - Helpers

    private func url(_ text: String) throws -> URL {
        try #require(URL(string: text))
    }

    private func makeDirectory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-cookies-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    private func write(_ text: String, to file: URL) throws {
        try Data(text.utf8).write(to: file)
    }
}
