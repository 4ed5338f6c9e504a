// Helpers shared by the test targets: a scratch directory, bounded polling, blocking work off Swift concurrency's
// threads, loopback socket addresses.
package import Foundation
package import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A fresh directory under the system temporary directory, removed when the test is done with it.
package final class TemporaryDirectory: Sendable {
    package let url: URL
    package var path: String { url.path }

    package init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("haul-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit {
        try? FileManager.default.removeItem(at: url)
    }

    /// Every entry, hidden ones included, sorted.
    package func contents() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
    }

    package func file(_ name: String) -> URL { url.appendingPathComponent(name) }
}

/// Waits (polling, bounded) until `condition` holds: for effects that have no event to await, such as a
/// server noticing a closed connection. Fails the test if it never does.
package func eventually(
    _ what: String, within limit: Duration = .seconds(10), _ condition: () -> Bool,
    sourceLocation: SourceLocation = #_sourceLocation
) async throws {
    let deadline = ContinuousClock.now + limit
    while !condition() {
        if ContinuousClock.now > deadline {
            Issue.record("never happened: \(what)", sourceLocation: sourceLocation)
            return
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}

package func contentsOf(_ url: URL) -> [UInt8]? {
    (try? Data(contentsOf: url)).map { [UInt8]($0) }
}

/// Runs blocking work (a child process, a blocking socket) on a thread of its own and awaits it. Blocking one of
/// Swift concurrency's threads instead (as many as cores: 2 here) starves every other test, and Foundation's
/// `Process` needs a free Dispatch thread to notice a child's exit: with all of them blocked, tests deadlocked.
package func onOwnThread<Result: Sendable>(_ body: @escaping @Sendable () throws -> Result) async throws -> Result {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Swift.Result { try body() }) }.start()
    }
}

/// A TCP socket address on 127.0.0.1 (`port` 0: any), passed to `body` as the `sockaddr` that `bind`, `connect`
/// and `getsockname` take; `body` may change it (getsockname), and the final address is returned with its result.
package func withLoopbackAddress<Result>(
    port: Int = 0, _ body: (UnsafeMutablePointer<sockaddr>, socklen_t) throws -> Result
) rethrows -> (result: Result, port: Int) {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let result = try withUnsafeMutablePointer(to: &address) {
        try $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            try body($0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    return (result, Int(UInt16(bigEndian: address.sin_port)))
}
