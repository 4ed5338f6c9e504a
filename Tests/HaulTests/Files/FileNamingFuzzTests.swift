import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// Safe file naming over random names: the quick path for plain names against the long way, and what every safe
/// name must be whatever it was made from. Seeded: a failure names its seed, and the same seed fails the same way.
@Suite("FileNaming, random names", .timeLimit(.minutes(1)))
struct FileNamingFuzzTests {
    static let seeds: [UInt64] = Array(0..<8)

    @Test("the quick path for plain names gives, byte for byte, what the long way gives", arguments: seeds)
    func quickPathAgrees(seed: UInt64) {
        var random = SplitMix(seed: seed)
        var quick = 0
        for _ in 0..<2_000 {
            // What `name(for:)` hands either path: a path's last component, with no `/` (a `%2F` may be there).
            let component = Substring(Self.randomName(&random, plain: random.next(below: 2) == 0, slashes: false))
            guard let fast = FileNaming.plainName(component.utf8) else { continue }
            quick += 1
            let slow = FileNaming.decodedName(component)
            #expect(slow.map { Array($0.utf8) } == Array(fast.utf8), "seed \(seed): \(Self.shown(String(component)))")
        }
        // Most plain-looking names take the quick path; otherwise this test would compare nothing.
        #expect(quick > 300, "seed \(seed): only \(quick) names took the quick path")
    }

    @Test(
        "a safe name is never empty or hidden, holds no separator, control or bidi character, fits, and is its own safe name",
        arguments: seeds)
    func safeNames(seed: UInt64) throws {
        var random = SplitMix(seed: seed)
        for _ in 0..<500 {
            let raw = Self.randomName(&random, plain: random.next(below: 4) == 0, slashes: true)
            let context = "seed \(seed): \(Self.shown(raw))"
            if let name = FileNaming.sanitize(raw) {
                Self.check(name, context)
            }
            // The same text as a Content-Disposition would carry it, quoted and RFC 5987-encoded.
            let quoted = raw.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            if let name = FileNaming.name(fromContentDisposition: "attachment; filename=\"\(quoted)\"") {
                Self.check(name, "quoted, " + context)
            }
            let encoded = raw.utf8.map { "%" + String($0 >> 4, radix: 16) + String($0 & 0xf, radix: 16) }.joined()
            if let name = FileNaming.name(fromContentDisposition: "attachment; filename*=UTF-8''\(encoded)") {
                Self.check(name, "filename*, " + context)
            }
            // And as the last component of a URL's path, encoded or as it is where the URL takes it so.
            for component in [raw.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed), raw] {
                guard let component, let url = URL(string: "http://h/d/" + component) else { continue }
                if let name = FileNaming.name(for: url), name != "index.html" {
                    Self.check(name, "as a URL, " + context)
                }
            }
        }
    }

    @Test("a numbered name for the rename policy keeps its number, differs from the name and fits", arguments: seeds)
    func numberedNames(seed: UInt64) {
        var random = SplitMix(seed: seed)
        for _ in 0..<300 {
            let raw = Self.randomName(&random, plain: false, slashes: false)
            guard let name = FileNaming.sanitize(raw) else { continue }
            var seen: Set<[UInt8]> = [Array(name.utf8)]
            for number in [1, 2, 10, 9_999] {
                let numbered = FileNaming.numbered(name, number)
                let context = "seed \(seed): \(Self.shown(name)) (\(number))"
                #expect(numbered.utf8.count <= FileNaming.maxNameBytes, "\(context)")
                #expect(numbered.contains(" (\(number))"), "\(context)")
                let isNew = seen.insert(Array(numbered.utf8)).inserted
                #expect(isNew, "\(context): \(Self.shown(numbered)) again")
            }
        }
    }

    /// Records an issue for each rule `name` breaks. Written without FileNaming's own helpers, so that a rule
    /// loosened there is caught here.
    static func check(_ name: String, _ context: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let scalars = name.unicodeScalars
        var broken: [String] = []
        if name.isEmpty { broken.append("empty") }
        if scalars.first == "." { broken.append("starts with a dot (hidden, or . or ..)") }
        if let first = scalars.first, first.properties.isWhitespace { broken.append("starts with a space") }
        if let last = scalars.last, last.properties.isWhitespace { broken.append("ends with a space") }
        if scalars.contains("/") || scalars.contains("\\") { broken.append("has a path separator") }
        if scalars.contains(where: { $0.properties.generalCategory == .control }) {
            broken.append("has a control character (NUL, C0, DEL or C1)")
        }
        if scalars.contains(where: { bidiControls.contains($0.value) }) { broken.append("has a bidi control") }
        if scalars.contains(where: { invisible.contains($0.value) }) { broken.append("has an invisible character") }
        if name.utf8.count > 255 { broken.append("is \(name.utf8.count) bytes") }
        if FileNaming.sanitize(name).map({ Array($0.utf8) }) != Array(name.utf8) {
            broken.append("is not its own safe name: \(FileNaming.sanitize(name).map(shown) ?? "nil")")
        }
        for rule in broken {
            Issue.record("\(shown(name)) \(rule); \(context)", sourceLocation: sourceLocation)
        }
    }

    /// `name` quoted and escaped, its start only when it is long.
    static func shown(_ name: String) -> String {
        let bytes = name.utf8.count
        return bytes <= 80 ? name.debugDescription : "\(String(name.prefix(40)).debugDescription)… (\(bytes) bytes)"
    }

    /// Unicode's bidirectional formatting characters: the Arabic letter mark, LRM and RLM, the embeddings and
    /// overrides, the isolates.
    static let bidiControls = Set<UInt32>([0x061c, 0x200e, 0x200f]).union(0x202a...0x202e).union(0x2066...0x2069)

    /// Characters that show as nothing, so that a name holding one looks like another: the zero-width space, the word
    /// joiner and invisible operators, the byte order mark.
    static let invisible = Set<UInt32>([0x200b, 0xfeff]).union(0x2060...0x2064)

    /// Pieces names are made of: ordinary ones, and the ones that have broken file naming somewhere: separators,
    /// dots, spaces (ASCII and not), percent escapes (of separators, dots, NUL, a bidi override, broken ones),
    /// controls, bidi controls, characters that join onto a neighbour (a combining mark, ZWJ, a prepended
    /// concatenation mark), NFC and NFD spellings of one letter, and wide characters.
    static let plainPieces = [
        "a", "Z", "0", "report", "-", "_", "~", "(", ")", "+", ",", ";", "=", "@", "!", "$", "&", "'", "[", "]", "^",
        "`", "|", ":", "*", ".", "..", ".txt", ".tar.gz",
    ]
    static let otherPieces = [
        " ", "/", "\\", "%", "%2F", "%2f", "%5C", "%2E", "%2E%2E", "%00", "%20", "%E2%80%AE", "%C3%A9", "%ZZ", "%E2",
        "%C2%9B", "\0", "\u{1}", "\t", "\n", "\r\n", "\u{7F}", "\u{85}", "\u{9B}", "\u{061C}", "\u{200E}", "\u{200F}",
        "\u{202A}", "\u{202E}", "\u{2066}", "\u{2069}", "\u{200D}", "\u{0301}", "\u{0600}", "\u{00A0}", "\u{2003}",
        "\u{3000}", "\u{00E9}", "e\u{0301}", "\u{D55C}", "\u{1112}\u{1161}\u{11AB}", "\u{1F600}",
        "\u{1F469}\u{200D}\u{1F4BB}", "\u{1F1EB}\u{1F1F7}", "\u{FEFF}", "\u{200B}", "\u{2060}", "%E2%80%8B", "?", "#",
        "\"",
    ]

    /// A random name: a few pieces mostly, sometimes enough to pass 255 bytes or to come near it, sometimes one
    /// letter under hundreds of combining marks (a single character longer than a name may be). `plain` draws only or mostly ordinary
    /// pieces; without `slashes` there is no `/` (a `%2F` may still be there).
    private static func randomName(_ random: inout SplitMix, plain: Bool, slashes: Bool) -> String {
        var name = ""
        let onlyPlain = plain && random.next(below: 2) == 0
        func piece() -> String {
            let pool = onlyPlain || plain && random.next(below: 8) != 0 ? plainPieces : plainPieces + otherPieces
            return pool[random.next(below: pool.count)]
        }
        switch random.next(below: 10) {
        case 0:
            let repeated = piece()
            name = String(repeating: repeated, count: 40 + random.next(below: 260))
            for _ in 0..<random.next(below: 3) { name += piece() }
        case 1:
            name = piece() + "x" + String(repeating: "\u{0301}", count: 100 + random.next(below: 300))
            if random.next(below: 2) == 0 { name += [".", ".bin", "..", " ."][random.next(below: 4)] }
        case 2:
            for _ in 0..<(12 + random.next(below: 80)) { name += piece() }
        case 3:
            // Around the 255-byte limit.
            let length = 245 + random.next(below: 20)
            while name.utf8.count < length { name += piece() }
        default:
            for _ in 0..<random.next(below: 12) { name += piece() }
        }
        return slashes ? name : String(String.UnicodeScalarView(name.unicodeScalars.filter { $0 != "/" }))
    }
}
