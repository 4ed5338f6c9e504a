import HTTPTypes
import NIOCore
import HaulTestSupport
import Testing

@testable import HaulNIO

/// HaulNIO's response parser over random streams of valid responses and random damage to them: however the reads
/// split, the same heads, body bytes and ends; a response ends as soon as its last byte is read; damage is never a
/// crash nor a body past its length. Seeded: a failure names its seed (and case), and the same seed fails the same
/// way.
@Suite("ResponseParser, random splits and corruption", .timeLimit(.minutes(1)))
struct ResponseParserFuzzTests {
    static let seeds: [UInt64] = Array(0..<4)

    @Test(
        "valid responses parse the same fed whole, cut in two anywhere, byte by byte and in random reads",
        arguments: seeds)
    func splitsAnywhere(seed: UInt64) {
        var random = SplitMix(seed: seed)
        for index in 0..<8 {
            // Larger bodies (in more chunks) for the streams that are not also cut at every byte.
            let script = Script.random(&random, largeBodies: index >= 2)
            let context = "seed \(seed), stream \(index)"
            let expected = Outcome(events: script.events(upTo: script.bytes.count), endsAtClose: script.closeDelimited)
            #expect(Self.parse([script.bytes[...]], expecting: script.heads) == expected, "\(context), whole")
            #expect(
                Self.parse(script.bytes.map { [$0][...] }, expecting: script.heads) == expected, "\(context), bytes")
            for _ in 0..<6 {
                let pieces = Self.randomPieces(of: script.bytes, &random)
                #expect(Self.parse(pieces, expecting: script.heads) == expected, "\(context), random reads")
            }
            // Every cut, for the first streams (each cut parses the whole stream again).
            guard index < 2 else { continue }
            for cut in 0...script.bytes.count {
                let pieces = [script.bytes[..<cut], script.bytes[cut...]]
                #expect(Self.parse(pieces, expecting: script.heads) == expected, "\(context), cut at \(cut)")
            }
        }
    }

    @Test(
        "a stream cut short anywhere gives exactly the heads, body bytes and ends that have arrived, and no error",
        arguments: seeds)
    func truncatedAnywhere(seed: UInt64) {
        var random = SplitMix(seed: seed)
        for index in 0..<3 {
            let script = Script.random(&random, largeBodies: false)
            for length in 0...script.bytes.count {
                let expected = Outcome(
                    events: script.events(upTo: length), endsAtClose: script.endsAtClose(upTo: length))
                // In one read mostly, in random reads at every fourth length (the other tests split more).
                let cut = Array(script.bytes[..<length])
                let pieces = length.isMultiple(of: 4) ? Self.randomPieces(of: cut, &random) : [cut[...]]
                #expect(
                    Self.parse(pieces, expecting: script.heads) == expected,
                    "seed \(seed), stream \(index), first \(length) of \(script.bytes.count) bytes")
            }
        }
    }

    @Test(
        "damaged streams never crash, parse the same however the reads split, and never give a body past its length",
        arguments: seeds)
    func damaged(seed: UInt64) {
        var random = SplitMix(seed: seed)
        for index in 0..<150 {
            let script = Script.random(&random, largeBodies: false)
            let bytes = Self.damage(script.bytes, &random)
            let context = "seed \(seed), case \(index)"
            let whole = Self.parse([bytes[...]], expecting: script.heads)
            if index.isMultiple(of: 4) {
                #expect(Self.parse(bytes.map { [$0][...] }, expecting: script.heads) == whole, "\(context), bytes")
            }
            for _ in 0..<2 {
                let pieces = Self.randomPieces(of: bytes, &random)
                #expect(Self.parse(pieces, expecting: script.heads) == whole, "\(context), random reads")
            }
            Self.checkBodiesWithinFraming(whole, heads: script.heads, context)
        }
    }

    // MARK: Driving the parser

    /// What the parser reported, one body event per run of body parts.
    enum Event: Equatable, CustomStringConvertible {
        case head(status: Int, fields: [String])
        case body([UInt8])
        case end(keepAlive: Bool)

        var description: String {
            switch self {
            case .head(let status, let fields): "head \(status) \(fields)"
            case .body(let bytes): "body of \(bytes.count)"
            case .end(let keepAlive): "end, keep-alive \(keepAlive)"
            }
        }
    }

    struct Outcome: Equatable {
        var events: [Event]
        /// Whether parsing threw (the error's wording may differ with where the reads split; that it threw may not).
        var failed = false
        var endsAtClose: Bool
    }

    /// Feeds `pieces` one read at a time, to a parser expecting responses to requests that were HEAD or not.
    static func parse(_ pieces: [ArraySlice<UInt8>], expecting heads: [Bool]) -> Outcome {
        var parser = ResponseParser()
        for head in heads { parser.expect(head: head) }
        var events: [Event] = []
        var body: [UInt8] = []  // the body bytes since the last head or end, joined
        func endBody() {
            if !body.isEmpty { events.append(.body(body)) }
            body = []
        }
        do {
            for piece in pieces {
                try parser.parse(ByteBuffer(bytes: piece)) { part in
                    switch part {
                    case .head(let head):
                        endBody()
                        let fields = head.headerFields.map { "\($0.name)=\($0.value)" }
                        events.append(.head(status: head.status.code, fields: fields))
                    case .body(let bytes): body += bytes.readableBytesView
                    case .end(let keepAlive):
                        endBody()
                        events.append(.end(keepAlive: keepAlive))
                    }
                }
            }
        } catch {
            endBody()
            return Outcome(events: events, failed: true, endsAtClose: false)
        }
        endBody()
        return Outcome(events: events, endsAtClose: parser.endsAtClose)
    }

    /// `bytes` in reads of a random style: single bytes, a few bytes, up to 64, or a mix of single bytes and large
    /// reads; now and then an empty read.
    private static func randomPieces(of bytes: [UInt8], _ random: inout SplitMix) -> [ArraySlice<UInt8>] {
        var pieces: [ArraySlice<UInt8>] = []
        let style = random.next(below: 4)
        var start = 0
        while start < bytes.count {
            let size =
                switch style {
                case 0: 1
                case 1: 1 + random.next(below: 4)
                case 2: 1 + random.next(below: 64)
                default: random.next(below: 3) == 0 ? 1 : 1 + random.next(below: 600)
                }
            let end = min(start + size, bytes.count)
            pieces.append(bytes[start..<end])
            if random.next(below: 16) == 0 { pieces.append([]) }
            start = end
        }
        return pieces
    }

    /// One to three kinds of damage: a byte flipped, one inserted (CR, LF and other bytes that matter to framing),
    /// one deleted, a run repeated, a digit changed (lengths and chunk sizes), or the stream cut short.
    private static func damage(_ original: [UInt8], _ random: inout SplitMix) -> [UInt8] {
        var bytes = original
        let inserted = Array("\r\n \t:;,0123456789abcdefxX-".utf8) + [0, 0x7f, 0xff]
        for _ in 0..<(1 + random.next(below: 3)) {
            guard !bytes.isEmpty else { break }
            let at = random.next(below: bytes.count)
            switch random.next(below: 6) {
            case 0: bytes[at] ^= UInt8(1 + random.next(below: 255))
            case 1: bytes.insert(inserted[random.next(below: inserted.count)], at: at)
            case 2: bytes.remove(at: at)
            case 3: bytes.insert(contentsOf: bytes[at..<min(at + 1 + random.next(below: 40), bytes.count)], at: at)
            case 4:
                let digits = bytes.indices.filter { (0x30...0x39).contains(bytes[$0]) }
                guard !digits.isEmpty else { continue }
                bytes[digits[random.next(below: digits.count)]] = UInt8(0x30 + random.next(below: 10))
            default: bytes.removeSubrange(at...)
            }
        }
        return bytes
    }

    /// No body for a response that has none (to a HEAD; 1xx, 204, 304), and a body framed by `Content-Length` never
    /// longer than it, and as long as it when it ended.
    static func checkBodiesWithinFraming(_ outcome: Outcome, heads: [Bool], _ context: String) {
        var responses = 0
        var body = 0
        var framing: (bodiless: Bool, length: Int?) = (false, nil)
        func check(ended: Bool) {
            if framing.bodiless { #expect(body == 0, "\(context): \(body) body bytes where there is no body") }
            if let length = framing.length {
                #expect(ended ? body == length : body <= length, "\(context): \(body) body bytes of \(length)")
            }
        }
        for event in outcome.events {
            switch event {
            case .head(let status, let fields):
                let isHead = responses < heads.count && heads[responses]
                responses += 1
                body = 0
                let values = fields.map { $0.split(separator: "=", maxSplits: 1).map { $0.lowercased() } }
                let lengths = values.filter { $0.first == "content-length" }.compactMap { $0.last }
                let coded = values.contains { $0.first == "transfer-encoding" }
                framing.bodiless = isHead || status < 200 || status == 204 || status == 304
                framing.length =
                    coded || framing.bodiless
                    ? nil : lengths.first.flatMap { Int($0.split(separator: ",").first ?? "") }
            case .body(let bytes):
                body += bytes.count
                check(ended: false)
            case .end:
                check(ended: true)
            }
        }
    }
}

/// A stream of responses as a server would write it, and what the parser must report of it: which bytes are heads,
/// where each body byte lies, where each response ends.
private struct Script {
    struct Response {
        var status: Int
        var fields: [String]
        /// The offset just past the final head.
        var headEnd: Int
        var body: [UInt8] = []
        /// The offset of each body byte in the stream.
        var bodyOffsets: [Int] = []
        /// The offset just past the response; `nil` for one that the connection's close ends.
        var end: Int?
        var keepAlive: Bool
    }

    var bytes: [UInt8] = []
    /// For each request: whether it was a HEAD.
    var heads: [Bool] = []
    var responses: [Response] = []
    var closeDelimited: Bool { responses.last?.end == nil }

    /// What the parser reports having read the first `length` bytes: each head once whole, the body bytes read so
    /// far, and each end once its last byte is read.
    func events(upTo length: Int) -> [ResponseParserFuzzTests.Event] {
        var events: [ResponseParserFuzzTests.Event] = []
        for response in responses {
            guard length >= response.headEnd else { break }
            events.append(.head(status: response.status, fields: response.fields))
            let read = response.bodyOffsets.prefix { $0 < length }.count
            if read > 0 { events.append(.body(Array(response.body[..<read]))) }
            guard let end = response.end, length >= end else { break }
            events.append(.end(keepAlive: response.keepAlive))
        }
        return events
    }

    /// Whether, after the first `length` bytes, the connection's close would end the response being read.
    func endsAtClose(upTo length: Int) -> Bool {
        guard let last = responses.last, last.end == nil else { return false }
        return length >= last.headEnd
    }

    /// One to four responses on a connection; only the last may be ended by the close (or say `Connection: close`,
    /// or be HTTP/1.0 without keep-alive).
    static func random(_ random: inout SplitMix, largeBodies: Bool) -> Script {
        var script = Script()
        let count = 1 + random.next(below: 4)
        for index in 0..<count { script.addResponse(&random, last: index == count - 1, largeBodies: largeBodies) }
        return script
    }

    private mutating func line(_ text: String, _ random: inout SplitMix) {
        bytes += Array(text.utf8)
        // A bare LF now and then, which RFC 9112 (2.2) lets a recipient accept as a line's end.
        bytes += random.next(below: 6) == 0 ? [0x0a] : [0x0d, 0x0a]
    }

    private enum Framing: CaseIterable {
        case length, chunked, close, otherCoding
    }

    private mutating func addResponse(_ random: inout SplitMix, last: Bool, largeBodies: Bool) {
        func pick<Element>(_ choices: [Element]) -> Element { choices[random.next(below: choices.count)] }
        let isHead = random.next(below: 8) == 0
        heads.append(isHead)
        // Informational heads first, which the parser reads past.
        for _ in 0..<(random.next(below: 3) == 0 ? 1 + random.next(below: 2) : 0) {
            let status = pick(["100 Continue", "102 Processing", "103 Early Hints"])
            line("HTTP/1.1 " + status, &random)
            if status.hasPrefix("103") { line("Link: </style.css>; rel=preload", &random) }
            line("", &random)
        }
        let status = pick([200, 200, 200, 201, 206, 404, 500, 204, 304])
        let bodiless = isHead || status == 204 || status == 304
        let minor = last && random.next(below: 4) == 0 || random.next(below: 8) == 0 ? 0 : 1
        let framing: Framing = pick(last ? Framing.allCases : [.length, .length, .chunked])
        var fields: [(name: String, value: String)] = []
        for _ in 0..<random.next(below: 4) {
            fields.append(
                (
                    pick(["Server", "X-A", "ETag", "Cache-Control", "Content-Type"]),
                    pick(["haul", "\"abc\"", "no-cache, no-store", "text/plain; charset=utf-8", "a  b", "x"])
                ))
        }
        let body = (0..<pick(largeBodies ? [0, 100, 1_500, 3_000] : [0, 1, 5, 17, 100, 300])).map { _ in
            UInt8(truncatingIfNeeded: random.next())
        }
        switch framing {
        case .length:
            let value = pick(["\(body.count)", "\(body.count), \(body.count)", "\(body.count),\(body.count)"])
            fields.append((pick(["Content-Length", "content-length"]), bodiless ? "\(random.next(below: 99))" : value))
        case .chunked: fields.append(("Transfer-Encoding", pick(["chunked", "Chunked", "gzip, chunked"])))
        case .close: break
        case .otherCoding: fields.append(("Transfer-Encoding", pick(["gzip", "chunked, gzip"])))
        }
        let close = last && random.next(below: 4) == 0
        if close { fields.append(("Connection", "close")) }
        let keepAliveOption = minor == 0 && (!last || random.next(below: 2) == 0)
        if keepAliveOption { fields.append(("Connection", pick(["keep-alive", "Keep-Alive"]))) }
        fields.shuffle(using: &random)

        line("HTTP/1.\(minor) \(status)" + pick([" OK", "", " ", " Some Reason"]), &random)
        for field in fields {
            line(field.name + ":" + pick(["", " ", "  ", "\t"]) + field.value + pick(["", " ", "\t "]), &random)
        }
        line("", &random)
        var response = Response(
            status: status, fields: fields.map { "\($0.name)=\($0.value)" }, headEnd: bytes.count,
            keepAlive: !close && (minor == 1 || keepAliveOption))
        defer { responses.append(response) }
        if bodiless {
            response.end = bytes.count
            return
        }
        func appendBody(_ piece: ArraySlice<UInt8>) {
            response.bodyOffsets += bytes.count..<(bytes.count + piece.count)
            response.body += piece
            bytes += piece
        }
        switch framing {
        case .length:
            appendBody(body[...])
            response.end = bytes.count
        case .chunked:
            var start = 0
            while start < body.count {
                let size = min(1 + random.next(below: pick([3, 40, 600])), body.count - start)
                let hex =
                    String(repeating: "0", count: pick([0, 0, 0, 2]))
                    + String(size, radix: 16, uppercase: random.next(below: 2) == 0)
                line(hex + pick(["", "", ";name=value", " ;x", "\t;q=\"a;b\""]), &random)
                appendBody(body[start..<(start + size)])
                line("", &random)
                start += size
            }
            line("0" + pick(["", ";last"]), &random)
            for _ in 0..<random.next(below: 3) { line(pick(["Trailer-A: x", "Digest:  sha-256=abc "]), &random) }
            line("", &random)
            response.end = bytes.count
        case .close, .otherCoding:
            appendBody(body[...])
            response.end = nil
        }
    }
}
