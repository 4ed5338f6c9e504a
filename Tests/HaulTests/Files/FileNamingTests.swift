import Foundation
import Testing

@testable import Haul

@Suite("FileNaming")
struct FileNamingTests {
    @Test(
        "a name joined to its directory as NSString's appendingPathComponent joins them",
        arguments: [
            ("/a/b", "c"), ("/a/b/", "c"), ("/", "c"), ("", "c"), ("/a//", "c"), ("/a", "c/"), ("/a", ""), ("/a", "/c"),
            ("a", "c"), ("/dir with space", "é.bin"),
        ])
    func joined(directory: String, name: String) {
        #expect(FileNaming.path(name, in: directory) == (directory as NSString).appendingPathComponent(name))
    }

    @Test(
        "names from URLs",
        arguments: [
            ("http://h/a/b/file.zip", "file.zip"),
            ("http://h/dir/", "index.html"),
            ("http://h", "index.html"),
            ("http://h/a%20b.txt?x=1", "a b.txt"),
            ("http://h/..%2F..%2Fetc%2Fpasswd", "passwd"),
            ("http://h/x%5C..%5Cwin.ini", "win.ini"),
            ("http://h/.hidden", "hidden"),
            ("http://h/a%00b", "ab"),
            // Invisible characters go, so that no name looks like another beside it; ZWJ stays in an emoji.
            ("http://h/re%E2%80%8Bport.pdf", "report.pdf"),
            ("http://h/%EF%BB%BFa%E2%81%A0b.txt", "ab.txt"),
            ("http://h/%F0%9F%91%A9%E2%80%8D%F0%9F%92%BB.png", "\u{1F469}\u{200D}\u{1F4BB}.png"),
        ])
    func fromURL(url: String, expected: String) throws {
        #expect(FileNaming.name(for: try #require(URL(string: url))) == expected)
    }

    @Test("the quick path for plain names gives what the full cleaning gives")
    func quickPathAgrees() throws {
        // Every printable ASCII byte, at the start, in the middle and at the end of a name, and names around the
        // 255-byte limit: the cases the quick path takes and the ones it must hand to the long way.
        var names = ["f00001", "a.b.c", "~x-y_z+1", "(1).tar.gz", String(repeating: "n", count: 255) + ".bin"]
        for byte in UInt8(0x21)..<0x7f
        where byte != UInt8(ascii: "/") && byte != UInt8(ascii: "?")
            && byte != UInt8(ascii: "#")
        {
            let char = String(UnicodeScalar(byte))
            names += [char + "name", "na" + char + "me", "name" + char]
        }
        for name in names {
            let encoded = try #require(name.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed))
            let url = try #require(URL(string: "http://h/dir/" + encoded), "\(name)")
            let expected = FileNaming.sanitize(url.lastPathComponent)
            #expect(FileNaming.name(for: url) == expected, "\(name)")
        }
    }

    @Test(
        "nothing safe left: nil",
        arguments: ["http://h/..", "http://h/%2E%2E", "http://h/%00", "http://h/..%20..", "http://h/%D8%80%2F.."])
    func unsafe(url: String) throws {
        #expect(FileNaming.name(for: try #require(URL(string: url))) == nil)
    }

    @Test(
        "Content-Disposition, RFC 6266",
        arguments: [
            (#"attachment; filename="report.pdf""#, "report.pdf"),
            (#"attachment; filename=plain.txt"#, "plain.txt"),
            (#"attachment; filename="a\"b.txt""#, #"a"b.txt"#),
            (#"attachment; filename="x.txt"; filename*=UTF-8''%E2%82%AC%20rates.txt"#, "€ rates.txt"),
            (#"attachment; filename*=iso-8859-1'en'%A3%20rates.txt"#, "£ rates.txt"),
            (#"attachment; filename="../../etc/passwd""#, "passwd"),
            (#"attachment; filename="C:\\Windows\\evil.exe""#, "evil.exe"),
            // A filename* with nothing safe in it (empty, dots, undecodable) leaves the plain name to be used.
            (#"attachment; filename="kept.txt"; filename*=UTF-8''"#, "kept.txt"),
            (#"attachment; filename*=UTF-8''%2E%2E; filename="kept.txt""#, "kept.txt"),
            (#"attachment; filename="kept.txt"; filename*=UTF-8''%FF%FE"#, "kept.txt"),
        ])
    func contentDisposition(header: String, expected: String) {
        #expect(FileNaming.name(fromContentDisposition: header) == expected)
    }

    @Test("no usable name in Content-Disposition", arguments: ["inline", "attachment", #"attachment; filename="..""#])
    func noDispositionName(header: String) {
        #expect(FileNaming.name(fromContentDisposition: header) == nil)
    }

    @Test(
        "dots and spaces at the start go together; a separator joined to a mark by a Character still separates",
        arguments: [
            (". .", nil as String?), (".. ..", nil), (" . .x", "x"), (".\u{301}x", "\u{301}x"),
            ("a/\u{301}b", "\u{301}b"), ("\u{600}/..", nil), ("a\\\u{301}..", "\u{301}.."),
        ])
    func dotsSpacesAndJoinedSeparators(raw: String, expected: String?) {
        #expect(FileNaming.sanitize(raw).map { Array($0.utf8) } == expected.map { Array($0.utf8) })
    }

    @Test("a name whose first character alone is over 255 bytes is cut between scalars, not to its extension")
    func hugeFirstCharacter() throws {
        let marks = String(repeating: "\u{301}", count: 300)
        let name = try #require(FileNaming.sanitize("x" + marks + ".bin"))
        #expect(name.utf8.starts(with: "x\u{301}".utf8) && name.hasSuffix(".bin") && name.utf8.count <= 255)
        #expect(FileNaming.sanitize("x" + marks + ".").map { $0.unicodeScalars.first == "x" } == true)
        #expect(FileNaming.sanitize("x" + marks).map { !$0.isEmpty && $0.utf8.count <= 255 } == true)
    }

    @Test("numbered names for the rename policy")
    func numbered() {
        #expect(FileNaming.numbered("data.tar.gz", 1) == "data.tar (1).gz")
        #expect(FileNaming.numbered("README", 2) == "README (2)")
        // A name of 255 bytes is cut before its number, not after.
        let long = String(repeating: "n", count: 251) + ".bin"
        #expect(FileNaming.numbered(long, 1) == String(repeating: "n", count: 247) + " (1).bin")
    }

    @Test("long names are cut to 255 bytes, keeping the extension")
    func longNames() {
        let name = String(repeating: "é", count: 300) + ".txt"
        let safe = FileNaming.sanitize(name)
        #expect(safe.map { $0.utf8.count <= 255 } == true)
        #expect(safe?.hasSuffix(".txt") == true)
    }
}

@Suite("HTTPRules")
struct HTTPRulesTests {
    @Test("Retry-After: seconds, HTTP date, junk")
    func retryAfter() {
        let now = Date(timeIntervalSince1970: 1_000_000_000)
        #expect(HTTPRules.retryAfter("120", now: now) == .seconds(120))
        let date = HTTPRules.retryAfter("Sun, 09 Sep 2001 01:47:00 GMT", now: now)
        #expect(date == .seconds(20))
        #expect(HTTPRules.retryAfter("soon", now: now) == nil)
        #expect(HTTPRules.retryAfter("-5", now: now) == .zero)
    }

    @Test("Content-Range parsing")
    func contentRange() {
        #expect(HTTPRules.contentRange("bytes 100-199/1000") == .init(first: 100, last: 199, complete: 1000))
        #expect(HTTPRules.contentRange("bytes 0-9/*") == .init(first: 0, last: 9, complete: nil))
        #expect(HTTPRules.contentRange("bytes 9-0/10") == nil)
        #expect(HTTPRules.unsatisfiedRangeLength("bytes */500") == 500)
    }

    @Test("origins: scheme, host and port")
    func origins() throws {
        let a = HTTPRules.origin(of: try #require(URL(string: "http://Example.com/x")))
        let b = HTTPRules.origin(of: try #require(URL(string: "http://example.com:80/y")))
        let c = HTTPRules.origin(of: try #require(URL(string: "https://example.com/x")))
        #expect(a == b)
        #expect(a != c)
    }

    @Test("backoff: doubling, capped, jittered within bounds; Retry-After capped")
    func backoff() {
        let policy = RetryPolicy(jitter: .none)
        #expect(
            (1...4).map { policy.delay(beforeRetry: $0, retryAfter: nil, random: { 1 }) }
                == [.milliseconds(500), .seconds(1), .seconds(2), .seconds(4)])
        #expect(policy.delay(beforeRetry: 20, retryAfter: nil, random: { 1 }) == .seconds(30))
        #expect(policy.delay(beforeRetry: 1, retryAfter: .seconds(3600), random: { 1 }) == .seconds(300))
        let jittered = RetryPolicy(jitter: .full)
        #expect(jittered.delay(beforeRetry: 3, retryAfter: nil, random: { 0.25 }) == .milliseconds(500))
    }

    @Test(
        "bidirectional formatting characters and C1 controls are dropped from names, from URLs and Content-Disposition",
        arguments: [
            ("http://h/%E2%80%AEtxt.exe", nil as String?, "txt.exe"),
            ("http://h/a%E2%81%A6b%E2%81%A9c%E2%80%8F.txt", nil, "abc.txt"),
            ("http://h/x", "attachment; filename*=UTF-8''%E2%80%AEgpj.exe", "gpj.exe"),
            ("http://h/x", "attachment; filename*=UTF-8''a%C2%9Bb.txt", "ab.txt"),
        ])
    func bidiControls(url: String, disposition: String?, expected: String) throws {
        let name =
            try disposition.map { FileNaming.name(fromContentDisposition: $0) }
            ?? FileNaming.name(for: try #require(URL(string: url)))
        #expect(name == expected)
        // Joiners and marks that are part of ordinary text stay.
        #expect(FileNaming.sanitize("👩\u{200D}💻 café.txt") == "👩\u{200D}💻 café.txt")
    }

    @Test("every name a destination can have gets a partial name of its own that fits in 255 bytes")
    func partialNamesFit() {
        let short = PartialFile.partialPath(forDestination: "/d/file.bin")
        #expect(short == "/d/.file.bin.haul-partial")
        #expect(PartialFile.partialPath(forDestination: "bare.bin") == ".bare.bin.haul-partial")
        for length in [241, 242, 243, 250, 255] {
            for unit in ["a", "é", "😀"] {
                var name = String(repeating: unit, count: length / unit.utf8.count)
                name += String(repeating: "x", count: length - name.utf8.count)
                let partial = PartialFile.partialPath(forDestination: "/d/" + name)
                let partialName = String(partial.dropFirst(3))
                #expect(partialName.utf8.count <= 255, "\(length) \(unit)")
                #expect(partialName.hasPrefix(".") && partialName.hasSuffix(".haul-partial"))
                // Two long names that differ only past the cut have different partials.
                let other = PartialFile.partialPath(forDestination: "/d/" + name.dropLast() + "y")
                #expect(other != partial || length + 14 <= 255, "\(length) \(unit)")
            }
        }
    }
}
