import Foundation
import Haul

/// aria2's own files, read and written as aria2 reads and writes them, so that a user moves over with the files they
/// have: its configuration file (`--conf-path`) and its input and session files (`-i`, `saveSession`).
public enum Aria2Files {
    /// One `name=value` line of a configuration file.
    public struct Setting: Sendable, Hashable {
        /// The option's name (aria2's long option, without `--`).
        public var name: String
        /// Its value.
        public var value: String
        /// The line it is on, counting from 1.
        public var line: Int
    }

    /// One download of an input or session file: its URIs (mirrors of one file) and the options on the indented lines
    /// after them.
    public struct Entry: Sendable, Hashable {
        /// The URIs of the file.
        public var uris: [String]
        /// The options (a cumulative one such as `header` may have several values).
        public var options: [String: [String]]
        /// The line of its URIs, counting from 1.
        public var line: Int
    }

    /// What a configuration file's options are to the daemon.
    public enum Role: Sendable, Hashable {
        /// A download option, or `max-concurrent-downloads` or `max-overall-download-limit`: a global option.
        case globalOption
        /// An option of aria2 that means nothing to haul daemon (its RPC switch, its logs, BitTorrent's...).
        case unused
        /// Not an option of aria2.
        case unknown
    }

    /// Reads a configuration file: `name=value` lines, blank lines and lines starting with `#` ignored, spaces around
    /// the name and the value trimmed. `name` is the file as errors name it.
    ///
    /// - Throws: ``RPCError`` naming the file and line of a line that is not `name=value`.
    public static func readConfiguration(_ text: String, name: String) throws(RPCError) -> [Setting] {
        var settings: [Setting] = []
        for (index, raw) in lines(of: text).enumerated() {
            try checkLength(raw, at: index + 1, in: name)
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let equals = line.firstIndex(of: "=") else {
                throw RPCError("\(name):\(index + 1): '\(shown(line))' is not name=value")
            }
            let option = line[..<equals].trimmingCharacters(in: .whitespaces)
            guard !option.isEmpty else { throw RPCError("\(name):\(index + 1): no option name before '='") }
            settings.append(
                Setting(
                    name: option, value: line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces),
                    line: index + 1))
        }
        return settings
    }

    /// What `name` is to the daemon when a configuration file sets it.
    public static func role(of name: String) -> Role {
        guard Aria2Options.known.contains(name) else { return .unknown }
        // Accepted over RPC as a client sends it, but named at start: a file's setting that does nothing.
        if DownloadPlan.inertOptions.contains(name) { return .unused }
        if ["max-concurrent-downloads", "max-overall-download-limit"].contains(name)
            || DownloadPlan.supported.contains(name) || DownloadPlan.isInert(name)
        {
            return .globalOption
        }
        return .unused
    }

    /// Reads an input or session file as aria2 does: a line of URIs separated by tabs (mirrors of one file), then
    /// its options on lines that start with a space or a tab (`dir=`, `out=`, `gid=`, `pause=true`...); blank lines
    /// and lines starting with `#` are skipped. The options are checked when the downloads are added.
    ///
    /// - Throws: ``RPCError`` naming the file and line of an option line that is not `name=value`, or one before any
    ///   URI.
    public static func readInput(_ text: String, name: String) throws(RPCError) -> [Entry] {
        var entries: [Entry] = []
        for (index, line) in lines(of: text).enumerated() {
            try checkLength(line, at: index + 1, in: name)
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix(" ") || line.hasPrefix("\t") {
                let option = line.trimmingCharacters(in: .whitespaces)
                if option.isEmpty || option.hasPrefix("#") { continue }
                guard !entries.isEmpty else {
                    throw RPCError("\(name):\(index + 1): an option line before any URI")
                }
                guard let equals = option.firstIndex(of: "="), equals != option.startIndex else {
                    throw RPCError("\(name):\(index + 1): '\(shown(option))' is not name=value")
                }
                let key = String(option[..<equals])
                entries[entries.count - 1].options[key, default: []].append(
                    String(option[option.index(after: equals)...]))
                continue
            }
            let uris = line.split(separator: "\t").map { $0.trimmingCharacters(in: .whitespaces) }.filter {
                !$0.isEmpty
            }
            guard !uris.isEmpty else { continue }
            entries.append(Entry(uris: uris, options: [:], line: index + 1))
        }
        return entries
    }

    /// The lines of `text`, without their ends (`\n` or `\r\n`).
    private static func lines(of text: String) -> [Substring] {
        // "\r\n" is one Character: both ends are separators.
        text.split(omittingEmptySubsequences: false) { $0 == "\n" || $0 == "\r\n" }
    }

    /// The longest line read: aria2's files have no longer ones, and a file without line ends is not one of them.
    static let maximumLineLength = 1 << 20

    /// Refuses a line longer than ``maximumLineLength``, naming it by its number (its text is not copied into the
    /// error, nor into the log that shows it).
    private static func checkLength(_ line: Substring, at number: Int, in name: String) throws(RPCError) {
        guard line.utf8.count > maximumLineLength else { return }
        throw RPCError("\(name):\(number): is longer than 1 MiB: not a line of aria2's files")
    }

    /// A line as an error shows it: its first word only (the option it meant to set), cut short; what follows it (a
    /// value, which may be a password, a token or the RPC secret) is left out.
    private static func shown(_ line: String) -> String {
        let word = line.prefix { !$0.isWhitespace && $0 != ":" && $0 != "=" }
        let cut = word.count > 60 ? String(word.prefix(57)) + "..." : String(word)
        return word.count < line.count ? cut + " ..." : cut
    }

    /// Writes `text` to `path` whole (``PrivateFile``): readable by its owner only, a crash leaves the old file or
    /// the new one, never half of one.
    static func save(_ text: String, to path: String) throws(RPCError) {
        do {
            try PrivateFile.replace(path, with: Array(text.utf8))
        } catch {
            throw RPCError("Failed to serialize session to '\(path)': \(error.reason)")
        }
    }

}
