public import Foundation

#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A `.netrc` file as curl reads it (`--netrc`, `--netrc-file`): `machine NAME` and `default` entries holding
/// `login`, `password` and `account` values, `macdef` macros, double-quoted words with backslash escapes, and `#`
/// comments.
///
/// Reading follows curl's lib/netrc.c, except that what curl silently passes over although it is almost certainly a
/// mistake is a ``NetrcError`` naming the file and line: `login`, `password` or `account` outside a `machine` or
/// `default` entry, a keyword with no value at the end of the file, and a quote that is never closed. Words that are
/// not keywords are skipped, as curl skips them, so a file written for a tool with more keywords still works.
///
/// Words are separated by spaces, tabs and line breaks. A word that starts with `"` runs to the next unescaped `"`,
/// across lines if need be; inside it `\n`, `\r` and `\t` are a line feed, a carriage return and a tab, and a
/// backslash before any other character stands for that character (`\"`, `\\`). A quoted word is never a keyword.
/// Keywords are matched without regard to case. A line whose first non-blank character is `#` is a comment; so is
/// the rest of a line from a word starting with `#` where a keyword is expected. Where a value is expected (after
/// `machine`, `login`, `password`, `account`), a word starting with `#` is the value, so `password #secret` gives
/// `#secret`. `macdef` skips everything up to the next empty line. When an entry repeats a keyword, the last value
/// counts.
///
/// A file others can read is not refused: curl does not refuse it either.
public struct Netrc: Sendable, Hashable {
    /// One `machine` (or `default`) entry.
    ///
    /// Its description never shows the password (`machine example.com login me password ***`), and neither does its
    /// mirror, so an entry that ends up in a message, a log line or a `dump` is not disclosed.
    public struct Entry: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
        /// The host name written after `machine`, or `nil` for the `default` entry, which matches any host.
        public var machine: String?
        /// The `login` value, if the entry has one.
        public var login: String?
        /// The `password` value, if the entry has one (it may be empty).
        public var password: String?

        /// Creates an entry: `machine` `nil` makes it the `default` entry.
        public init(machine: String?, login: String? = nil, password: String? = nil) {
            self.machine = machine
            self.login = login
            self.password = password
        }

        /// The entry as it would be written, with `***` for the password: `machine example.com login me password ***`.
        public var description: String {
            var words = machine.map { ["machine", $0] } ?? ["default"]
            if let login {
                words += ["login", login]
            }
            if password != nil {
                words += ["password", "***"]
            }
            return words.joined(separator: " ")
        }

        /// Same as ``description``.
        public var debugDescription: String { description }

        /// The fields, with `***` for the password.
        public var customMirror: Mirror {
            // Without this, `dump` and other reflection would print the password from the stored property.
            let shownPassword: String? = password == nil ? nil : "***"
            return Mirror(
                self,
                children: ["machine": machine as Any, "login": login as Any, "password": shownPassword as Any],
                displayStyle: .struct)
        }
    }

    /// The entries, in the order of the file: ``credentials(forHost:user:)`` takes the first one that fits.
    public var entries: [Entry]

    /// Creates a netrc from entries already known.
    public init(entries: [Entry]) {
        self.entries = entries
    }

    /// Parses netrc text; `file` names the source in errors.
    public init(parsing text: String, file: String) throws(NetrcError) {
        var lexer = NetrcLexer(text: text, file: file)
        var entries: [Entry] = []
        // The entry the next `login`/`password`/`account` belongs to: none before the first `machine`/`default`,
        // and none after a `macdef`, which ends an entry in curl (a value there would apply to no host).
        var current: Entry?
        while let word = try lexer.next(expectingValue: false) {
            switch word.keyword {
            case .machine:
                let name = try lexer.value(after: word)
                if let current {
                    entries.append(current)
                }
                current = Entry(machine: name)
            case .default:
                if let current {
                    entries.append(current)
                }
                current = Entry(machine: nil)
            case .login, .password, .account:
                guard current != nil else {
                    throw NetrcError(
                        file: file, line: word.line,
                        message: "'\(word.text)' outside a 'machine' or 'default' entry")
                }
                let value = try lexer.value(after: word)
                if word.keyword == .login {
                    current?.login = value
                } else if word.keyword == .password {
                    current?.password = value
                }  // `account` is read so its value is not taken for a keyword, and unused, as in curl.
            case .macdef:
                if let current {
                    entries.append(current)
                }
                current = nil
                lexer.skipMacro()
            case nil:
                // curl skips words it does not know; refusing them would make a file curl reads unusable here.
                continue
            }
        }
        if let current {
            entries.append(current)
        }
        self.entries = entries
    }

    /// Reads and parses a file.
    ///
    /// The file must be UTF-8 text: a password is sent as UTF-8, so bytes in another encoding could not be sent as
    /// written and are an error rather than a silently different password.
    public init(contentsOf file: URL) throws(NetrcError) {
        guard file.isFileURL else {
            throw NetrcError(file: file.absoluteString, line: nil, message: "is not a file URL")
        }
        let path = file.path(percentEncoded: false)
        let bytes = try Self.readFile(path)
        guard let text = String(validating: bytes, as: UTF8.self) else {
            // A line feed is never part of a multi-byte UTF-8 sequence, so lines can be checked one by one.
            let lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
            let bad = lines.firstIndex { String(validating: $0, as: UTF8.self) == nil }
            throw NetrcError(file: path, line: bad.map { $0 + 1 }, message: "is not UTF-8 text")
        }
        try self.init(parsing: text, file: path)
    }

    /// The file curl reads by default: $NETRC if set and non-empty (curl 8.16 and later honour it), else
    /// $HOME/.netrc, with the home directory from the password database (`getpwuid_r(geteuid())`, as curl does)
    /// when HOME is unset or empty. `nil` when there is no home directory either. Takes the environment as a
    /// parameter so tests can pass their own.
    public static func defaultFile(environment: [String: String] = ProcessInfo.processInfo.environment) -> URL? {
        if let netrc = environment["NETRC"], !netrc.isEmpty {
            return URL(fileURLWithPath: netrc, isDirectory: false)
        }
        // curl reads variables through curl_getenv, which takes an empty value for an unset one.
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? passwordDatabaseHome()
        guard let home else { return nil }
        return URL(fileURLWithPath: home, isDirectory: true).appending(path: ".netrc", directoryHint: .notDirectory)
    }

    /// The credentials for `host` (case-insensitive), following curl's rules.
    ///
    /// Entries are tried in the order of the file and the first that fits wins. A `machine` entry fits when its name
    /// equals `host` up to ASCII case; `default` fits any host, wherever it is written (the format wants it last; a
    /// `default` written earlier shadows the entries after it, as in curl). A fitting entry with neither login nor
    /// password is passed over, as curl passes it over, and the search goes on.
    ///
    /// Without `user`: an entry with a login gives that login and its password (empty when it has none); an entry
    /// with only a password gives an empty user and that password.
    ///
    /// With `user` (the user from the URL, or `-u` without a password; an empty one counts as none): an entry with a
    /// login fits only if the login is exactly `user` and it has a password; an entry with a password and no login
    /// fits any user. The credentials then carry `user`.
    ///
    /// Returns `nil` when no entry fits.
    public func credentials(forHost host: String, user: String? = nil) -> Credentials? {
        let user = user.flatMap { $0.isEmpty ? nil : $0 }
        let wantedHost = Self.asciiLowercased(host)
        for entry in entries {
            if let machine = entry.machine, Self.asciiLowercased(machine) != wantedHost {
                continue
            }
            switch (entry.login, entry.password) {
            case (let login?, let password):
                guard let user else {
                    return Credentials(user: login, password: password ?? "")
                }
                // curl compares the bytes, as the server will: no Unicode equivalence, no case folding.
                guard login.utf8.elementsEqual(user.utf8), let password else { continue }
                return Credentials(user: user, password: password)
            case (nil, let password?):
                return Credentials(user: user ?? "", password: password)
            case (nil, nil):
                continue
            }
        }
        return nil
    }

    /// `text` with ASCII letters in lower case: host names and keywords compare the way curl's `curl_strequal`
    /// compares them, which leaves other characters alone.
    static func asciiLowercased(_ text: String) -> [UInt8] {
        text.utf8.map { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) ? $0 + 32 : $0 }
    }

    /// The whole file at `path`, or an error with the system's reason.
    private static func readFile(_ path: String) throws(NetrcError) -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw Self.systemError(file: path, code: errno)
        }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count > 0 {
                bytes += chunk[..<count]
            } else if count == 0 {
                return bytes
            } else if errno != EINTR {
                // A directory opens but fails here, with EISDIR, which names the problem well enough.
                throw Self.systemError(file: path, code: errno)
            }
        }
    }

    private static func systemError(file: String, code: Int32) -> NetrcError {
        NetrcError(file: file, line: nil, message: "cannot be read: " + String(cString: strerror(code)))
    }

    /// The home directory of the effective user in the password database, as curl looks it up without HOME.
    private static func passwordDatabaseHome() -> String? {
        // The reentrant call, because getpwuid's static result could be overwritten by another thread.
        var size = 1024
        while size <= 1 << 20 {
            var buffer = [CChar](repeating: 0, count: size)
            var entry = passwd()
            var result: UnsafeMutablePointer<passwd>?
            let status = getpwuid_r(geteuid(), &entry, &buffer, buffer.count, &result)
            if status == ERANGE {
                size *= 4
                continue
            }
            guard status == 0, result != nil, let directory = entry.pw_dir else { return nil }
            let home = String(cString: directory)
            return home.isEmpty ? nil : home
        }
        return nil
    }
}

/// Why a netrc file could not be used: names the file, the 1-based line, and what is wrong; never a password.
///
/// Messages name keywords only, never a word of the file, so an error can be shown or logged as it is.
public struct NetrcError: Error, Sendable, Hashable, CustomStringConvertible, LocalizedError {
    /// The file, as named to ``Netrc/init(parsing:file:)``, or the path of the file read.
    public let file: String
    /// The 1-based line of the problem, or `nil` when it concerns the file as a whole (it could not be read).
    public let line: Int?
    /// What is wrong, without the file and line.
    public let message: String

    init(file: String, line: Int?, message: String) {
        self.file = file
        self.line = line
        self.message = message
    }

    /// `FILE:LINE: message`, or `FILE: message` without a line.
    public var description: String {
        if let line {
            return "\(file):\(line): \(message)"
        }
        return "\(file): \(message)"
    }

    /// Same as ``description``.
    public var errorDescription: String? { description }
}

/// The words of netrc text, with the line each starts on; comments and macros are skipped here.
struct NetrcLexer {
    /// The keywords; a quoted word is never one.
    enum Keyword: String {
        case machine, `default`, login, password, account, macdef
    }

    /// One word: its text with quotes and escapes resolved.
    struct Word {
        var text: String
        var line: Int
        var keyword: Keyword?
    }

    private static let space = UInt8(ascii: " ")
    private static let tab = UInt8(ascii: "\t")
    private static let lineFeed = UInt8(ascii: "\n")
    private static let carriageReturn = UInt8(ascii: "\r")
    private static let quote = UInt8(ascii: "\"")
    private static let backslash = UInt8(ascii: "\\")
    private static let hash = UInt8(ascii: "#")

    private let bytes: [UInt8]
    private let file: String
    private var position = 0
    private var line = 1
    // Whether only blanks precede `position` on its line: a `#` there comments out the line wherever it is.
    private var atLineStart = true

    init(text: String, file: String) {
        // Bytes rather than Characters: "\r\n" is one Character, and separators are all ASCII anyway.
        self.bytes = Array(text.utf8)
        self.file = file
    }

    /// The next word, or `nil` at the end of the text. `expectingValue` says a keyword's value is wanted, where a
    /// `#` starting a word mid-line is part of the value rather than a comment.
    mutating func next(expectingValue: Bool) throws(NetrcError) -> Word? {
        while true {
            skipSeparators()
            guard position < bytes.count else { return nil }
            if bytes[position] == Self.hash && (atLineStart || !expectingValue) {
                while position < bytes.count && bytes[position] != Self.lineFeed {
                    position += 1
                }
                continue
            }
            atLineStart = false
            let startLine = line
            if bytes[position] == Self.quote {
                return Word(text: try quoted(), line: startLine, keyword: nil)
            }
            let start = position
            while position < bytes.count && !Self.isSeparator(bytes[position]) {
                position += 1
            }
            let text = String(decoding: bytes[start..<position], as: UTF8.self)
            let lowered = String(decoding: Netrc.asciiLowercased(text), as: UTF8.self)
            return Word(text: text, line: startLine, keyword: Keyword(rawValue: lowered))
        }
    }

    /// The value after the keyword `word`: any word at all, keywords included, as curl takes it.
    mutating func value(after word: Word) throws(NetrcError) -> String {
        guard let value = try next(expectingValue: true) else {
            throw NetrcError(file: file, line: word.line, message: "'\(word.text)' without a value")
        }
        return value.text
    }

    /// Skips a macro definition: from just after `macdef` (its name included) to the next empty line.
    mutating func skipMacro() {
        // As curl: an empty line is a line feed right after a line feed (carriage returns between them aside); a
        // line of spaces does not end the macro.
        while position < bytes.count {
            let byte = bytes[position]
            position += 1
            guard byte == Self.lineFeed else { continue }
            line += 1
            var next = position
            while next < bytes.count && bytes[next] == Self.carriageReturn {
                next += 1
            }
            if next < bytes.count && bytes[next] == Self.lineFeed {
                // The carriage returns and the empty line's line feed are left to skipSeparators, which counts the
                // line and starts a fresh one.
                return
            }
        }
    }

    private mutating func skipSeparators() {
        while position < bytes.count && Self.isSeparator(bytes[position]) {
            if bytes[position] == Self.lineFeed {
                line += 1
                atLineStart = true
            }
            position += 1
        }
    }

    /// The quoted word starting at `position`, without its quotes and with its escapes resolved.
    private mutating func quoted() throws(NetrcError) -> String {
        let startLine = line
        position += 1
        var text: [UInt8] = []
        var escaped = false
        while position < bytes.count {
            var byte = bytes[position]
            position += 1
            if byte == Self.lineFeed {
                line += 1
            }
            if escaped {
                escaped = false
                switch byte {
                case UInt8(ascii: "n"): byte = Self.lineFeed
                case UInt8(ascii: "r"): byte = Self.carriageReturn
                case UInt8(ascii: "t"): byte = Self.tab
                default: break
                }
            } else if byte == Self.backslash {
                escaped = true
                continue
            } else if byte == Self.quote {
                // Only ASCII bytes were replaced or dropped, so the UTF-8 is as valid as the text it came from.
                return String(decoding: text, as: UTF8.self)
            }
            text.append(byte)
        }
        // No part of the word in the message: it may well be a password.
        throw NetrcError(file: file, line: startLine, message: "quoted word never closed (missing '\"')")
    }

    private static func isSeparator(_ byte: UInt8) -> Bool {
        byte == space || byte == tab || byte == lineFeed || byte == carriageReturn
    }
}

extension Netrc: CredentialProvider {
    /// The credentials of the entry for the URL's host (see ``credentials(forHost:user:)``): a netrc file names
    /// hosts, so a redirect to another host gets that host's entry, or none.
    public func credentials(for url: URL) -> Credentials? {
        guard let host = url.host(percentEncoded: false) else { return nil }
        return credentials(forHost: host)
    }
}
