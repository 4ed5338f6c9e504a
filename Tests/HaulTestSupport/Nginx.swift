package import Foundation
import HaulTestServer

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Debian's nginx serving HTTPS with HTTP/2 on a free loopback port, started and stopped by a test: a real h2 server
/// beside Haul's own HTTP/1.1 test server. Its certificate comes from ``TestTLS/authority``; its access log records,
/// for every request, the connection it came on and the protocol (`connection protocol status uri`).
package final class Nginx: Sendable {
    /// The port it listens on (127.0.0.1).
    package let port: Int
    /// The directory it serves at `/`.
    package let root: URL
    private let directory: String
    private let process: ChildProcess

    /// Starts nginx with `extraDirectives` in its `server` block (e.g. `keepalive_requests 10;`), serving `files`
    /// (name to bytes) at `/`, and waits until it accepts connections.
    ///
    /// - Throws: ``FixtureError`` when nginx is not installed (`scripts/test` installs it) or does not start.
    package init(files: [String: [UInt8]], extraDirectives: String = "") async throws {
        let binary = try installedBinary("nginx", at: ["/usr/sbin/nginx", "/usr/bin/nginx"])
        let directory = try makeDirectory("nginx")
        self.directory = directory
        root = URL(fileURLWithPath: directory + "/www", isDirectory: true)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        for (name, bytes) in files { try Data(bytes).write(to: root.appendingPathComponent(name)) }
        let issued = try TestTLS.authority.serverCertificate(.valid)
        try Data(issued.certificatePEM.utf8).write(to: URL(fileURLWithPath: directory + "/cert.pem"))
        try Data(issued.keyPEM.utf8).write(to: URL(fileURLWithPath: directory + "/key.pem"))
        (port, process) = try await startOnFreePort(
            "nginx", log: { (try? String(contentsOfFile: directory + "/error.log", encoding: .utf8)) ?? "" },
            launch: { port in
                try Self.configuration(directory: directory, port: port, extra: extraDirectives).write(
                    toFile: directory + "/nginx.conf", atomically: true, encoding: .utf8)
                return try ChildProcess(
                    binary, ["-p", directory, "-c", directory + "/nginx.conf"], signalsAtDefault: true)
            },
            cleanUp: { try? FileManager.default.removeItem(atPath: directory) })
    }

    /// Starts nginx (see ``init(files:extraDirectives:)``), runs `body` with it, and stops it however `body` ends.
    package static func withRunning<Result>(
        files: [String: [UInt8]], extraDirectives: String = "", _ body: (Nginx) async throws -> Result
    ) async throws -> Result {
        try await running(
            try await Nginx(files: files, extraDirectives: extraDirectives), stop: { await $0.stop() }, body)
    }

    /// `https://127.0.0.1:PORT/NAME`.
    package func url(_ name: String) -> URL {
        guard let url = URL(string: "https://127.0.0.1:\(port)/\(name)") else {
            preconditionFailure("'\(name)' does not make a URL")
        }
        return url
    }

    /// The access log's lines so far, each `(connection, protocol, status, uri)`.
    package var accessLog: [(connection: Int, protocol: String, status: Int, uri: String)] {
        let text = (try? String(contentsOfFile: directory + "/access.log", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count == 4, let connection = Int(fields[0]), let status = Int(fields[2]) else { return nil }
            return (connection, String(fields[1]), status, String(fields[3]))
        }
    }

    /// Stops nginx and removes its directory.
    package func stop() async {
        process.send(SIGTERM)
        _ = await process.finish()
        try? FileManager.default.removeItem(atPath: directory)
    }

    private static func configuration(directory: String, port: Int, extra: String) -> String {
        """
        daemon off;
        master_process off;
        user root;
        worker_processes 1;
        error_log \(directory)/error.log warn;
        pid \(directory)/nginx.pid;
        events { worker_connections 256; }
        http {
            log_format haul '$connection $server_protocol $status $request_uri';
            access_log \(directory)/access.log haul;
            client_body_temp_path \(directory)/body;
            proxy_temp_path \(directory)/proxy;
            fastcgi_temp_path \(directory)/fastcgi;
            uwsgi_temp_path \(directory)/uwsgi;
            scgi_temp_path \(directory)/scgi;
            server {
                listen 127.0.0.1:\(port) ssl http2;
                ssl_certificate \(directory)/cert.pem;
                ssl_certificate_key \(directory)/key.pem;
                root \(directory)/www;
                \(extra)
            }
        }
        """
    }
}
