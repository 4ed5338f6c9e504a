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

/// ``eventually(_:within:_:sourceLocation:)`` for a condition that must await (a call over a socket).
package func eventuallyAsync(
    _ what: String, within limit: Duration = .seconds(10), _ condition: () async -> Bool,
    sourceLocation: SourceLocation = #_sourceLocation
) async throws {
    let deadline = ContinuousClock.now + limit
    while !(await condition()) {
        if ContinuousClock.now > deadline {
            Issue.record("never happened: \(what)", sourceLocation: sourceLocation)
            return
        }
        try await Task.sleep(for: .milliseconds(20))
    }
}

package func contentsOf(_ url: URL) -> [UInt8]? {
    (try? Data(contentsOf: url)).map { [UInt8]($0) }
}

/// Runs blocking work (a child process, a blocking socket) on a thread of its own and awaits it. Blocking one of
/// Swift concurrency's threads instead (as many as cores) starves every other test, and Foundation's
/// `Process` needs a free Dispatch thread to notice a child's exit: with all of them blocked, tests deadlock.
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

/// A child process run with `posix_spawn` and reaped with `waitpid`, its output going to files.
///
/// Not Foundation's `Process` with pipes: under a loaded test run its exit was sometimes never noticed (the child
/// stayed a zombie while `waitUntilExit` spun), and a pipe's write end inherited by another child (tests run in
/// parallel and spawn many) kept `readDataToEndOfFile` waiting. Files have no end-of-file to wait for, and every
/// descriptor above 2 is closed in the child.
package final class ChildProcess: Sendable {
    /// The child's process id.
    package let pid: pid_t
    private let stdoutPath: String
    private let stderrPath: String

    /// Starts `executable` (a path, or a name looked up in `PATH`) with `arguments`, `input` on standard input;
    /// `signalsAtDefault` unblocks every signal and resets its handling, as a shell starts a command.
    package init(
        _ executable: String, _ arguments: [String], input: String = "", environment: [String: String]? = nil,
        signalsAtDefault: Bool = false
    ) throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("haul-child-\(UUID().uuidString)")
        let stdinPath = scratch.path + ".in"
        stdoutPath = scratch.path + ".out"
        stderrPath = scratch.path + ".err"
        try Data(input.utf8).write(to: URL(fileURLWithPath: stdinPath))
        defer { unlink(stdinPath) }
        // Darwin's spawn types are opaque pointers (`<spawn.h>`), glibc's structures.
        #if canImport(Darwin)
        var actions: posix_spawn_file_actions_t? = nil
        #else
        var actions = posix_spawn_file_actions_t()
        #endif
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // glibc ignores EBADF from a close action, so a descriptor closed meanwhile does no harm.
        let open = (try? FileManager.default.contentsOfDirectory(atPath: Self.openDescriptors)) ?? []
        for descriptor in open.compactMap({ Int32($0) }) where descriptor > 2 {
            posix_spawn_file_actions_addclose(&actions, descriptor)
        }
        posix_spawn_file_actions_addopen(&actions, 0, stdinPath, O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdoutPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        let environment = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        // With `signalsAtDefault` the child starts as from a shell: no signal blocked, every one at its default.
        // Otherwise it inherits the spawning thread's mask, and Dispatch's threads block signals (nginx then never
        // sees SIGTERM).
        #if canImport(Darwin)
        var attributes: posix_spawnattr_t? = nil
        #else
        var attributes = posix_spawnattr_t()
        #endif
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        if signalsAtDefault {
            var none = sigset_t()
            sigemptyset(&none)
            var all = sigset_t()
            sigfillset(&all)
            posix_spawnattr_setsigmask(&attributes, &none)
            posix_spawnattr_setsigdefault(&attributes, &all)
            posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        }
        var pid: pid_t = 0
        let spawned = withCStrings([executable] + arguments) { argv in
            withCStrings(environment) { envp in posix_spawnp(&pid, executable, &actions, &attributes, argv, envp) }
        }
        guard spawned == 0 else { throw POSIXError(POSIXErrorCode(rawValue: spawned) ?? .EIO) }
        self.pid = pid
    }

    /// Sends `signal` to the child.
    package func send(_ signal: Int32) { kill(pid, signal) }

    /// What the child has written to standard output so far.
    package var stdoutSoFar: String { (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? "" }

    /// What the child has written to standard error so far.
    package var stderrSoFar: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    /// The directory that lists this process's open descriptors.
    #if os(Linux)
    private static let openDescriptors = "/proc/self/fd"
    #else
    private static let openDescriptors = "/dev/fd"
    #endif

    /// Whether the child has exited: a zombie until ``finish()`` reaps it, or gone (Linux: read from `/proc`;
    /// elsewhere `waitid` with `WNOWAIT`, which leaves it to ``finish()`` to reap).
    package var hasExited: Bool {
        #if os(Linux)
        (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8))?.contains(") Z") ?? true
        #else
        var info = siginfo_t()
        return waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != 0
        #endif
    }

    /// Whether the child exits within `limit`; one still running then is sent SIGKILL (reap it with ``finish()``).
    package func exits(within limit: Duration) async -> Bool {
        let deadline = ContinuousClock.now + limit
        while !hasExited, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(20)) }
        guard hasExited else {
            send(SIGKILL)
            return false
        }
        return true
    }

    /// Waits (on a thread of its own) for the child to exit; returns its exit status (128 + N when killed by signal
    /// N, as a shell reports it) and what it wrote.
    package func finish() async -> (status: Int32, stdout: String, stderr: String) {
        let pid = pid
        let status: Int32 = await withCheckedContinuation { continuation in
            Thread {
                var status: Int32 = 0
                while waitpid(pid, &status, 0) < 0, errno == EINTR {}
                let signal = status & 0x7f
                continuation.resume(returning: signal == 0 ? (status >> 8) & 0xff : 128 + signal)
            }.start()
        }
        defer {
            unlink(stdoutPath)
            unlink(stderrPath)
        }
        let read = { (path: String) in (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
        return (status, read(stdoutPath), read(stderrPath))
    }
}

/// Calls `body` with `strings` as a NULL-terminated array of C strings.
private func withCStrings<Result>(
    _ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> Result
) -> Result {
    let pointers = strings.map { strdup($0) } + [nil]
    defer { pointers.forEach { free($0) } }
    return pointers.withUnsafeBufferPointer { buffer in
        // Never empty: it ends with the NULL terminator.
        guard let base = buffer.baseAddress else { preconditionFailure("an array with a terminator has storage") }
        return body(base)
    }
}

/// A product of this package (`haul`, an example) built beside the running test bundle (the same build folder),
/// else in `.build/debug`; `nil` when it is not built.
package func builtProduct(named name: String) -> URL? {
    var candidates: [URL] = []
    if let executable = Bundle.main.executableURL {
        candidates.append(executable.deletingLastPathComponent().appendingPathComponent(name))
    }
    // This file is Tests/HaulTestSupport/TestSupport.swift: three levels below the package root.
    let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    candidates.append(packageRoot.appendingPathComponent(".build/debug/\(name)"))
    return candidates.first { FileManager.default.isExecutableFile(atPath: $0.path) }
}

/// A loopback port that was free a moment ago (bound, read and closed again).
package func freeLoopbackPort() throws -> Int {
    let descriptor = socket(AF_INET, streamSocket, 0)
    guard descriptor >= 0 else { throw POSIXError(.EIO) }
    defer { close(descriptor) }
    let (bound, port) = withLoopbackAddress { address, length in
        var length = length
        return bind(descriptor, address, length) == 0 && getsockname(descriptor, address, &length) == 0
    }
    guard bound else { throw POSIXError(.EADDRINUSE) }
    return port
}

/// Whether a TCP connection to 127.0.0.1:`port` can be made now; it is closed again at once.
package func loopbackConnects(to port: Int) -> Bool {
    let descriptor = socket(AF_INET, streamSocket, 0)
    guard descriptor >= 0 else { return false }
    defer { close(descriptor) }
    return withLoopbackAddress(port: port) { connect(descriptor, $0, $1) }.result == 0
}

/// A TCP socket connected to 127.0.0.1:`port`, for a test that speaks the protocol itself; the caller closes it.
package func connectedLoopbackSocket(port: Int) throws -> Int32 {
    let descriptor = socket(AF_INET, streamSocket, 0)
    guard descriptor >= 0 else { throw POSIXError(.EIO) }
    guard withLoopbackAddress(port: port, { connect(descriptor, $0, $1) }).result == 0 else {
        close(descriptor)
        throw POSIXError(.ECONNREFUSED)
    }
    return descriptor
}

/// Writes `bytes` to `descriptor`, all of them or until a write fails (a peer that closed on what it refused).
package func writeAll(_ descriptor: Int32, _ bytes: [UInt8]) {
    var sent = 0
    while sent < bytes.count {
        let count = bytes[sent...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        guard count > 0 else { return }
        sent += count
    }
}

/// What the peer sends on `descriptor` until it closes the connection (`[]`: closed with nothing), or `nil` when it is
/// still open after `seconds` with nothing sent.
package func readUntilClosed(_ descriptor: Int32, waiting seconds: Double) -> [UInt8]? {
    var timeout = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - seconds.rounded(.down)) * 1_000_000))
    setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        if count == 0 { return received }
        if count < 0 { return errno == ECONNRESET ? received : (received.isEmpty ? nil : received) }
        received += buffer.prefix(count)
    }
}

/// Connects to 127.0.0.1:`port` on a thread of its own, sends `request` as it is, and returns what the peer sends until it
/// closes the connection (``readUntilClosed(_:waiting:)``).
package func sendUntilClosed(port: Int, _ request: String, waiting seconds: Double) async throws -> [UInt8]? {
    try await onOwnThread {
        let descriptor = try connectedLoopbackSocket(port: port)
        defer { close(descriptor) }
        writeAll(descriptor, Array(request.utf8))
        return readUntilClosed(descriptor, waiting: seconds)
    }
}

/// Waits (polling, bounded) until a server that `process` is starting accepts connections on 127.0.0.1:`port`:
/// true once one connects; false when `process` exits first (a server that could not start) or after `limit`.
package func waitUntilAccepting(port: Int, process: ChildProcess, within limit: Duration = .seconds(10)) async -> Bool {
    let deadline = ContinuousClock.now + limit
    while ContinuousClock.now < deadline {
        if loopbackConnects(to: port) { return true }
        if process.hasExited { return false }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return false
}

/// `SOCK_STREAM` as `socket(2)` takes it: glibc imports it as an enum, Darwin as a plain `Int32`.
#if canImport(Glibc)
package let streamSocket = Int32(SOCK_STREAM.rawValue)
#else
package let streamSocket = SOCK_STREAM
#endif

/// What the machine running the tests is: suites that need Linux (Debian's servers, `/proc`, util-linux's `script`)
/// say so with `.enabled(if: TestPlatform.isLinux, ...)` and are skipped, with that reason, elsewhere. On Linux
/// nothing is skipped: a missing component is an error.
package enum TestPlatform {
    #if os(Linux)
    package static let isLinux = true
    #else
    package static let isLinux = false
    #endif
}

extension ChildProcess {
    /// The port a starting `haul daemon` serves on, read from its `serving aria2 JSON-RPC on http://127.0.0.1:PORT/`
    /// line (waiting up to 30 s for it), or nil when the process ended first.
    package func daemonRPCPort() async throws -> Int? {
        var port: Int?
        try await eventually("the daemon serves", within: .seconds(30)) {
            let marker = "://127.0.0.1:"
            let line = stderrSoFar.split(separator: "\n").first {
                $0.contains("serving aria2 JSON-RPC on ") && $0.contains(marker)
            }
            port = line.flatMap { line in
                line.range(of: marker).flatMap { Int(line[$0.upperBound...].prefix { $0.isNumber }) }
            }
            return port != nil || hasExited
        }
        return port
    }

    /// The port a starting `haul worker --metrics-listen 127.0.0.1:0` serves its metrics on, read from its `metrics
    /// on http://127.0.0.1:PORT` line (waiting up to 30 s for it), or nil when the process ended first.
    package func metricsPort() async throws -> Int? {
        var port: Int?
        try await eventually("the worker serves its metrics", within: .seconds(30)) {
            let marker = "metrics on http://127.0.0.1:"
            port = stderrSoFar.range(of: marker).flatMap { range in
                Int(stderrSoFar[range.upperBound...].prefix { $0.isNumber })
            }
            return port != nil || hasExited
        }
        return port
    }
}
