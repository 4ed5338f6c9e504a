// What every download example shares: an in-process loopback server, a fresh directory, bounded waiting, and
// a closing check that makes the example's exit status mean something (CI and a test run each example).
public import Foundation
public import HaulTestServer

/// Starts a loopback test server on a free port.
public func startExampleServer(root: URL? = nil) async throws -> TestServer {
    let server = TestServer(configuration: .init(root: root))
    try await server.start()
    return server
}

/// A fresh directory under the system temporary directory.
public func makeExampleDirectory(_ name: String) throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("haul-example-\(name)-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

/// Polls until `condition` holds (for a server-side effect with no event to await); gives up after 10 s.
public func waitUntil(_ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(10)
    while !condition() {
        guard ContinuousClock.now < deadline else { throw ExampleFailure(message: "timed out waiting") }
        try await Task.sleep(for: .milliseconds(5))
    }
}

/// Prints "OK: what" and exits 0, or "FAILED: what" and exits 1.
public func check(_ condition: Bool, _ what: String) -> Never {
    print(condition ? "OK: \(what)" : "FAILED: \(what)")
    exit(condition ? 0 : 1)
}

/// An example's own failure.
public struct ExampleFailure: Error, CustomStringConvertible {
    /// What went wrong.
    public let message: String
    /// Creates a failure.
    public init(message: String) { self.message = message }
    /// The message.
    public var description: String { message }
}
