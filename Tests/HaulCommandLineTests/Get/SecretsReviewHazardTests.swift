import Foundation
import Haul
import Testing

@testable import HaulCommandLine

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A hostile review's: the password of a URL (`https://user:password@host/...`) never appears in what `haul get`
/// prints, its usage errors included (they go to standard error, and into CI logs).
@Suite("Secrets review: usage errors never show a URL's password (no I/O)")
struct SecretsReviewHazardTests {
    private static let password = "hunter2-s3cret"
    private let directory = URL(fileURLWithPath: "/tmp/haul-secrets-review-tests", isDirectory: true)

    /// Every problem planning `url` (and `mirrors`) reports, as the run prints them.
    private func problems(_ url: String, mirrors: [String] = []) -> [String] {
        var entry = InputEntry(source: InputOrigin(source: "argument 1"), url: url)
        entry.mirrors = mirrors
        switch Planner(settings: PlanSettings(directory: directory)).plan(entry) {
        case .success: return []
        case .failure(let failure): return failure.problems.map(\.description)
        }
    }

    @Test("a URL with a password but no file name: the 'no safe file name' problem hides the password")
    func noFileNameHidesPassword() {
        let problems = problems("https://alice:\(Self.password)@example.com/...")
        #expect(!problems.isEmpty)
        #expect(!problems.joined().contains(Self.password), "\(problems)")
    }

    @Test("a URL of another scheme with a password: the 'unsupported scheme' problem hides the password")
    func unsupportedSchemeHidesPassword() {
        let problems = problems("ftp://alice:\(Self.password)@example.com/file.iso")
        #expect(!problems.isEmpty)
        #expect(!problems.joined().contains(Self.password), "\(problems)")
        let mirror = self.problems(
            "https://example.com/file.iso", mirrors: ["ftp://alice:\(Self.password)@mirror.example/file.iso"])
        #expect(!mirror.isEmpty)
        #expect(!mirror.joined().contains(Self.password), "\(mirror)")
    }

    /// Every problem an input file of `text` reports.
    private func inputFileProblems(_ text: String) throws -> [String] {
        let descriptor = try InputSpool.makeTemporaryFile()
        defer { close(descriptor) }
        try InputSpool.writeAll(Array(text.utf8)[...], to: descriptor)
        var reader = InputFile(descriptor: descriptor, length: Int64(text.utf8.count), name: "urls.txt")
        var problems: [String] = []
        while let item = try reader.next() {
            if case .problem(let problem) = item { problems.append(problem.description) }
        }
        return problems
    }

    @Test("an input file's URL line with a space: the 'is not one URL' problem hides the password")
    func notOneURLHidesPassword() throws {
        let problems = try inputFileProblems("https://alice:\(Self.password)@example.com/a b.iso\n")
        #expect(!problems.isEmpty)
        #expect(!problems.joined().contains(Self.password), "\(problems)")
    }

    @Test("an input file's option given twice: the 'given twice for URL' problem hides the password")
    func optionGivenTwiceHidesPassword() throws {
        let problems = try inputFileProblems(
            "https://alice:\(Self.password)@example.com/a.iso\n  out=a.iso\n  out=b.iso\n")
        #expect(!problems.isEmpty)
        #expect(!problems.joined().contains(Self.password), "\(problems)")
    }

    /// What of `arguments` (the argument vector, program name first) stays readable once hidden.
    private func hidden(_ arguments: [String]) -> [String] {
        var bytes = arguments.map { Array($0.utf8) }
        for (index, range) in ArgumentSecrets.secretRanges(in: arguments) {
            for offset in range { bytes[index][offset] = UInt8(ascii: "*") }
        }
        return bytes.map { String(decoding: $0, as: UTF8.self) }
    }

    @Test(
        "-x USER:PASSWORD@HOST:PORT without a scheme (curl's form, which -x takes) is hidden from the argument vector")
    func proxyWithoutSchemeHiddenFromPS() throws {
        let arguments = ["haul", "get", "-x", "alice:\(Self.password)@127.0.0.1:3128", "https://example.com/a.iso"]
        // The parser takes it as the proxy, with its password.
        let get = try parse(Array(arguments.dropFirst()), as: GetCommand.self)
        let proxy = try get.network.proxyConfiguration(environment: [:]).proxy(
            for: URL(string: "https://example.com/")!)
        #expect(proxy?.credentials?.password == Self.password)
        let shown = hidden(arguments)
        #expect(!shown.joined(separator: " ").contains(Self.password), "\(shown)")
    }

    @Test(
        "-u grouped with a flag (-ku USER:PASSWORD, which the parser takes as -k -u) is hidden from the argument vector"
    )
    func groupedUserHiddenFromPS() throws {
        let arguments = ["haul", "get", "-ku", "alice:\(Self.password)", "https://example.com/a.iso"]
        let get = try parse(Array(arguments.dropFirst()), as: GetCommand.self)
        #expect(get.network.user == "alice:\(Self.password)")
        let shown = hidden(arguments)
        #expect(!shown.joined(separator: " ").contains(Self.password), "\(shown)")
    }

    @Test("a secret header without its colon, and -xUSER:PASSWORD@HOST joined, are hidden from the argument vector")
    func headerWithoutColonAndJoinedProxyHiddenFromPS() {
        let arguments = [
            "haul", "get", "--header", "Authorization Bearer \(Self.password)", "-xalice:\(Self.password)@proxy:3128",
            "--proxy=alice:\(Self.password)@proxy:3128", "--header", "X-Trace: visible", "https://example.com/a.iso",
        ]
        let shown = hidden(arguments)
        #expect(!shown.joined(separator: " ").contains(Self.password), "\(shown)")
        #expect(shown.contains("X-Trace: visible") && shown.contains("https://example.com/a.iso"), "\(shown)")
    }

    @Test("a secret header given without its colon (--header 'Authorization Bearer T'): the problem hides its value")
    func malformedSecretHeaderHidesValue() {
        var settings = PlanSettings(directory: directory)
        settings.headers = ["Authorization Bearer \(Self.password)"]
        let problems = Planner(settings: settings).optionProblems.map(\.description)
        #expect(!problems.isEmpty)
        #expect(!problems.joined().contains(Self.password), "\(problems)")
    }
}
