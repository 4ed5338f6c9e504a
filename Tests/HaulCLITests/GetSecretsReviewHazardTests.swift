import Foundation
import HaulTestSupport
import Testing

/// A hostile review's: `haul get` never prints the password of a URL given on its command line, not even in the
/// usage errors it exits 2 with (standard error goes to terminals and CI logs; `ps` hides the password, its own
/// message should not show it again).
@Suite("haul get: a URL's password in usage errors (secrets review)", .timeLimit(.minutes(2)))
struct GetSecretsReviewHazardTests {
    static let password = "hunter2-s3cret"

    @Test("a URL with a password and no file name: exit 2, and the password is on no output")
    func noFileNameHidesPassword() async throws {
        let dir = try TemporaryDirectory()
        // Planning fails before any connection: port 9 is never reached.
        let run = try await HaulProcess.run(["get", "-d", dir.path, "http://alice:\(Self.password)@127.0.0.1:9/..."])
        #expect(run.status == 2, "\(run)")
        #expect(!(run.stdout + run.stderr).contains(Self.password), "\(run)")
    }

    @Test("a URL of another scheme with a password: exit 2, and the password is on no output")
    func unsupportedSchemeHidesPassword() async throws {
        let dir = try TemporaryDirectory()
        let run = try await HaulProcess.run([
            "get", "-d", dir.path, "ftp://alice:\(Self.password)@127.0.0.1:9/file.iso",
        ])
        #expect(run.status == 2, "\(run)")
        #expect(!(run.stdout + run.stderr).contains(Self.password), "\(run)")
    }
}
