// Real proxies for the proxy tests, each started on a free loopback port and stopped by the test: tinyproxy (an HTTP
// forward proxy), squid over TLS (an HTTPS proxy: TLS to the proxy itself) and microsocks (a SOCKS5 proxy).
// `scripts/test` installs them (Debian's tinyproxy, squid-openssl and microsocks).
package import Foundation
import HaulOperations
import HaulTestServer

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Debian's tinyproxy as an HTTP forward proxy on a free loopback port, started and stopped by a test: absolute-form
/// requests (`GET http://…`) and `CONNECT` to any port, from 127.0.0.1, with optional Basic authentication (a
/// request without credentials gets 407, one with wrong credentials 401: tinyproxy's own choice). Its log records
/// every request line it reads (see ``requests``); ``kill()`` and ``restart()`` break it in the middle of a test.
package final class Tinyproxy: Sendable {
    /// The port it listens on (127.0.0.1 only), the same across ``restart()``.
    package let port: Int
    /// The user and password it demands (Basic authentication), if any.
    package let credentials: (user: String, password: String)?
    private let binary: String
    private let directory: String
    // nil once stopped; replaced by `restart()`.
    private let process: Locked<ChildProcess?>

    /// Starts tinyproxy on a free loopback port, demanding `credentials` (Basic authentication; letters, digits, `-`,
    /// `.` and `_` only: tinyproxy's configuration takes no others) if given, and waits until it accepts connections.
    ///
    /// - Throws: ``FixtureError`` when tinyproxy is not installed (`scripts/test` installs it), when the
    ///   credentials have other characters, or when it does not start.
    package init(credentials: (user: String, password: String)? = nil) async throws {
        // tinyproxy's configuration grammar takes only these in BasicAuth's words; anything else stops it starting.
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._")
        if let credentials,
            [credentials.user, credentials.password].contains(where: { $0.isEmpty || !$0.allSatisfy(allowed.contains) })
        {
            throw FixtureError(
                "tinyproxy's BasicAuth takes a user and a password of letters, digits, '-', '.' and '_' only")
        }
        let binary = try installedBinary("tinyproxy", at: ["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"])
        let directory = try makeDirectory("tinyproxy")
        let (port, process) = try await startOnFreePort(
            "tinyproxy", log: { Self.log(in: directory) },
            launch: { port in
                try Self.configuration(directory: directory, port: port, credentials: credentials).write(
                    toFile: directory + "/tinyproxy.conf", atomically: true, encoding: .utf8)
                return try Self.launch(binary, directory: directory)
            },
            cleanUp: { try? FileManager.default.removeItem(atPath: directory) })
        self.port = port
        self.process = Locked(process)
        self.credentials = credentials
        self.binary = binary
        self.directory = directory
    }

    /// Starts tinyproxy (see ``init(credentials:)``), runs `body` with it, and stops it however `body` ends.
    package static func withRunning<Result>(
        credentials: (user: String, password: String)? = nil, _ body: (Tinyproxy) async throws -> Result
    ) async throws -> Result {
        let proxy = try await Tinyproxy(credentials: credentials)
        return try await running(proxy, stop: { await $0.stop() }, body)
    }

    /// `http://127.0.0.1:PORT`, without the credentials.
    package var url: URL { loopbackURL("http://127.0.0.1:\(port)") }

    /// The request lines it has read so far, in order, across restarts: e.g. `GET http://127.0.0.1:1234/a HTTP/1.1`
    /// or `CONNECT 127.0.0.1:4443 HTTP/1.1`. Refused ones (407, 401) are there too: tinyproxy logs a request line
    /// before it checks the credentials.
    package var requests: [String] {
        Self.log(in: directory).split(separator: "\n").compactMap { line in
            // `CONNECT   Nov 25 22:30:57.091 [15923]: Request (file descriptor 5): GET http://… HTTP/1.1`
            guard let marker = line.range(of: "]: Request (file descriptor "),
                let start = line.range(of: "): ", range: marker.upperBound..<line.endIndex)
            else { return nil }
            return String(line[start.upperBound...])
        }
    }

    /// Kills tinyproxy (SIGKILL) and returns once it is gone, its connections cut mid-transfer and its port closed;
    /// ``restart()`` starts it again on the same port. Does nothing once stopped.
    package func kill() {
        guard let child = process.withLock({ $0 }) else { return }
        child.send(SIGKILL)
        let deadline = ContinuousClock.now + .seconds(5)
        while !child.hasExited, ContinuousClock.now < deadline { usleep(1000) }
    }

    /// Stops tinyproxy (SIGTERM; a ``kill()``ed one is only reaped) and starts it again on the same ``port`` with the
    /// same configuration, waiting until it accepts connections. Not while ``stop()`` runs, nor after it.
    ///
    /// - Throws: ``FixtureError`` when it does not start again.
    package func restart() async throws {
        if let old = process.withLock({ $0.take() }) { await terminate(old) }
        var lastError: (any Error)?
        // The port was its own a moment ago (tinyproxy binds with SO_REUSEADDR), but give a slow bind a few chances.
        for _ in 0..<5 {
            let child = try Self.launch(binary, directory: directory)
            if await waitUntilAccepting(port: port, process: child) {
                process.withLock { $0 = child }
                return
            }
            child.send(SIGKILL)
            let output = await child.finish()
            lastError = FixtureError(
                "tinyproxy did not start again on port \(port): \(tail(output.stderr + Self.log(in: directory)))")
            try await Task.sleep(for: .milliseconds(200))
        }
        throw lastError ?? FixtureError("tinyproxy did not start again on port \(port)")
    }

    /// Stops tinyproxy (SIGTERM, and SIGKILL if it lingers) and removes its directory.
    package func stop() async {
        if let child = process.withLock({ $0.take() }) { await terminate(child) }
        try? FileManager.default.removeItem(atPath: directory)
    }

    private static func launch(_ binary: String, directory: String) throws -> ChildProcess {
        // -d: in the foreground, as our child.
        try ChildProcess(binary, ["-d", "-c", directory + "/tinyproxy.conf"], signalsAtDefault: true)
    }

    private static func log(in directory: String) -> String {
        (try? String(contentsOfFile: directory + "/tinyproxy.log", encoding: .utf8)) ?? ""
    }

    private static func configuration(
        directory: String, port: Int, credentials: (user: String, password: String)?
    ) -> String {
        // No User/Group: it runs as whoever starts it (root in CI; it logs a warning and goes on). No ConnectPort:
        // then CONNECT may go to any port, not only 443 and 563. LogLevel Info records each request line.
        """
        Listen 127.0.0.1
        Port \(port)
        Timeout 600
        MaxClients 100
        Allow 127.0.0.1
        LogFile "\(directory)/tinyproxy.log"
        LogLevel Info
        PidFile "\(directory)/tinyproxy.pid"
        \(credentials.map { "BasicAuth \($0.user) \($0.password)" } ?? "")

        """
    }
}

/// Debian's squid (squid-openssl) as an HTTPS proxy on a free loopback port, started and stopped by a test: the
/// client speaks TLS to the proxy itself (curl's `--proxy https://…`), with a certificate from ``TestTLS/authority``
/// for localhost and 127.0.0.1, then sends absolute-form requests for `http` URLs or `CONNECT` to any port. No
/// caching, no authentication; its access log records each request (see ``requests``).
package final class SquidTLS: Sendable {
    /// The port it listens on (127.0.0.1 only).
    package let port: Int
    private let directory: String
    // Squid names its shared memory segments (/dev/shm/NAME-…) after the service name: one of its own per instance.
    private let serviceName: String
    private let process: ChildProcess

    /// Starts squid on a free loopback port and waits until it accepts connections.
    ///
    /// - Throws: ``FixtureError`` when squid is not installed (`scripts/test` installs it) or does not start.
    package init() async throws {
        let binary = try installedBinary("squid", package: "squid-openssl", at: ["/usr/sbin/squid", "/usr/bin/squid"])
        let directory = try makeDirectory("squid")
        // Squid allows only letters and digits in a service name.
        let serviceName = "haul" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(12).lowercased()
        let user: String?
        do {
            let issued = try TestTLS.authority.serverCertificate(.valid)
            try Data(issued.certificatePEM.utf8).write(to: URL(fileURLWithPath: directory + "/cert.pem"))
            try Data(issued.keyPEM.utf8).write(to: URL(fileURLWithPath: directory + "/key.pem"))
            // Squid refuses to run as root: started as root, it drops to cache_effective_user, which must then be
            // able to write its logs here.
            user = try Self.effectiveUser(owning: directory)
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
        let (port, process) = try await startOnFreePort(
            "squid", within: .seconds(20), log: { Self.file("cache.log", in: directory) },
            launch: { port in
                // A squid that failed (a port taken meanwhile) leaves its segments, and the next would find them.
                Self.removeSharedMemory(of: serviceName)
                try Self.configuration(directory: directory, port: port, user: user).write(
                    toFile: directory + "/squid.conf", atomically: true, encoding: .utf8)
                // -N: in the foreground, one process (no kid); -n: the service name.
                return try ChildProcess(
                    binary, ["-N", "-n", serviceName, "-f", directory + "/squid.conf"], signalsAtDefault: true)
            },
            cleanUp: {
                Self.removeSharedMemory(of: serviceName)
                try? FileManager.default.removeItem(atPath: directory)
            })
        self.port = port
        self.process = process
        self.directory = directory
        self.serviceName = serviceName
    }

    /// Starts squid (see ``init()``), runs `body` with it, and stops it however `body` ends.
    package static func withRunning<Result>(_ body: (SquidTLS) async throws -> Result) async throws -> Result {
        let proxy = try await SquidTLS()
        return try await running(proxy, stop: { await $0.stop() }, body)
    }

    /// `https://localhost:PORT`, the name its certificate is for (127.0.0.1 is too); clients must trust
    /// ``TestTLS/caFile``. localhost must resolve to 127.0.0.1: it does not listen on ::1.
    package var url: URL { loopbackURL("https://localhost:\(port)") }

    /// Its requests so far, as `METHOD URL VERSION`, e.g. `GET http://127.0.0.1:1234/a HTTP/1.1` or
    /// `CONNECT 127.0.0.1:4443 HTTP/1.1`, refused ones too; squid logs each when it is done (a tunnel when it closes).
    /// Connections that never sent a request (a failed TLS handshake) are left out.
    package var requests: [String] {
        Self.file("access.log", in: directory).split(separator: "\n").compactMap { line in
            // `GET http://127.0.0.1:1234/a HTTP/1.1 200 TCP_MISS` (the `haul` logformat)
            let fields = line.split(separator: " ")
            guard fields.count >= 3, !fields[1].hasPrefix("error:") else { return nil }
            return fields[0..<3].joined(separator: " ")
        }
    }

    /// Stops squid (SIGTERM, and SIGKILL if it lingers) and removes its directory and shared memory.
    package func stop() async {
        await terminate(process)
        Self.removeSharedMemory(of: serviceName)
        try? FileManager.default.removeItem(atPath: directory)
    }

    private static func file(_ name: String, in directory: String) -> String {
        (try? String(contentsOfFile: directory + "/" + name, encoding: .utf8)) ?? ""
    }

    /// The user squid is to run as: as root, `proxy` (Debian's) or else `nobody`, made owner of `directory` and its
    /// files; nil when not root (squid then stays who it is).
    private static func effectiveUser(owning directory: String) throws -> String? {
        guard getuid() == 0 else { return nil }
        guard let entry = getpwnam("proxy") ?? getpwnam("nobody") else {
            throw FixtureError("squid needs a user to run as: there is neither 'proxy' nor 'nobody'")
        }
        let (uid, gid) = (entry.pointee.pw_uid, entry.pointee.pw_gid)
        let name = String(cString: entry.pointee.pw_name)
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        for path in [directory] + files.map({ directory + "/" + $0 }) where chown(path, uid, gid) != 0 {
            throw FixtureError("cannot give \(path) to \(name) for squid: errno \(errno)")
        }
        return name
    }

    private static func removeSharedMemory(of serviceName: String) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/dev/shm")) ?? []
        for name in names where name.hasPrefix(serviceName + "-") {
            try? FileManager.default.removeItem(atPath: "/dev/shm/" + name)
        }
    }

    private static func configuration(directory: String, port: Int, user: String?) -> String {
        // No `http_access deny CONNECT !SSL_ports` nor `!Safe_ports`: CONNECT and requests may go to any port.
        // strip_query_terms off: the log keeps the query. DNS (for names not in /etc/hosts) only ever asks 127.0.0.1,
        // from 127.0.0.1. shutdown_lifetime 0: SIGTERM does not wait for clients (30 s by default).
        """
        https_port 127.0.0.1:\(port) tls-cert=\(directory)/cert.pem tls-key=\(directory)/key.pem
        http_access allow localhost
        http_access deny all
        cache deny all
        cache_mem 0 MB
        \(user.map { "cache_effective_user \($0)" } ?? "")
        pid_filename \(directory)/squid.pid
        cache_log \(directory)/cache.log
        logformat haul %rm %ru HTTP/%rv %>Hs %Ss
        access_log stdio:\(directory)/access.log haul
        strip_query_terms off
        cache_store_log none
        logfile_rotate 0
        coredump_dir \(directory)
        visible_hostname localhost
        dns_nameservers 127.0.0.1
        udp_incoming_address 127.0.0.1
        udp_outgoing_address 127.0.0.1
        pinger_enable off
        netdb_filename none
        shutdown_lifetime 0 seconds

        """
    }
}

/// Debian's microsocks as a SOCKS5 proxy on a free loopback port, started and stopped by a test, with optional
/// user/password authentication. It resolves domain names itself (`socks5h`) and takes IPv4 and IPv6 addresses;
/// it logs each connection it makes (see ``connections``). It has no configuration nor files: its output is kept
/// by its ``ChildProcess``.
package final class Microsocks: Sendable {
    /// The port it listens on (127.0.0.1 only).
    package let port: Int
    /// The user and password it demands, if any.
    package let credentials: (user: String, password: String)?
    private let process: ChildProcess

    /// Starts microsocks on a free loopback port, demanding `credentials` (SOCKS5 user/password) if given, and
    /// waits until it accepts connections.
    ///
    /// - Throws: ``FixtureError`` when microsocks is not installed (`scripts/test` installs it) or does not
    ///   start.
    package init(credentials: (user: String, password: String)? = nil) async throws {
        let binary = try installedBinary("microsocks", at: ["/usr/bin/microsocks", "/usr/sbin/microsocks"])
        let authentication = credentials.map { ["-u", $0.user, "-P", $0.password] } ?? []
        let (port, process) = try await startOnFreePort(
            "microsocks", log: { "" },
            launch: { port in
                try ChildProcess(
                    binary, ["-i", "127.0.0.1", "-p", String(port)] + authentication, signalsAtDefault: true)
            },
            cleanUp: {})
        self.port = port
        self.process = process
        self.credentials = credentials
    }

    /// Starts microsocks (see ``init(credentials:)``), runs `body` with it, and stops it however `body` ends.
    package static func withRunning<Result>(
        credentials: (user: String, password: String)? = nil, _ body: (Microsocks) async throws -> Result
    ) async throws -> Result {
        let proxy = try await Microsocks(credentials: credentials)
        return try await running(proxy, stop: { await $0.stop() }, body)
    }

    /// `socks5://127.0.0.1:PORT`, without the credentials.
    package var url: URL { loopbackURL("socks5://127.0.0.1:\(port)") }

    /// The targets it has connected to so far, as it logs them, `HOST:PORT` with the host as the client sent it:
    /// `localhost:1234` (a domain name), `127.0.0.1:1234`. Failed connections and refused clients are not logged.
    package var connections: [String] {
        process.stderrSoFar.split(separator: "\n").compactMap { line in
            // `client[5] 127.0.0.1: connected to localhost:18080`
            guard line.hasPrefix("client["), let marker = line.range(of: ": connected to ") else { return nil }
            return String(line[marker.upperBound...])
        }
    }

    /// Stops microsocks (SIGTERM, and SIGKILL if it lingers).
    package func stop() async {
        await terminate(process)
    }
}

private func loopbackURL(_ string: String) -> URL {
    guard let url = URL(string: string) else { preconditionFailure("'\(string)' is not a URL") }
    return url
}
