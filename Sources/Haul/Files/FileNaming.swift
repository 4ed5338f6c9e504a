import Foundation

/// Turns names that come from outside (a URL path, a `Content-Disposition` header) into a file name that
/// cannot leave its directory (ARCHITECTURE.md, "Invariants" 6).
package enum FileNaming {
    /// The longest name most file systems accept, in bytes.
    static let maxNameBytes = 255

    /// A path's directory (up to its last `/`; `/` for a file at the root, `.` without a `/`) and last component,
    /// split on the bytes: NSString's path functions cost more than a small file's whole download does.
    static func split(path: String) -> (directory: Substring, name: Substring) {
        guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return (".", path[...]) }
        return (slash == path.startIndex ? "/" : path[..<slash], path[path.utf8.index(after: slash)...])
    }

    /// `name` in `directory`, joined as NSString's `appendingPathComponent` joins them (one `/` added unless the
    /// directory ends in one), on the bytes.
    package static func path(_ name: String, in directory: String) -> String {
        if name.isEmpty { return directory }
        if directory.isEmpty { return name }
        return directory.utf8.last == UInt8(ascii: "/") ? directory + name : directory + "/" + name
    }

    /// The name for a download of `url`: its last path component, percent-decoded and made safe;
    /// `index.html` when the path is empty or ends in `/`, like wget.
    static func name(for url: URL) -> String? {
        let path = url.path(percentEncoded: true)
        if path.isEmpty || path.hasSuffix("/") { return "index.html" }
        let last = split(path: path).name
        return plainName(last.utf8) ?? decodedName(last)
    }

    /// The name itself when it needs no decoding and no cleaning, which is most names: printable ASCII without
    /// `%`, separators, spaces at either end or a leading dot, and short enough. `nil` sends it the long way,
    /// ``decodedName(_:)``, which gives the same for every name this takes (FileNamingFuzzTests checks it).
    /// (Per download this runs in the planner, the queue and the engine; the long way costs microseconds.)
    static func plainName(_ bytes: Substring.UTF8View) -> String? {
        guard let first = bytes.first, let last = bytes.last, bytes.count <= maxNameBytes,
            first != UInt8(ascii: "."), first != UInt8(ascii: " "), last != UInt8(ascii: " ")
        else { return nil }
        for byte in bytes {
            guard byte > 0x20, byte < 0x7f, byte != UInt8(ascii: "%"), byte != UInt8(ascii: "\\") else { return nil }
        }
        return String(Substring(bytes))
    }

    /// A URL's last path component percent-decoded and made safe: the long way of ``name(for:)``.
    static func decodedName(_ component: Substring) -> String? {
        sanitize(component.removingPercentEncoding ?? String(component))
    }

    /// The file name a `Content-Disposition` header suggests (RFC 6266: `filename*` wins over `filename`),
    /// made safe; `nil` when there is none or nothing safe is left of it. A `filename*` with nothing safe in it
    /// (empty, only dots, not decodable) leaves `filename` to be used, as browsers do.
    static func name(fromContentDisposition header: String) -> String? {
        var plain: String?
        var extended: String?
        for parameter in parameters(of: header) {
            switch parameter.name {
            case "filename*": extended = decodeExtendedValue(parameter.value)
            case "filename": plain = parameter.value
            default: break
            }
        }
        return extended.flatMap(sanitize) ?? plain.flatMap(sanitize)
    }

    /// Keeps only the last path segment, drops NUL, control characters, bidirectional formatting characters, dots
    /// and spaces at the start and spaces at the end, and cuts to 255 bytes keeping the extension. `nil` if nothing
    /// usable remains (`..`, empty, only dots). A name it returns is its own safe name.
    static func sanitize(_ raw: String) -> String? {
        // Both separators count: a Windows-style "..\\..\\x" must not survive on any platform. Split on scalars: a
        // `/` with a combining mark after it (or a prepended mark before it) is one `Character`, not equal to "/".
        let segments = raw.unicodeScalars.split(whereSeparator: { $0 == "/" || $0 == "\\" })
        var scalars = String.UnicodeScalarView()
        for scalar in segments.last ?? Substring.UnicodeScalarView() where !isUnprintable(scalar) {
            scalars.append(scalar)
        }
        let name = trimmed(String(scalars))
        guard !name.isEmpty else { return nil }
        // Cut, the name may end in a space again.
        return trimmed(truncated(name))
    }

    /// `name` without dots or spaces at its start and spaces at its end. Dots and spaces go together: trimmed one
    /// after the other, ". ." was left as "." and ".. .." as "..".
    private static func trimmed(_ name: String) -> String {
        var scalars = Substring(name).unicodeScalars
        while let first = scalars.first, first == "." || CharacterSet.whitespaces.contains(first) {
            scalars = scalars.dropFirst()
        }
        while let last = scalars.last, CharacterSet.whitespaces.contains(last) { scalars = scalars.dropLast() }
        return String(scalars)
    }

    /// Whether `scalar` must not appear in a file name or in text printed to a terminal: C0 and C1 control
    /// characters, DEL, the bidirectional formatting characters, with which a name such as `‮txt.exe` would
    /// display as `exe.txt` (the marks, embeddings, overrides and isolates of Unicode's bidi algorithm), and the
    /// invisible ones with which `re\u{200B}port.pdf` would look like `report.pdf` beside it (the zero-width space,
    /// the word joiner and invisible operators, the byte order mark). The zero-width joiner and non-joiner stay:
    /// Persian words and emoji sequences are spelled with them.
    package static func isUnprintable(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0..<0x20, 0x7f..<0xa0, 0x061c, 0x200e, 0x200f, 0x202a...0x202e, 0x2066...0x2069: true
        case 0x200b, 0x2060...0x2064, 0xfeff: true
        default: false
        }
    }

    /// The longest start of `name` that fits in `bytes` UTF-8 bytes, cut between characters.
    static func prefix(of name: Substring, fittingIn bytes: Int) -> Substring {
        var end = name.startIndex
        var used = 0
        for index in name.indices {
            let next = name.index(after: index)
            used += name.utf8.distance(from: index, to: next)
            if used > bytes { break }
            end = next
        }
        return name[..<end]
    }

    /// Sixteen hex digits that stand for `bytes`, the same in every process and release (64-bit FNV-1a): names a
    /// file after a name too long to use whole.
    static func stableDigest(of bytes: some Sequence<UInt8>) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// `name (n).ext` for the rename conflict policy; a name too long for the number is cut before it, so that
    /// every number gives another name.
    static func numbered(_ name: String, _ number: Int) -> String {
        let (stem, ext) = split(name)
        return fitted(stem, suffix: " (\(number))", ext)
    }

    private static func split(_ name: String) -> (stem: String, ext: String) {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return (name, "") }
        return (String(name[..<dot]), String(name[dot...]))
    }

    private static func truncated(_ name: String) -> String {
        guard name.utf8.count > maxNameBytes else { return name }
        let (stem, ext) = split(name)
        return fitted(stem, ext)
    }

    /// `stem`, `suffix` and `ext` in at most 255 bytes: the stem is cut (between characters) and an extension of
    /// 32 bytes or more dropped.
    private static func fitted(_ stem: String, suffix: String = "", _ ext: String) -> String {
        let whole = stem + suffix + ext
        guard whole.utf8.count > maxNameBytes else { return whole }
        let keptExt = ext.utf8.count < 32 ? ext : ""
        let room = maxNameBytes - suffix.utf8.count - keptExt.utf8.count
        var cut = prefix(of: stem[...], fittingIn: room)
        if cut.isEmpty {
            // A first character longer than the room (a letter under hundreds of combining marks) is cut between
            // its scalars: without a stem the name was its extension alone, hidden, or ".".
            var scalars = Substring.UnicodeScalarView()
            var used = 0
            for scalar in stem.unicodeScalars {
                used += UTF8.width(scalar)
                if used > room { break }
                scalars.append(scalar)
            }
            cut = Substring(scalars)
        }
        return cut + suffix + keptExt
    }

    /// Splits `type; a=b; c="d;e"` into its parameters (names lowercased, quotes and escapes removed).
    private static func parameters(of header: String) -> [(name: String, value: String)] {
        var result: [(String, String)] = []
        var chars = Substring(header)
        // Skip the disposition type.
        guard let firstSemicolon = chars.firstIndex(of: ";") else { return [] }
        chars = chars[chars.index(after: firstSemicolon)...]
        while !chars.isEmpty {
            chars = chars.drop(while: { $0 == " " || $0 == "\t" || $0 == ";" })
            guard let equals = chars.firstIndex(of: "=") else { break }
            let name = chars[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            chars = chars[chars.index(after: equals)...].drop(while: { $0 == " " })
            var value = ""
            if chars.first == "\"" {
                chars = chars.dropFirst()
                var escaped = false
                while let character = chars.first {
                    chars = chars.dropFirst()
                    if escaped {
                        value.append(character)
                        escaped = false
                    } else if character == "\\" {
                        escaped = true
                    } else if character == "\"" {
                        break
                    } else {
                        value.append(character)
                    }
                }
                chars = chars.drop(while: { $0 != ";" })
            } else {
                let end = chars.firstIndex(of: ";") ?? chars.endIndex
                value = chars[..<end].trimmingCharacters(in: .whitespaces)
                chars = chars[end...]
            }
            result.append((name, value))
        }
        return result
    }

    /// RFC 5987 `charset'lang'pct-encoded`; only UTF-8 and ISO-8859-1 are meaningful here.
    private static func decodeExtendedValue(_ value: String) -> String? {
        let parts = value.split(separator: "'", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        let charset = parts[0].lowercased()
        let encoded = String(parts[2])
        if charset == "utf-8" { return encoded.removingPercentEncoding }
        if charset == "iso-8859-1" {
            var bytes: [UInt8] = []
            var iterator = Array(encoded.utf8).makeIterator()
            while let byte = iterator.next() {
                if byte == UInt8(ascii: "%"), let high = iterator.next(), let low = iterator.next(),
                    let decoded = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)
                {
                    bytes.append(decoded)
                } else {
                    bytes.append(byte)
                }
            }
            return String(bytes.map { Character(Unicode.Scalar($0)) })
        }
        return nil
    }
}
