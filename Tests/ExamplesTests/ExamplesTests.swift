import Foundation
import HaulTestSupport
import Testing

/// Runs each download example's built binary (each starts its own loopback HaulTestServer and checks its own
/// claims) and asserts it succeeded and said what it is there to show.
@Suite("Download examples", .timeLimit(.minutes(2)))
struct ExamplesTests {
    static let examples: [(name: String, mustPrint: String)] = [
        ("example-loop-vs-queue", "5 requests in flight at once"),
        ("example-serial-downloads", "3 / 6 files downloaded"),
        ("example-download-dependencies", "op2 and op3 started only after op1 finished"),
        ("example-quotes-pipeline", "saved 3 quotes"),
        ("example-async-loop", "cancelling while chapter3.pdf is in flight"),
        ("example-combine", "stop at the first failure, or keep going with replaceError"),
    ]

    @Test("each example runs against its loopback server and passes its own checks", arguments: examples.map(\.name))
    func example(name: String) async throws {
        let binary = try #require(builtProduct(named: name), "\(name) is not built; run `swift build` first")
        let (status, stdout, stderr) = try await ChildProcess(binary.path, []).finish()
        let text = stdout + stderr
        #expect(status == 0, "\(name) failed:\n\(text)")
        let expected = try #require(Self.examples.first { $0.name == name }).mustPrint
        #expect(text.contains(expected), "\(name) did not print '\(expected)':\n\(text)")
        #expect(text.contains("OK: "))
    }
}
