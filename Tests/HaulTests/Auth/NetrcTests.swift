import Foundation
import Testing

@testable import Haul

/// `.netrc` as curl reads it: the format, which entry serves a host, where the file is, and errors that never show
/// a password.
@Suite struct NetrcTests {
    typealias Entry = Netrc.Entry

    static func parse(_ text: String) throws -> Netrc {
        try Netrc(parsing: text, file: "test.netrc")
    }

    /// The error parsing `text` fails with, or `nil` if it parses.
    static func parseError(_ text: String) -> NetrcError? {
        do {
            _ = try Netrc(parsing: text, file: "test.netrc")
            return nil
        } catch {
            return error
        }
    }

    /// A new empty directory under the temporary directory, removed by `body`'s end.
    static func withScratchDirectory<T>(_ body: (URL) throws -> T) throws -> T {
        let directory = FileManager.default.temporaryDirectory.appending(
            path: "NetrcTests-\(UUID().uuidString)", directoryHint: .isDirectory)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        return try body(directory)
    }

    @Test func machineLoginPassword() throws {
        let netrc = try Self.parse(
            """
            machine example.com
              login me
              password secret
            machine other.example login you password hers account acct

            """)
        #expect(
            netrc.entries == [
                Entry(machine: "example.com", login: "me", password: "secret"),
                Entry(machine: "other.example", login: "you", password: "hers"),
            ])
        #expect(netrc.credentials(forHost: "example.com") == Credentials(user: "me", password: "secret"))
        #expect(netrc.credentials(forHost: "other.example") == Credentials(user: "you", password: "hers"))
        #expect(netrc.credentials(forHost: "nowhere.example") == nil)
    }

    @Test func keywordsIgnoreCaseAndValuesMayBeOnAnyLine() throws {
        let netrc = try Self.parse("MACHINE a.example\r\nLogin\r\n\tme\r\nPASSWORD\r\n\r\n s3 \r\n")
        #expect(netrc.entries == [Entry(machine: "a.example", login: "me", password: "s3")])
    }

    @Test func firstMatchingMachineWins() throws {
        let netrc = try Self.parse(
            """
            machine example.com login first password one
            machine example.com login second password two
            """)
        #expect(netrc.credentials(forHost: "example.com") == Credentials(user: "first", password: "one"))
    }

    @Test func defaultServesOtherHostsOnly() throws {
        let netrc = try Self.parse(
            """
            machine example.com login me password mine
            default login anonymous password guest
            """)
        #expect(netrc.entries.last == Entry(machine: nil, login: "anonymous", password: "guest"))
        #expect(netrc.credentials(forHost: "example.com") == Credentials(user: "me", password: "mine"))
        #expect(netrc.credentials(forHost: "else.example") == Credentials(user: "anonymous", password: "guest"))
    }

    @Test("a default written before a machine shadows it, as in curl")
    func defaultIsPositional() throws {
        let netrc = try Self.parse("default login anonymous password guest\nmachine example.com login me password mine")
        #expect(netrc.credentials(forHost: "example.com") == Credentials(user: "anonymous", password: "guest"))
    }

    @Test func hostMatchesWithoutRegardToCase() throws {
        let netrc = try Self.parse("machine Example.COM login me password secret")
        #expect(netrc.credentials(forHost: "example.com")?.user == "me")
        #expect(netrc.credentials(forHost: "EXAMPLE.com")?.user == "me")
        #expect(netrc.credentials(forHost: "example.co") == nil)
    }

    @Test func entriesWithoutPasswordOrLogin() throws {
        let netrc = try Self.parse(
            """
            machine empty.example
            machine empty.example login later password found
            machine nopass.example login me
            machine nouser.example password only
            """)
        // An entry with nothing in it is passed over, as curl passes it over.
        #expect(netrc.credentials(forHost: "empty.example") == Credentials(user: "later", password: "found"))
        #expect(netrc.credentials(forHost: "nopass.example") == Credentials(user: "me", password: ""))
        #expect(netrc.credentials(forHost: "nouser.example") == Credentials(user: "", password: "only"))
    }

    @Test func userConstrainsTheLookup() throws {
        let netrc = try Self.parse(
            """
            machine example.com login alice password a-pass
            machine example.com login bob
            machine example.com login bob password b-pass
            machine example.com password any-user
            machine example.com login carol password c-pass
            """)
        func lookUp(_ user: String) -> Credentials? { netrc.credentials(forHost: "example.com", user: user) }
        #expect(lookUp("alice") == Credentials(user: "alice", password: "a-pass"))
        // A login without a password does not serve a given user: the next entry with that login does.
        #expect(lookUp("bob") == Credentials(user: "bob", password: "b-pass"))
        // The login must be the same bytes: no case folding.
        #expect(lookUp("Bob") == Credentials(user: "Bob", password: "any-user"))
        // An entry without a login serves any user, so carol's own entry after it is never reached (curl's order).
        #expect(lookUp("carol") == Credentials(user: "carol", password: "any-user"))
        // An empty user is no user.
        #expect(lookUp("") == Credentials(user: "alice", password: "a-pass"))

        let strict = try Self.parse("machine example.com login alice password a-pass")
        #expect(strict.credentials(forHost: "example.com", user: "mallory") == nil)
    }

    @Test func quotedWords() throws {
        let netrc = try Self.parse(
            #"""
            machine "quoted.example" login "two words" password "a \"b\" c\\d\te\nf\rg\h"
            machine plain.example login "machine" password ""
            "default" account x
            """#)
        #expect(
            netrc.entries == [
                Entry(machine: "quoted.example", login: "two words", password: "a \"b\" c\\d\te\nf\rgh"),
                // A quoted word is never a keyword: "default" above is skipped like any unknown word.
                Entry(machine: "plain.example", login: "machine", password: ""),
            ])
        let spanning = try Self.parse("machine a login me password \"first\nsecond\"\nlogin you")
        #expect(spanning.entries == [Entry(machine: "a", login: "you", password: "first\nsecond")])
    }

    @Test func unknownWordsAreSkipped() throws {
        let netrc = try Self.parse("machine a.example port 21 login me protocol ftp password secret")
        #expect(netrc.entries == [Entry(machine: "a.example", login: "me", password: "secret")])
    }

    @Test func comments() throws {
        let netrc = try Self.parse(
            """
            # my credentials
              # indented comment with login and password words
            machine a.example login me # trailing: password nope
            password #not-a-comment
            machine b.example login
            # a comment line between a keyword and its value
            you password pw
            """)
        #expect(
            netrc.entries == [
                Entry(machine: "a.example", login: "me", password: "#not-a-comment"),
                Entry(machine: "b.example", login: "you", password: "pw"),
            ])
    }

    @Test func macdefIsSkippedToTheEmptyLine() throws {
        let netrc = try Self.parse(
            """
            machine good.example login g password p
            macdef init
            machine evil.example login x password "unclosed
            login y
            \r
            machine after.example login a password b
            """)
        #expect(
            netrc.entries == [
                Entry(machine: "good.example", login: "g", password: "p"),
                Entry(machine: "after.example", login: "a", password: "b"),
            ])
        #expect(netrc.credentials(forHost: "evil.example") == nil)
        // A macro running to the end of the file is no error.
        #expect(try Self.parse("machine a login b\nmacdef x\n  cd /\n").entries.count == 1)
        // The line count goes on after a macro.
        #expect(Self.parseError("macdef x\nline\n\n\nlogin me")?.line == 5)
    }

    @Test func loginOutsideAnEntryIsAnError() throws {
        let error = try #require(Self.parseError("# netrc\nlogin me\nmachine a password p"))
        #expect(error.line == 2)
        #expect(error.file == "test.netrc")
        #expect(error.description == "test.netrc:2: 'login' outside a 'machine' or 'default' entry")
        #expect(Self.parseError("password secret")?.line == 1)
        // A macro ends the entry before it.
        #expect(Self.parseError("machine a login me\nmacdef m\nx\n\npassword p")?.line == 5)
    }

    @Test func keywordWithoutValueAtEndIsAnError() throws {
        let error = try #require(Self.parseError("machine a\nlogin me\npassword\n\n"))
        #expect(error.line == 3)
        #expect(error.message == "'password' without a value")
        #expect(Self.parseError("machine")?.message == "'machine' without a value")
        // Where a value is wanted, a `#` mid-line is the value.
        let hashValue = try Self.parse("machine a login # password p")
        #expect(hashValue.entries == [Entry(machine: "a", login: "#", password: "p")])
        #expect(Self.parseError("default login\n# only a comment after\n")?.line == 1)
    }

    @Test func unterminatedQuoteIsAnError() throws {
        let error = try #require(Self.parseError("machine a\nlogin me\npassword \"abc\\\"\nmachine b\n"))
        #expect(error.line == 3)
        #expect(error.description.hasPrefix("test.netrc:3: "))
        #expect(Self.parseError("machine a login me password \"abc\\")?.line == 1)
    }

    @Test func readsAFile() throws {
        try Self.withScratchDirectory { directory in
            let file = directory.appending(path: "netrc")
            try Data("machine example.com login me password secret\n".utf8).write(to: file)
            let netrc = try Netrc(contentsOf: file)
            #expect(netrc.credentials(forHost: "example.com") == Credentials(user: "me", password: "secret"))

            // An error in a file read names its path.
            try Data("machine a\nlogin\n".utf8).write(to: file)
            let path = file.path(percentEncoded: false)
            #expect(throws: NetrcError(file: path, line: 2, message: "'login' without a value")) {
                try Netrc(contentsOf: file)
            }

            // Bytes that are not UTF-8 would be sent as some other password: refused, with the line.
            try Data("machine a\nlogin me password caf".utf8 + [0xE9]).write(to: file)
            let error = try #require(throws: NetrcError.self) { try Netrc(contentsOf: file) }
            #expect(error.line == 2)
            #expect(error.message == "is not UTF-8 text")
        }
    }

    @Test func unreadableFileErrorNamesTheFile() throws {
        try Self.withScratchDirectory { directory in
            let missing = directory.appending(path: "no-such-netrc")
            let error = try #require(throws: NetrcError.self) { try Netrc(contentsOf: missing) }
            let path = missing.path(percentEncoded: false)
            #expect(error.file == path)
            #expect(error.line == nil)
            #expect(error.description == "\(path): cannot be read: \(String(cString: strerror(ENOENT)))")
            #expect(error.localizedDescription == error.description)

            let directoryError = try #require(throws: NetrcError.self) { try Netrc(contentsOf: directory) }
            #expect(directoryError.file == directory.path(percentEncoded: false))
            #expect(directoryError.message.hasPrefix("cannot be read: "))
        }
    }

    @Test func defaultFile() throws {
        let fromNetrc = Netrc.defaultFile(environment: ["NETRC": "/etc/haul/netrc", "HOME": "/home/me"])
        #expect(fromNetrc?.path(percentEncoded: false) == "/etc/haul/netrc")

        let fromHome = Netrc.defaultFile(environment: ["NETRC": "", "HOME": "/home/me"])
        #expect(fromHome?.path(percentEncoded: false) == "/home/me/.netrc")

        // Without HOME (or with an empty one, as curl takes it), the password database's home directory, if any.
        let fromDatabase = Netrc.defaultFile(environment: [:])
        #expect(Netrc.defaultFile(environment: ["HOME": ""]) == fromDatabase)
        if let fromDatabase {
            #expect(fromDatabase.lastPathComponent == ".netrc")
            #expect(fromDatabase.deletingLastPathComponent().path(percentEncoded: false) != "")
        }
    }

    @Test func passwordsAreNeverShown() throws {
        let secret = "Tr0ub4dor-SECRET"
        let failing = [
            "password \(secret)",
            "machine a login me password \"\(secret)",
            "machine a login me password \"\(secret)\"\nmacdef m\nx\n\nlogin \(secret)",
            "machine a password \(secret) login",
            "machine a login me\n\(secret) password",
        ]
        for text in failing {
            let error = try #require(Self.parseError(text), "\(text.count) characters")
            for shown in [error.description, error.message, error.localizedDescription, String(reflecting: error)] {
                #expect(!shown.contains(secret))
            }
        }

        let netrc = try Self.parse("machine a.example login me password \(secret)\ndefault password \(secret)")
        #expect(netrc.entries[0].description == "machine a.example login me password ***")
        #expect(netrc.entries[1].description == "default password ***")
        var dumped = ""
        dump(netrc, to: &dumped)
        for shown in [String(describing: netrc), String(reflecting: netrc), "\(netrc.entries)", dumped] {
            #expect(!shown.contains(secret))
            #expect(shown.contains("***"))
        }
    }
}
