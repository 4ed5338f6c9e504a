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
/// `header=K: V`.
enum InputFile {
    static let optionNames = ["out", "dir", "checksum", "header"]

    /// The entries of `text` and every problem found in it (all of them, so one run reports them all).
    static func parse(_ text: String, name: String) -> (entries: [InputEntry], problems: [InputProblem]) {
        var entries: [InputEntry] = []
        var problems: [InputProblem] = []
        // Split and trimmed as UTF-8 bytes (every character that matters here is ASCII): as Characters, a list
        // of 10,000 URLs took tens of milliseconds. Both line ends: files written on Windows must read the same.
        let lines = text.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        for (index, rawLine) in lines.enumerated() {
            let line = rawLine.last == UInt8(ascii: "\r") ? rawLine.dropLast() : rawLine
            let indented = line.first == UInt8(ascii: " ") || line.first == UInt8(ascii: "\t")
            let trimmedBytes = line.drop(while: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") })
            if trimmedBytes.isEmpty || trimmedBytes.first == UInt8(ascii: "#") { continue }
            let trimmed = Substring(trimmedBytes)
            let source = InputOrigin(source: name, line: index + 1)
            if indented {
                guard !entries.isEmpty else {
                    problems.append(
                        InputProblem(origin: source.description, message: "an option line must follow a URL line"))
                    continue
                }
                if let problem = apply(option: String(trimmed), to: &entries[entries.count - 1]) {
                    problems.append(InputProblem(origin: source.description, message: problem))
                }
                continue
            }
            let url = trimmed.trimmingSpaces()
            if url.utf8.contains(where: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }) {
                problems.append(
                    InputProblem(
                        origin: source.description,
                        message: "'\(url)' is not one URL: put one URL per line, and options on indented lines"))
                continue
            }
            entries.append(InputEntry(source: source, url: url))
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
