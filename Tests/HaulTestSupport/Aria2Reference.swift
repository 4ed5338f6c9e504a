import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Debian's `aria2c` serving its JSON-RPC on a free loopback port with `secret`, downloading into a temporary
/// directory of its own: the reference `haul daemon`'s answers are compared with.
package final class Aria2Reference: Sendable {
    package let dir: TemporaryDirectory
    package let port: Int
    package let process: ChildProcess

    /// Starts it with `arguments` added to the RPC, its directory and no configuration file; waits until it accepts.
    package init(secret: String, arguments: [String] = []) async throws {
        dir = try TemporaryDirectory()
        port = try freeLoopbackPort()
        process = try ChildProcess(
            "/usr/bin/aria2c",
            [
                "--enable-rpc", "--rpc-listen-port=\(port)", "--rpc-secret=\(secret)", "--dir=\(dir.path)",
                "--no-conf", "--quiet", "--auto-file-renaming=false",
            ] + arguments, input: "", environment: ProcessInfo.processInfo.environment)
        try #require(await waitUntilAccepting(port: port, process: process), "aria2c did not start")
    }

    /// Stops it.
    package func stop() async {
        process.send(SIGKILL)
        _ = await process.finish()
    }
}
