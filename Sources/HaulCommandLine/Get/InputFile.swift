import Foundation
import Haul

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

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

/// One item of the input, in order: an entry (a URL with its option lines), or a problem found on a line.
enum InputItem {
    case entry(InputEntry)
    case problem(InputProblem)
}

/// Reads the `--input-file` format: one URL per line; blank lines and lines starting with `#` are ignored; a
/// URL may be followed by indented option lines (aria2 style) `out=NAME`, `dir=SUBDIR`, `checksum=ALGO=HEX`,
/// `header=K: V`, `limit-rate=RATE`, `max-time=S`, `speed-limit=BYTES`, `speed-time=S`, `split=N`. A URL line may
/// list mirrors of the same file after it, separated by tabs (aria2's convention).
///
/// The file is read in slices of 64 KiB, line by line, so a list of any length is read in the same memory. Every
/// problem is reported (the caller collects them all, so one run names every bad line).
struct InputFile {
    static let optionNames = [
        "out", "dir", "checksum", "header", "limit-rate", "max-time", "speed-limit", "speed-time", "split",
    ]

    /// The longest line read: a URL list has no longer ones, and a file without line ends (not a list at all) must
    /// not be read into memory whole.
    static let maximumLineLength = 1 << 20

    private let descriptor: Int32
    private let name: String
    /// Where reading stops: the size the file had when it was first read, so every pass reads the same lines.
    private let length: Int64
    private var offset: Int64 = 0
    private var buffer: [UInt8] = []
    /// Where the next line starts in `buffer`.
    private var lineStart = 0
    private var lineNumber = 0
    private var atEnd = false
    /// The entry whose option lines are being read.
    private var pending: InputEntry?
    /// Items found on the last line read, before `pending` (a problem, or the entry that line ended).
    private var ready: [InputItem] = []
    /// The last URL line was reported: its option lines are not reported again.
    private var urlLineFailed = false

    /// Reads `length` bytes of `descriptor` from its start (with `pread`: passes over one descriptor do not share
    /// an offset), naming lines `name:N`.
    init(descriptor: Int32, length: Int64, name: String) {
        self.descriptor = descriptor
        self.length = length
        self.name = name
    }

    /// The next entry or problem, in the order of the file; `nil` at its end.
    /// - Throws: `POSIXError` when the file cannot be read.
    mutating func next() throws -> InputItem? {
        while true {
            if !ready.isEmpty { return ready.removeFirst() }
            guard let line = try nextLine() else {
                // The last entry, then what its reading found after it (a last line too long to read).
                if let last = pending {
                    pending = nil
                    return .entry(last)
                }
                return ready.isEmpty ? nil : ready.removeFirst()
            }
            take(line)
        }
    }

    /// The next line's bytes (without its line end), or a problem with it; `nil` at the end.
    private mutating func nextLine() throws -> ArraySlice<UInt8>? {
        let newline = UInt8(ascii: "\n")
        while true {
            if let end = buffer[lineStart...].firstIndex(of: newline) {
                defer { lineStart = end + 1 }
                lineNumber += 1
                return buffer[lineStart..<end]
            }
            if atEnd {
                guard lineStart < buffer.count else { return nil }
                defer { lineStart = buffer.count }
                lineNumber += 1
                return buffer[lineStart...]
            }
            if buffer.count - lineStart > Self.maximumLineLength {
                lineNumber += 1
                ready.append(problem("is longer than 1 MiB: not a list of URLs"))
                try skipToLineEnd()
                continue
            }
            try readSlice()
        }
    }

    /// Reads the next slice of the file after the unread part of the buffer.
    private mutating func readSlice() throws {
        buffer.removeFirst(lineStart)
        lineStart = 0
        let want = Int(min(Int64(64 << 10), length - offset))
        guard want > 0 else {
            atEnd = true
            return
        }
        let old = buffer.count
        buffer.append(contentsOf: repeatElement(0, count: want))
        while true {
            let count = buffer[old...].withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, want, off_t(offset)) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            buffer.removeLast(want - count)
            offset += Int64(count)
            if count == 0 { atEnd = true }
            return
        }
    }

    /// Drops the rest of an over-long line.
    private mutating func skipToLineEnd() throws {
        while true {
            if let end = buffer[lineStart...].firstIndex(of: UInt8(ascii: "\n")) {
                lineStart = end + 1
                return
            }
            lineStart = buffer.count
            if atEnd { return }
            try readSlice()
        }
    }

    private func problem(_ message: String) -> InputItem {
        .problem(InputProblem(origin: InputOrigin(source: name, line: lineNumber).description, message: message))
    }

    /// Takes one line: an option line goes to the pending entry, a URL line ends it and starts the next.
    private mutating func take(_ line: ArraySlice<UInt8>) {
        let isBlank: (UInt8) -> Bool = { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
        // Both line ends: files written on Windows must read the same.
        var end = line.endIndex
        if end > line.startIndex, line[end - 1] == UInt8(ascii: "\r") { end -= 1 }
        // A byte order mark, which Windows editors put first: not part of the first line's text.
        let first = line.startIndex + (lineNumber == 1 && line.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0)
        var start = first
        while start < end, isBlank(line[start]) { start += 1 }
        if start == end || line[start] == UInt8(ascii: "#") { return }
        let indented = start > first
        if !indented {
            while isBlank(line[end - 1]) { end -= 1 }  // stops at line[start], which is not blank
        }
        guard let text = String(validating: line[start..<end], as: UTF8.self) else {
            ready.append(problem("is not UTF-8 text"))
            if !indented { endEntry(failed: true) }
            return
        }
        if indented {
            guard var entry = pending else {
                if !urlLineFailed { ready.append(problem("an option line must follow a URL line")) }
                return
            }
            if let message = Self.apply(option: text, to: &entry) { ready.append(problem(message)) }
            pending = entry
            return
        }
        endEntry(failed: false)
        let source = InputOrigin(source: name, line: lineNumber)
        if text.utf8.contains(UInt8(ascii: " ")) {
            urlLineFailed = true
            ready.append(
                problem(
                    "'\(URLText.redacted(text))' is not one URL: put one URL per line (mirrors of one file after it, separated by tabs), "
                        + "and options on indented lines"))
            return
        }
        guard text.utf8.contains(UInt8(ascii: "\t")) else {
            pending = InputEntry(source: source, url: text)
            return
        }
        // Mirrors: every tab-separated URL on the line is a source of the same file.
        var urls = text.split(separator: "\t", omittingEmptySubsequences: true).map(String.init)
        var entry = InputEntry(source: source, url: urls.removeFirst())
        entry.mirrors = urls
        pending = entry
    }

    /// A URL line ends the entry before it; `failed` when the line itself was reported.
    private mutating func endEntry(failed: Bool) {
        if let finished = pending { ready.append(.entry(finished)) }
        pending = nil
        urlLineFailed = failed
    }

    /// Applies `key=value` to `entry`; returns what is wrong with it, if anything.
    private static func apply(option: String, to entry: inout InputEntry) -> String? {
        guard let equals = option.firstIndex(of: "=") else {
            // Only its first word: the rest may be a value, and a value may be a secret (a header's token).
            let word = option.prefix { $0 != " " && $0 != "\t" && $0 != ":" }
            let shown = word.count < option.count ? word + " ..." : word
            return "'\(shown)' is not an option line: expected KEY=VALUE with KEY one of \(optionList)"
        }
        let key = option[..<equals].trimmingSpaces()
        let value = option[option.index(after: equals)...].trimmingSpaces()
        guard !value.isEmpty || key == "header" else { return "'\(key)=' needs a value" }
        switch key {
        case "out":
            guard entry.fileName == nil else { return "'out' given twice for \(URLText.redacted(entry.url))" }
            entry.fileName = value
        case "dir":
            guard entry.subdirectory == nil else { return "'dir' given twice for \(URLText.redacted(entry.url))" }
            entry.subdirectory = value
        case "checksum":
            guard entry.checksum == nil else { return "'checksum' given twice for \(URLText.redacted(entry.url))" }
            entry.checksum = value
        case "header":
            entry.headers.append(value)
        case "split":
            guard entry.split == nil else { return "'split' given twice for \(URLText.redacted(entry.url))" }
            entry.split = value
        case "limit-rate", "max-time", "speed-limit", "speed-time":
            let field: WritableKeyPath<InputEntry, String?> =
                switch key {
                case "limit-rate": \.limitRate
                case "max-time": \.maxTime
                case "speed-limit": \.speedLimit
                default: \.speedTime
                }
            guard entry[keyPath: field] == nil else { return "'\(key)' given twice for \(URLText.redacted(entry.url))" }
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
