import Foundation
import PostgresNIO
import NIOSSL

/// Where the shared queue lives: a `postgres://` (or `postgresql://`) URL, as libpq and `psql` take it.
///
/// `postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=MODE&sslrootcert=FILE`. The user, password and database
/// may be percent-encoded. `sslmode` is libpq's: `disable`, `prefer` (the default: TLS when the server offers it,
/// unverified, as libpq does), `require` (TLS, unverified), `verify-ca` (the server's certificate chains to
/// `sslrootcert`, or the system's roots) and `verify-full` (that, and its name is the host). A `host` query item that
/// starts with `/` is a directory holding the server's Unix socket, as in libpq.
///
/// The password never appears in ``description``.
public struct DatabaseURL: Sendable, CustomStringConvertible {
    /// The host, or the Unix socket directory.
    public var host: String
    /// The TCP port (also the socket file's number).
    public var port: Int
    /// The user to log in as.
    public var user: String
    /// The password, if any.
    public var password: String?
    /// The database name (default: the user's name, as libpq does).
    public var database: String
    /// How TLS is used.
    public var sslMode: SSLMode
    /// The CA certificates (PEM) `verify-ca` and `verify-full` check against, instead of the system's.
    public var sslRootCertificate: String?

    /// libpq's `sslmode` values.
    public enum SSLMode: String, Sendable, CaseIterable {
        /// Never TLS.
        case disable
        /// TLS when the server offers it, without checking its certificate.
        case prefer
        /// TLS, without checking the certificate.
        case require
        /// TLS with a certificate that chains to a trusted root.
        case verifyCA = "verify-ca"
        /// TLS with a trusted certificate for the host name.
        case verifyFull = "verify-full"
    }

    /// Parses `text`.
    /// - Throws: ``SharedQueueError`` naming the part that is wrong (never the password).
    public init(_ text: String) throws(SharedQueueError) {
        func bad(_ message: String) -> SharedQueueError { SharedQueueError(.invalidDatabaseURL, message) }
        // A URL that does not parse is not repeated: where its password is cannot be known.
        guard let components = URLComponents(string: text),
            let scheme = components.scheme?.lowercased()
        else { throw bad("the database URL is not a URL (expected postgres://USER@HOST:PORT/DATABASE)") }
        guard scheme == "postgres" || scheme == "postgresql" else {
            throw bad("unsupported scheme '\(scheme)' in the database URL: expected postgres:// or postgresql://")
        }
        var host = components.host.flatMap { $0.removingPercentEncoding } ?? ""
        var query: [String: String] = [:]
        for item in components.queryItems ?? [] { query[item.name] = item.value ?? "" }
        if let socket = query["host"] { host = socket }
        if host.isEmpty { host = "localhost" }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        self.host = host
        port = components.port ?? query["port"].flatMap { Int($0) } ?? 5432
        guard (1...65_535).contains(port) else { throw bad("port \(port) is not a TCP port") }
        let user = (components.percentEncodedUser?.removingPercentEncoding).flatMap { $0.isEmpty ? nil : $0 }
        guard let user = user ?? query["user"] ?? ProcessInfo.processInfo.environment["USER"] else {
            throw bad("the database URL names no user (postgres://USER@HOST/DATABASE)")
        }
        self.user = user
        password = components.percentEncodedPassword?.removingPercentEncoding ?? query["password"]
        let path = String(components.percentEncodedPath.drop(while: { $0 == "/" }))
        database = path.removingPercentEncoding.flatMap { $0.isEmpty ? nil : $0 } ?? query["dbname"] ?? user
        let mode = query["sslmode"] ?? "prefer"
        guard let sslMode = SSLMode(rawValue: mode) ?? (mode == "allow" ? .prefer : nil) else {
            throw bad(
                "sslmode='\(mode)' is not one of \(SSLMode.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        self.sslMode = sslMode
        sslRootCertificate = query["sslrootcert"]
        if let root = sslRootCertificate, !FileManager.default.isReadableFile(atPath: root) {
            throw bad("sslrootcert '\(root)' is not a readable file")
        }
    }

    /// Whether ``host`` is a Unix socket directory.
    public var isUnixSocket: Bool { host.hasPrefix("/") }

    /// The URL without its password.
    public var description: String {
        let hostPart = isUnixSocket ? "" : (host.contains(":") ? "[\(host)]" : host) + ":\(port)"
        let socket = isUnixSocket ? "?host=\(host)" : ""
        return "postgres://\(user)@\(hostPart)/\(database)\(socket)"
    }

    /// The client configuration postgres-nio takes.
    func clientConfiguration() throws(SharedQueueError) -> PostgresClient.Configuration {
        if isUnixSocket {
            return PostgresClient.Configuration(
                unixSocketPath: socketPath, username: user, password: password, database: database)
        }
        let tls = try tlsConfiguration()
        let mode: PostgresClient.Configuration.TLS =
            switch sslMode {
            case .disable: .disable
            case .prefer: .prefer(tls)
            case .require, .verifyCA, .verifyFull: .require(tls)
            }
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: user, password: password, database: database, tls: mode)
        if sslMode == .verifyFull, !isIPAddress { configuration.options.tlsServerName = host }
        return configuration
    }

    /// Whether ``host`` is an IP address: such a host is not sent as the TLS server name (SNI takes names only); the
    /// certificate is checked against the address connected to instead.
    private var isIPAddress: Bool {
        host.contains(":") || (!host.isEmpty && host.allSatisfy { $0 == "." || $0.isASCII && $0.isNumber })
    }

    /// The same, for one connection (the first, made to report an unreachable database at once: the pool retries
    /// in the background instead).
    func connectionConfiguration() throws(SharedQueueError) -> PostgresConnection.Configuration {
        if isUnixSocket {
            return PostgresConnection.Configuration(
                unixSocketPath: socketPath, username: user, password: password, database: database)
        }
        let mode: PostgresConnection.Configuration.TLS
        if sslMode == .disable {
            mode = .disable
        } else {
            let context: NIOSSLContext
            do {
                context = try NIOSSLContext(configuration: try tlsConfiguration())
            } catch let error as SharedQueueError {
                throw error
            } catch {
                throw SharedQueueError(.invalidDatabaseURL, "the TLS settings of the database URL: \(error)")
            }
            mode = sslMode == .prefer ? .prefer(context) : .require(context)
        }
        var configuration = PostgresConnection.Configuration(
            host: host, port: port, username: user, password: password, database: database, tls: mode)
        configuration.options.connectTimeout = .seconds(5)
        if sslMode == .verifyFull, !isIPAddress { configuration.options.tlsServerName = host }
        return configuration
    }

    private var socketPath: String { "\(host)/.s.PGSQL.\(port)" }

    /// How the server's certificate is checked, by `sslmode` and `sslrootcert`.
    private func tlsConfiguration() throws(SharedQueueError) -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        switch sslMode {
        case .disable, .prefer, .require:
            tls.certificateVerification = .none
        case .verifyCA:
            tls.certificateVerification = .noHostnameVerification
        case .verifyFull:
            tls.certificateVerification = .fullVerification
        }
        if let root = sslRootCertificate {
            do {
                tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(root))
            } catch {
                throw SharedQueueError(.invalidDatabaseURL, "sslrootcert '\(root)' holds no PEM certificate")
            }
        }
        return tls
    }
}
