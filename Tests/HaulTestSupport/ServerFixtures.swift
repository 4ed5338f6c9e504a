// What the fixtures that start real servers for tests (Nginx, Tinyproxy, SquidTLS, Microsocks) share: finding the
// binary, a directory of their own, a free loopback port, waiting until they accept connections, stopping them.
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Why a server a test starts (a proxy, nginx) could not be started: it is not installed, or it did not start (with
/// the end of what it said).
package struct FixtureError: Error, CustomStringConvertible {
    package let description: String
    init(_ description: String) { self.description = description }
}

/// The first of `paths` that is an executable, else an error that says how to install `name`.
func installedBinary(_ name: String, package: String? = nil, at paths: [String]) throws -> String {
    guard let binary = paths.first(where: FileManager.default.isExecutableFile) else {
        let package = package.map { " (Debian's \($0))" } ?? ""
        throw FixtureError(
            "\(name) is not installed\(package): run the tests with scripts/test, which installs it")
    }
    return binary
}

/// A fresh directory `haul-NAME-UUID` under the system temporary directory.
func makeDirectory(_ name: String) throws -> String {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-\(name)-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    return directory.path
}

/// Starts a server on a free loopback port and waits until it accepts connections. `launch` writes its configuration
/// for the port and starts it; a few ports are tried, as another process may take a free one before the server binds
/// it. When none works, `cleanUp` runs and the error tells the end of its standard error and of `log()`.
func startOnFreePort(
    _ name: String, within limit: Duration = .seconds(10), log: () -> String, launch: (Int) throws -> ChildProcess,
    cleanUp: () -> Void
) async throws -> (port: Int, process: ChildProcess) {
    var lastError: (any Error)?
    for _ in 0..<5 {
        do {
            let port = try freeLoopbackPort()
            let process = try launch(port)
            if await waitUntilAccepting(port: port, process: process, within: limit) { return (port, process) }
            process.send(SIGKILL)
            let output = await process.finish()
            lastError = FixtureError(
                "\(name) did not start on port \(port) (exit status \(output.status)): \(tail(output.stderr + log()))")
        } catch {
            lastError = error
        }
    }
    cleanUp()
    throw lastError ?? FixtureError("\(name) did not start")
}

/// Stops `process`: SIGTERM, SIGKILL if it has not exited after `limit`, then reaps it.
func terminate(_ process: ChildProcess, within limit: Duration = .seconds(10)) async {
    process.send(SIGTERM)
    _ = await process.exits(within: limit)
    _ = await process.finish()
}

/// Runs `body` with `fixture` and stops it however `body` ends.
func running<Fixture, Result>(
    _ fixture: Fixture, stop: (Fixture) async -> Void, _ body: (Fixture) async throws -> Result
) async throws -> Result {
    do {
        let result = try await body(fixture)
        await stop(fixture)
        return result
    } catch {
        await stop(fixture)
        throw error
    }
}

/// The last `count` lines of `text`.
func tail(_ text: String, lines count: Int = 20) -> String {
    text.split(separator: "\n", omittingEmptySubsequences: false).suffix(count).joined(separator: "\n")
}
