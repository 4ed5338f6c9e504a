/// One URL as the user gave it: on the command line or on a line of an input file, with the option lines
/// that followed it there.
struct InputEntry: Equatable, Sendable {
    /// Where it came from.
    var source: InputOrigin
    /// Where it came from, for messages: `urls.txt:3`, or `argument 2`.
    var origin: String { source.description }
    var url: String
    /// `out=NAME`
    var fileName: String?
    /// `dir=SUBDIR`
    var subdirectory: String?
    /// `checksum=ALGO=HEX`
    var checksum: String?
    /// `header=K: V`, in order.
    var headers: [String] = []
    /// `limit-rate=RATE`
    var limitRate: String?
    /// `max-time=S`
    var maxTime: String?
    /// `speed-limit=BYTES`
    var speedLimit: String?
    /// `speed-time=S`
    var speedTime: String?
    /// `split=N`
    var split: String?
    /// More URLs of the same file, after the first on its line (tab-separated).
    var mirrors: [String] = []
}

/// Where an input entry came from: a line of a file, or a command-line argument. Its text is made only for a
/// message, not for each of 10,000 lines.
struct InputOrigin: Equatable, CustomStringConvertible {
    /// The input file's name, or the whole origin (`argument 2`).
    var source: String
    /// The line in the input file.
    var line: Int?

    var description: String { line.map { "\(source):\($0)" } ?? source }
}

/// Something wrong with the input, named by where it is.
struct InputProblem: Error, Equatable, CustomStringConvertible {
    var origin: String
    var message: String
    var description: String { "\(origin): \(message)" }
}

/// Reads the `--input-file` format: one URL per line; blank lines and lines starting with `#` are ignored; a
/// URL may be followed by indented option lines (aria2 style) `out=NAME`, `dir=SUBDIR`, `checksum=ALGO=HEX`,
/// `header=K: V`, `limit-rate=RATE`, `max-time=S`, `speed-limit=BYTES`, `speed-time=S`, `split=N`. A URL line may
/// list mirrors of the same file after it, separated by tabs (aria2's convention).
enum InputFile {
    static let optionNames = [
        "out", "dir", "checksum", "header", "limit-rate", "max-time", "speed-limit", "speed-time", "split",
    ]

    /// The entries of `text` and every problem found in it (all of them, so one run reports them all).
    static func parse(_ text: String, name: String) -> (entries: [InputEntry], problems: [InputProblem]) {
        var text = text
        return text.withUTF8 { parse(bytes: $0, name: name) }
    }

    /// Works on the text's UTF-8 bytes in place: every character that matters here (line ends, spaces, tabs,
    /// `#`) is ASCII, so each cut falls between characters.
    private static func parse(
        bytes: UnsafeBufferPointer<UInt8>, name: String
    ) -> (entries: [InputEntry], problems: [InputProblem]) {
        var entries: [InputEntry] = []
        var problems: [InputProblem] = []
        let newline = UInt8(ascii: "\n")
        let isBlank: (UInt8) -> Bool = { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
        var lineStart = 0
        var lineNumber = 0
        while lineStart <= bytes.count {
            let lineEnd = bytes[lineStart...].firstIndex(of: newline) ?? bytes.count
            defer { lineStart = lineEnd + 1 }
            lineNumber += 1
            // Both line ends: files written on Windows must read the same.
            var end = lineEnd
            if end > lineStart, bytes[end - 1] == UInt8(ascii: "\r") { end -= 1 }
            var start = lineStart
            while start < end, isBlank(bytes[start]) { start += 1 }
            if start == end || bytes[start] == UInt8(ascii: "#") { continue }
            let indented = start > lineStart
            let source = InputOrigin(source: name, line: lineNumber)
            if indented {
                guard !entries.isEmpty else {
                    problems.append(
                        InputProblem(origin: source.description, message: "an option line must follow a URL line"))
                    continue
                }
                let option = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self)
                if let problem = apply(option: option, to: &entries[entries.count - 1]) {
                    problems.append(InputProblem(origin: source.description, message: problem))
                }
                continue
            }
            while isBlank(bytes[end - 1]) { end -= 1 }  // stops at bytes[start], which is not blank
            let text = UnsafeBufferPointer(rebasing: bytes[start..<end])
            let line = String(decoding: text, as: UTF8.self)
            if text.contains(UInt8(ascii: " ")) {
                problems.append(
                    InputProblem(
                        origin: source.description,
                        message:
                            "'\(line)' is not one URL: put one URL per line (mirrors of one file after it, separated "
                            + "by tabs), and options on indented lines"))
                continue
            }
            guard text.contains(UInt8(ascii: "\t")) else {
                entries.append(InputEntry(source: source, url: line))
                continue
            }
            // Mirrors: every tab-separated URL on the line is a source of the same file.
            var urls = line.split(separator: "\t", omittingEmptySubsequences: true).map(String.init)
            var entry = InputEntry(source: source, url: urls.removeFirst())
            entry.mirrors = urls
            entries.append(entry)
        }
        return (entries, problems)
    }

    /// Applies `key=value` to `entry`; returns what is wrong with it, if anything.
    private static func apply(option: String, to entry: inout InputEntry) -> String? {
        guard let equals = option.firstIndex(of: "=") else {
            return "'\(option)' is not an option line: expected KEY=VALUE with KEY one of \(optionList)"
        }
        let key = option[..<equals].trimmingSpaces()
        let value = option[option.index(after: equals)...].trimmingSpaces()
        guard !value.isEmpty || key == "header" else { return "'\(key)=' needs a value" }
        switch key {
        case "out":
            guard entry.fileName == nil else { return "'out' given twice for \(entry.url)" }
            entry.fileName = value
        case "dir":
            guard entry.subdirectory == nil else { return "'dir' given twice for \(entry.url)" }
            entry.subdirectory = value
        case "checksum":
            guard entry.checksum == nil else { return "'checksum' given twice for \(entry.url)" }
            entry.checksum = value
        case "header":
            entry.headers.append(value)
        case "split":
            guard entry.split == nil else { return "'split' given twice for \(entry.url)" }
            entry.split = value
        case "limit-rate", "max-time", "speed-limit", "speed-time":
            let field: WritableKeyPath<InputEntry, String?> =
                switch key {
                case "limit-rate": \.limitRate
                case "max-time": \.maxTime
                case "speed-limit": \.speedLimit
                default: \.speedTime
                }
            guard entry[keyPath: field] == nil else { return "'\(key)' given twice for \(entry.url)" }
            entry[keyPath: field] = value
        default:
            return "unknown option '\(key)' (expected one of \(optionList))"
        }
        return nil
    }

    private static var optionList: String { optionNames.joined(separator: ", ") }
}

extension Substring {
    /// Without leading and trailing spaces and tabs.
    func trimmingSpaces() -> String {
        let isText: (UInt8) -> Bool = { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\t") }
        guard let first = utf8.firstIndex(where: isText), let last = utf8.lastIndex(where: isText) else { return "" }
        return String(self[first...last])
    }
}
