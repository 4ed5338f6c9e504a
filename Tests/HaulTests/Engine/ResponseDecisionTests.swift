import Foundation
import HTTPTypes
import Testing

@testable import Haul

/// The engine's rule book, read as a table: for what a request asked and what the run held, each response head and
/// what the engine does with it. No server, no file, no clock.
@Suite("Response rules (no I/O)")
struct ResponseDecisionTests {
    static let url = SourceListTests.url("http://a.example/f.bin")
    static let etag = "\"v1\""
    static let date = "Sun, 06 Nov 1994 08:49:37 GMT"

    static func head(_ status: Int, _ fields: [(HTTPField.Name, String)] = []) -> HTTPResponse {
        var head = HTTPResponse(status: .init(code: status))
        for (name, value) in fields { head.headerFields.append(HTTPField(name: name, value: value)) }
        return head
    }

    /// One row: a response to a request, and what must follow.
    struct Row: Sendable, CustomTestStringConvertible {
        var rule: String
        var head: HTTPResponse
        var asked = ResponseDecision.Asked()
        var maxSize: Int64?
        var honoursRetryAfter = true
        var expect: @Sendable (ResponseDecision.Action) -> Bool
        var testDescription: String { rule }
    }

    static func range(_ first: Int64, _ last: Int64, _ total: Int64?) -> (HTTPField.Name, String) {
        (.contentRange, "bytes \(first)-\(last)/\(total.map(String.init) ?? "*")")
    }
    static func length(_ count: Int64) -> (HTTPField.Name, String) { (.contentLength, "\(count)") }

    static let rows: [Row] = [
        // Revalidation.
        Row(rule: "304 to a revalidation: the file stays", head: head(304), asked: .init(revalidating: true)) {
            if case .notModified = $0 { true } else { false }
        },
        Row(rule: "304 nobody asked for: a failure naming the status", head: head(304)) {
            if case .fail(let failure, nil) = $0 { !failure.isTransient && failure.error.status == 304 } else { false }
        },
        Row(
            rule: "200 to a revalidation: a new copy, written from zero",
            head: head(200, [length(10), (.eTag, "\"v2\"")]), asked: .init(revalidating: true)
        ) {
            if case .write(let write) = $0 {
                write.newCopy && !write.isRange && write.validator == "\"v2\""
            } else {
                false
            }
        },
        // 416.
        Row(rule: "416 to a first piece: the plain request instead", head: head(416), asked: .init(pieceEnd: 100)) {
            if case .askWithoutPiece = $0 { true } else { false }
        },
        Row(
            rule: "416 stating the total the held bytes are: complete",
            head: head(416, [(.contentRange, "bytes */500")]), asked: .init(from: 500, held: 500)
        ) {
            if case .complete(500) = $0 { true } else { false }
        },
        Row(
            rule: "416 stating the size of another tool's file: that file is complete",
            head: head(416, [(.contentRange, "bytes */500")]), asked: .init(from: 500, continuing: true)
        ) {
            if case .foreignFileComplete(500) = $0 { true } else { false }
        },
        Row(
            rule: "416 stating another total: from zero",
            head: head(416, [(.contentRange, "bytes */900")]), asked: .init(from: 500, held: 500)
        ) {
            if case .startOver(let reason) = $0 { reason == "the server cannot send the rest of it" } else { false }
        },
        Row(rule: "416 without a total: from zero", head: head(416), asked: .init(from: 500, held: 500)) {
            if case .startOver = $0 { true } else { false }
        },
        Row(rule: "416 to a request without a range: a failure", head: head(416)) {
            if case .fail(let failure, nil) = $0 { failure.error.status == 416 } else { false }
        },
        // Other statuses.
        Row(rule: "404: a permanent failure", head: head(404)) {
            if case .fail(let failure, nil) = $0 {
                !failure.isTransient && failure.error.message.hasPrefix("server answered 404")
            } else {
                false
            }
        },
        Row(rule: "503 with Retry-After: transient, and the host held as long", head: head(503, [(.retryAfter, "5")])) {
            if case .fail(let failure, let hold) = $0 {
                failure.isTransient && failure.retryAfter == .seconds(5) && hold == .seconds(5)
            } else {
                false
            }
        },
        Row(
            rule: "429 asking for days: the host is held no longer than the policy waits",
            head: head(429, [(.retryAfter, "999999999")])
        ) {
            if case .fail(_, let hold) = $0 { hold == RetryPolicy().maxRetryAfter } else { false }
        },
        Row(
            rule: "503 with Retry-After, not honoured: no host hold", head: head(503, [(.retryAfter, "5")]),
            honoursRetryAfter: false
        ) {
            if case .fail(let failure, nil) = $0 { failure.isTransient } else { false }
        },
        Row(rule: "500 without Retry-After: transient, no hold", head: head(500)) {
            if case .fail(let failure, nil) = $0 { failure.isTransient && failure.retryAfter == nil } else { false }
        },
        Row(rule: "401 with no credentials sent says so", head: head(401)) {
            if case .fail(let failure, _) = $0 { failure.error.message.contains("none were sent") } else { false }
        },
        // 206.
        Row(rule: "206 to a request without a range: a permanent failure", head: head(206, [range(0, 9, 10)])) {
            if case .fail(let failure, nil) = $0 {
                !failure.isTransient && failure.error.message.contains("206 Partial Content to a request without Range")
            } else {
                false
            }
        },
        Row(
            rule: "206 of another range than the held bytes continue: from zero",
            head: head(206, [range(0, 9, 10)]), asked: .init(from: 5, held: 5)
        ) {
            if case .startOver(let reason) = $0 { reason == "the server sent another range" } else { false }
        },
        Row(
            rule: "206 past the total it states: from zero, transient",
            head: head(206, [range(5, 20, 10)]), asked: .init(from: 5, held: 5)
        ) {
            if case .misfit(let failure) = $0 {
                failure.isTransient && failure.error.message.contains("a range past the total it states")
            } else {
                false
            }
        },
        Row(
            rule: "206 whose body is longer than its range: from zero",
            head: head(206, [range(5, 9, 10), length(6)]), asked: .init(from: 5, held: 5)
        ) {
            if case .misfit(let failure) = $0 {
                failure.error.message.contains("a body of 6 bytes for a range of 5")
            } else {
                false
            }
        },
        Row(
            rule: "206 of another total than an earlier response: from zero",
            head: head(206, [range(5, 9, 10)]), asked: .init(from: 5, held: 5, knownTotal: 12)
        ) {
            if case .misfit(let failure) = $0 {
                failure.error.message.contains("where an earlier response said 12")
            } else {
                false
            }
        },
        Row(
            rule: "206 continuing the held bytes: the rest is appended",
            head: head(206, [range(5, 9, 10), length(5), (.eTag, etag)]), asked: .init(from: 5, held: 5)
        ) {
            if case .write(let write) = $0 {
                write.isRange && write.expected == 5 && write.total == 10 && write.validator == etag
                    && !write.startsContinuation && !write.discardsHeld && write.refusal == nil
            } else {
                false
            }
        },
        Row(
            rule: "206 continuing the held bytes with the validator they were asked with: appended",
            head: head(206, [range(5, 9, 10), (.eTag, etag)]), asked: .init(from: 5, validator: etag, held: 5)
        ) {
            if case .write(let write) = $0 { write.isRange && !write.discardsHeld } else { false }
        },
        Row(
            rule: "206 continuing the held bytes with another validator (If-Range ignored): from zero",
            head: head(206, [range(5, 9, 10), (.eTag, "\"v2\"")]), asked: .init(from: 5, validator: etag, held: 5)
        ) {
            if case .startOver(let reason) = $0 { reason == "the file changed on the server" } else { false }
        },
        Row(
            rule: "206 continuing the held bytes without a validator: it cannot show it is the same version, from zero",
            head: head(206, [range(5, 9, 10)]), asked: .init(from: 5, validator: etag, held: 5)
        ) {
            if case .startOver(let reason) = $0 { reason == "the file changed on the server" } else { false }
        },
        Row(
            rule: "206 continuing another tool's file: it is copied into the partial first",
            head: head(206, [range(5, 9, 10)]), asked: .init(from: 5, continuing: true)
        ) {
            if case .write(let write) = $0 { write.startsContinuation && !write.abandonsContinuation } else { false }
        },
        Row(
            rule: "206 to a first piece: the piece, with the file's total",
            head: head(206, [range(0, 99, 1000), (.eTag, etag)]), asked: .init(pieceEnd: 100)
        ) {
            if case .write(let write) = $0 {
                write.isRange && write.expected == 100 && write.total == 1000 && !write.endsPieces
            } else {
                false
            }
        },
        // 200.
        Row(
            rule: "200 to a first piece: the whole file, and no segments",
            head: head(200, [length(1000)]), asked: .init(pieceEnd: 100)
        ) {
            if case .write(let write) = $0 {
                write.endsPieces && write.expected == 1000 && write.total == 1000
            } else {
                false
            }
        },
        Row(
            rule: "200 where the rest of another tool's file was asked: the conflict policy decides",
            head: head(200, [length(10)]), asked: .init(from: 5, continuing: true)
        ) {
            if case .write(let write) = $0 { write.abandonsContinuation && !write.discardsHeld } else { false }
        },
        Row(
            rule: "200 while bytes are held: they go", head: head(200, [length(10)]), asked: .init(from: 5, held: 5)
        ) {
            if case .write(let write) = $0 { write.discardsHeld && !write.isRange } else { false }
        },
        Row(rule: "200 over the size limit: refused", head: head(200, [length(2000)]), maxSize: 1000) {
            if case .write(let write) = $0 { write.refusal?.code == .sizeLimitExceeded } else { false }
        },
        Row(rule: "200 at the size limit: written", head: head(200, [length(1000)]), maxSize: 1000) {
            if case .write(let write) = $0 { write.refusal == nil } else { false }
        },
        Row(rule: "200 without a length: no total", head: head(200)) {
            if case .write(let write) = $0 { write.total == nil && write.expected == nil } else { false }
        },
        Row(
            rule: "200 in transfer coding gzip (none was asked for): fails for good, naming it",
            head: head(200, [(.transferEncoding, "gzip, chunked")])
        ) {
            if case .fail(let failure, nil) = $0 {
                !failure.isTransient && failure.error.code == .invalidResponse
                    && failure.error.message.contains("transfer coding 'gzip'")
            } else {
                false
            }
        },
        Row(
            rule: "206 in transfer coding deflate: fails",
            head: head(206, [range(100, 199, 1000), (.transferEncoding, "deflate")]), asked: .init(from: 100, held: 100)
        ) {
            if case .fail(let failure, nil) = $0 { failure.error.message.contains("'deflate'") } else { false }
        },
        Row(
            rule: "200 in transfer codings chunked and identity only: written",
            head: head(200, [(.transferEncoding, "Chunked"), (.transferEncoding, "identity , chunked;x=1")])
        ) {
            if case .write = $0 { true } else { false }
        },
        Row(
            rule: "404 in transfer coding gzip: the status is the failure",
            head: head(404, [(.transferEncoding, "gzip")])
        ) {
            if case .fail(let failure, nil) = $0 { failure.error.status == 404 } else { false }
        },
        Row(
            rule: "a weak ETag is no validator: Last-Modified is",
            head: head(200, [(.eTag, "W/\"w\""), (.lastModified, date)])
        ) {
            if case .write(let write) = $0 { write.validator == date && write.lastModified == date } else { false }
        },
    ]

    @Test("each response is decided as the rule says", arguments: rows)
    func decides(_ row: Row) {
        var policy = RetryPolicy()
        policy.honoursRetryAfter = row.honoursRetryAfter
        let decision = ResponseDecision(policy: policy, maxSize: row.maxSize)
        let action = decision.decide(
            row.head, from: Self.url, asked: row.asked, sent: .init(proxy: nil, credentials: false))
        #expect(row.expect(action), "\(action)")
    }

    // MARK: - Segments

    static let mirror = SourceListTests.url("http://b.example/f.bin")

    static func segmentAsked(primary: Bool, validator: String? = etag) -> SegmentDecision.Asked {
        SegmentDecision.Asked(
            offset: 100, total: 1000, given: primary ? url : mirror, primary: url, isPrimary: primary,
            validator: validator, sentIfRange: validator != nil)
    }

    static func decideSegment(_ head: HTTPResponse, _ asked: SegmentDecision.Asked) -> SegmentDecision.Action {
        SegmentDecision(policy: RetryPolicy()).decide(
            head, from: url, asked: asked, sent: .init(proxy: nil, credentials: false))
    }

    @Test("a segment's range that continues it is written; a mirror's first validator is kept")
    func segmentWrites() {
        let same = Self.decideSegment(
            Self.head(206, [Self.range(100, 199, 1000), (.eTag, Self.etag)]), Self.segmentAsked(primary: true))
        guard case .write(nil, nil) = same else {
            Issue.record("\(same)")
            return
        }
        let mirrorFirst = Self.decideSegment(
            Self.head(206, [Self.range(100, 199, 1000), (.eTag, "\"m\"")]),
            Self.segmentAsked(primary: false, validator: nil))
        guard case .write("\"m\"", nil) = mirrorFirst else {
            Issue.record("\(mirrorFirst)")
            return
        }
        // Mirrors make their own validators: another one from a mirror changes nothing.
        let mirrorOther = Self.decideSegment(
            Self.head(206, [Self.range(100, 199, 1000), (.eTag, "\"m2\"")]), Self.segmentAsked(primary: false))
        guard case .write = mirrorOther else {
            Issue.record("\(mirrorOther)")
            return
        }
        // The primary's Last-Modified is kept for the file's time.
        let dated = Self.decideSegment(
            Self.head(206, [Self.range(100, 199, 1000), (.eTag, Self.etag), (.lastModified, Self.date)]),
            Self.segmentAsked(primary: true))
        guard case .write(_, Self.date) = dated else {
            Issue.record("\(dated)")
            return
        }
    }

    @Test("the primary's file changing, or sending no ranges, gives segments up; a mirror doing so fails")
    func segmentsGivenUp() {
        let changed = Self.decideSegment(
            Self.head(206, [Self.range(100, 199, 1000), (.eTag, "\"v2\"")]), Self.segmentAsked(primary: true))
        guard case .abandonSegments("the file changed on the server") = changed else {
            Issue.record("\(changed)")
            return
        }
        let whole = Self.decideSegment(Self.head(200, [Self.length(1000)]), Self.segmentAsked(primary: true))
        guard case .abandonSegments(let reason) = whole, reason.contains("with If-Range") else {
            Issue.record("\(whole)")
            return
        }
        let refused = Self.decideSegment(Self.head(416), Self.segmentAsked(primary: true))
        guard case .abandonSegments("it refused the range (416)") = refused else {
            Issue.record("\(refused)")
            return
        }
        let otherOffset = Self.decideSegment(
            Self.head(206, [Self.range(0, 99, 1000)]), Self.segmentAsked(primary: true))
        guard case .abandonSegments = otherOffset else {
            Issue.record("\(otherOffset)")
            return
        }
        let mirrorWhole = Self.decideSegment(Self.head(200), Self.segmentAsked(primary: false, validator: nil))
        guard case .fail(let failure, nil) = mirrorWhole, !failure.isTransient,
            failure.error.message == "http://b.example/f.bin: it ignores Range"
        else {
            Issue.record("\(mirrorWhole)")
            return
        }
    }

    @Test("a segment's range in a transfer coding other than chunked fails for good, the primary's as a mirror's")
    func segmentInTransferCoding() {
        for primary in [true, false] {
            let coded = Self.decideSegment(
                Self.head(206, [Self.range(100, 199, 1000), (.eTag, Self.etag), (.transferEncoding, "gzip")]),
                Self.segmentAsked(primary: primary))
            guard case .fail(let failure, nil) = coded, !failure.isTransient,
                failure.error.message.contains("transfer coding 'gzip'")
            else {
                Issue.record("\(coded)")
                return
            }
        }
    }

    @Test("another total: the primary's gives segments up, a mirror's fails the download naming who said what")
    func segmentDisagreements() {
        let primary = Self.decideSegment(Self.head(206, [Self.range(100, 199, 999)]), Self.segmentAsked(primary: true))
        guard case .abandonSegments("the file changed on the server (now 999 bytes)") = primary else {
            Issue.record("\(primary)")
            return
        }
        let mirror = Self.decideSegment(Self.head(206, [Self.range(100, 199, 999)]), Self.segmentAsked(primary: false))
        guard case .disagree(let error) = mirror,
            error.message == "the sources disagree on the size: http://a.example/f.bin has 1000 bytes, "
                + "http://b.example/f.bin has 999"
        else {
            Issue.record("\(mirror)")
            return
        }
        let unavailable = Self.decideSegment(Self.head(503), Self.segmentAsked(primary: false))
        guard case .fail(let failure, nil) = unavailable, failure.isTransient, failure.error.status == 503 else {
            Issue.record("\(unavailable)")
            return
        }
        // A 429 or 503 with Retry-After holds the host for every download, as a one-stream response's does.
        let busy = Self.decideSegment(Self.head(429, [(.retryAfter, "7")]), Self.segmentAsked(primary: false))
        guard case .fail(let failure, .seconds(7)?) = busy, failure.isTransient else {
            Issue.record("\(busy)")
            return
        }
    }

    // MARK: - Hops

    static func redirect(_ location: String?) -> HTTPResponse {
        head(302, location.map { [(.location, $0)] } ?? [])
    }

    @Test("a redirect is followed relative to the hop; credentials go at the first hop to another origin, for good")
    func followsRedirects() throws {
        var hops = Hops(url: Self.url, fields: [.authorization: "Basic eDp5", .cookie: "a=b", .accept: "*/*"])
        #expect(try hops.follow(Self.redirect("/g.bin"), limit: 10) == URL(string: "http://a.example/g.bin"))
        #expect(hops.fields[.authorization] != nil && hops.count == 1)
        #expect(
            try hops.follow(Self.redirect("https://c.example/h"), limit: 10).absoluteString == "https://c.example/h")
        #expect(hops.fields[.authorization] == nil && hops.fields[.cookie] == nil && hops.fields[.accept] == "*/*")
        #expect(!hops.wasSecure)
        // Back at the first origin, the credentials stay gone; and after https, the hop remembers it.
        #expect(try hops.follow(Self.redirect("http://a.example/i"), limit: 10).absoluteString == "http://a.example/i")
        #expect(hops.fields[.authorization] == nil && hops.wasSecure && hops.url.absoluteString == "http://a.example/i")
    }

    @Test(
        "a redirect without a usable Location, to another scheme, past the limit or back to a visited URL is an error",
        arguments: [
            (nil, 10, DownloadError.Code.redirectRefused), ("", 10, .redirectRefused),
            ("ftp://a.example/f", 10, .redirectRefused), ("/next", 0, .tooManyRedirects),
            ("/f.bin", 10, .redirectLoop),
        ] as [(String?, Int, DownloadError.Code)])
    func refusesRedirects(location: String?, limit: Int, code: DownloadError.Code) {
        var hops = Hops(url: Self.url, fields: [:])
        #expect(throws: DownloadError.self) { try hops.follow(Self.redirect(location), limit: limit) }
        do {
            _ = try hops.follow(Self.redirect(location), limit: limit)
        } catch {
            #expect(error.code == code, "\(error)")
        }
    }

    @Test("a loop through several URLs is found at its first return")
    func loopThroughSeveral() throws {
        var hops = Hops(url: Self.url, fields: [:])
        _ = try hops.follow(Self.redirect("/b"), limit: 10)
        _ = try hops.follow(Self.redirect("/c"), limit: 10)
        #expect(throws: DownloadError.self) { try hops.follow(Self.redirect("/b"), limit: 10) }
    }

    // MARK: - What a request asks

    @Test("a request's range, If-Range and revalidation condition, from what it asks")
    func rangeFields() {
        let agent = "Haul/test"
        #expect(RangeAsk().isPlain && !RangeAsk(from: 1).isPlain && !RangeAsk(condition: Self.etag).isPlain)
        let rest = RangeAsk(from: 500, ifRange: Self.etag).apply(to: [.range: "bytes=0-1"], userAgent: agent)
        #expect(rest[.range] == "bytes=500-" && rest[.ifRange] == Self.etag && rest[.acceptEncoding] == "identity")
        #expect(rest[.userAgent] == agent)
        let piece = RangeAsk(from: 0, end: 100, ifRange: nil).apply(to: [.userAgent: "mine"], userAgent: agent)
        #expect(piece[.range] == "bytes=0-99" && piece[.ifRange] == nil && piece[.userAgent] == "mine")
        // If-Range means nothing without a range: never sent alone.
        let whole = RangeAsk(ifRange: Self.etag).apply(to: [:], userAgent: agent)
        #expect(whole[.range] == nil && whole[.ifRange] == nil)
        let strong = RangeAsk(condition: Self.etag).apply(to: [:], userAgent: agent)
        #expect(strong[.ifNoneMatch] == Self.etag && strong[.ifModifiedSince] == nil)
        let dated = RangeAsk(from: 10, condition: Self.date).apply(to: [:], userAgent: agent)
        #expect(dated[.ifModifiedSince] == Self.date && dated[.range] == "bytes=10-")
    }
}
