import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

/// `haul get` over HTTPS: the options and the environment that say whom to trust, readable failures that leave
/// nothing behind, and `haul serve --tls` as a person would try it.
@Suite("haul get over https", .timeLimit(.minutes(2)))
struct GetTLSTests {
    func url(_ server: TestServer, _ name: String, size: Int = 5000) -> String {
        server.url(path: "/bytes/\(name)", query: ["size": "\(size)"]).absoluteString
    }

    @Test("--cacert trusts the test CA; without it the download fails for good, says why, and leaves nothing")
    func caCertificate() async throws {
        try await TestServer.withRunning(TestTLS.server()) { server in
            let dir = try TemporaryDirectory()
            let refused = try await HaulProcess.run(["get", "--no-journal", "-d", dir.path, url(server, "a.bin")])
            #expect(refused.status == 1, "\(refused)")
            #expect(
                refused.stderr.contains(
                    "certificate not trusted for 127.0.0.1: issued by an unknown CA (Haul Test CA)"),
                "\(refused)")
            #expect(!refused.stderr.contains("NIOSSL") && !refused.stderr.contains("BoringSSL"), "\(refused)")
            #expect(dir.contents().isEmpty)
            #expect(server.stats.requestCount == 0)

            let trusted = try await HaulProcess.run([
                "get", "--cacert", TestTLS.caFile, "-d", dir.path, url(server, "a.bin"),
            ])
            #expect(trusted.status == 0, "\(trusted)")
            #expect(contentsOf(dir.file("a.bin")) == TestServer.expectedBytes(name: "a.bin", size: 5000))
        }
    }

    @Test("SSL_CERT_FILE and SSL_CERT_DIR are honoured when no option names a CA")
    func environment() async throws {
        try await TestServer.withRunning(TestTLS.server()) { server in
            let dir = try TemporaryDirectory()
            let run = try await HaulProcess.run(
                ["get", "-q", "-d", dir.path, url(server, "e.bin")], environment: ["SSL_CERT_FILE": TestTLS.caFile])
            #expect(run.status == 0, "\(run)")
            #expect(contentsOf(dir.file("e.bin")) == TestServer.expectedBytes(name: "e.bin", size: 5000))

            // A bundle as systems ship them, with the test CA last, in CRLF lines, indented, after a block that is
            // not a certificate: every certificate in it is trusted.
            let system = (try? String(contentsOfFile: "/etc/ssl/certs/ca-certificates.crt", encoding: .utf8)) ?? ""
            let testCA = try String(contentsOfFile: TestTLS.caFile, encoding: .utf8)
                .split(separator: "\n").map { "  \($0)" }.joined(separator: "\r\n")
            let bundle = dir.file("bundle.pem")
            try Data(
                (system + "\n-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n" + testCA + "\r\n")
                    .utf8
            ).write(to: bundle)
            let bundled = try await HaulProcess.run(
                ["get", "-q", "-d", dir.path, url(server, "g.bin")], environment: ["SSL_CERT_FILE": bundle.path])
            #expect(bundled.status == 0, "\(bundled)")
            #expect(contentsOf(dir.file("g.bin")) == TestServer.expectedBytes(name: "g.bin", size: 5000))

            let missing = dir.file("no-such-ca.pem").path
            let bad = try await HaulProcess.run(
                ["get", "-q", "-d", dir.path, url(server, "f.bin")], environment: ["SSL_CERT_FILE": missing])
            #expect(bad.status == 2, "\(bad)")
            #expect(bad.stderr.contains("SSL_CERT_FILE: CA certificate file '\(missing)' does not exist"), "\(bad)")

            // Only https needs the CA: plain http runs whatever the variable says.
            try await TestServer.withRunning { plain in
                let run = try await HaulProcess.run(
                    ["get", "-q", "-d", dir.path, url(plain, "h.bin")], environment: ["SSL_CERT_FILE": missing])
                #expect(run.status == 0, "\(run)")
            }
        }
    }

    @Test("--insecure accepts a self-signed certificate and warns once")
    func insecure() async throws {
        try await TestServer.withRunning(TestTLS.server(certificate: .selfSigned)) { server in
            let dir = try TemporaryDirectory()
            let run = try await HaulProcess.run(
                ["get", "-k", "-d", dir.path, url(server, "i1.bin"), url(server, "i2.bin")])
            #expect(run.status == 0, "\(run)")
            #expect(run.stderr.components(separatedBy: "--insecure").count == 2, "\(run)")
            #expect(contentsOf(dir.file("i2.bin")) == TestServer.expectedBytes(name: "i2.bin", size: 5000))
        }
    }

    @Test("bad TLS options are usage errors that name the option, before any request")
    func badOptions() async throws {
        try await TestServer.withRunning(TestTLS.server()) { server in
            let dir = try TemporaryDirectory()
            let garbage = dir.file("garbage.pem")
            try Data("not pem\n".utf8).write(to: garbage)
            let cases: [([String], String)] = [
                (["--cacert", dir.file("none.pem").path], "--cacert: CA certificate file"),
                (
                    ["--cacert", garbage.path],
                    "--cacert: CA certificate file '\(garbage.path)' holds no PEM certificate"
                ),
                (
                    ["--capath", garbage.path],
                    "--capath: CA certificate directory '\(garbage.path)' is not a directory"
                ),
                (["--key", garbage.path], "--key needs --cert"),
                (["--http1.1", "--http2"], "--http1.1 and --http2 cannot be combined"),
            ]
            for (options, expected) in cases {
                let run = try await HaulProcess.run(["get", "-d", dir.path] + options + [url(server, "x.bin")])
                #expect(run.status == 2, "\(options): \(run)")
                #expect(run.stderr.contains(expected), "\(options): \(run)")
            }
            #expect(server.stats.requestCount == 0 && server.stats.connectionsAccepted == 0)
        }
    }

    @Test("--cert and --key present a client certificate to a server that asks for one")
    func clientCertificate() async throws {
        try await TestServer.withRunning(TestTLS.server(requiresClientCertificate: true)) { server in
            let dir = try TemporaryDirectory()
            let issued = try TestTLS.authority.clientCertificate()
            let certificate = dir.file("client.pem")
            let key = dir.file("client.key")
            try Data(issued.certificatePEM.utf8).write(to: certificate)
            try Data(issued.keyPEM.utf8).write(to: key)
            let target = dir.file("out").path
            let without = try await HaulProcess.run([
                "get", "--cacert", TestTLS.caFile, "-d", target, url(server, "c.bin"),
            ])
            #expect(without.status == 1, "\(without)")
            #expect(without.stderr.contains("asks for a client certificate it trusts"), "\(without)")
            let with = try await HaulProcess.run([
                "get", "--cacert", TestTLS.caFile, "--cert", certificate.path, "--key", key.path, "-d", target,
                url(server, "c.bin"),
            ])
            #expect(with.status == 0, "\(with)")
            #expect(contentsOf(dir.file("out/c.bin")) == TestServer.expectedBytes(name: "c.bin", size: 5000))
        }
    }

    @Test("a password in the URL is never printed")
    func passwordNotPrinted() async throws {
        try await TestServer.withRunning(TestTLS.server(certificate: .expired)) { server in
            let dir = try TemporaryDirectory()
            let secret = "s3cr3t-pass"
            let withPassword = url(server, "p.bin").replacingOccurrences(of: "https://", with: "https://me:\(secret)@")
            for output in [[], ["-v"], ["--json"]] {
                let run = try await HaulProcess.run(
                    ["get", "--cacert", TestTLS.caFile, "-d", dir.path] + output + [withPassword])
                #expect(run.status == 1, "\(run)")
                #expect(!run.stdout.contains(secret) && !run.stderr.contains(secret), "\(output): \(run)")
                #expect((run.stdout + run.stderr).contains("certificate for 127.0.0.1 has expired"), "\(run)")
            }
        }
    }

    @Test("haul serve --tls writes its CA certificate, and haul get --cacert trusts it")
    func serveTLS() async throws {
        let dir = try TemporaryDirectory()
        let caFile = dir.file("ca.pem").path
        let serve = try HaulProcess(["serve", "--tls", "--port", "0", "--ca-file", caFile])
        defer { serve.send(SIGTERM) }
        var base: String?
        try await eventually("haul serve printed its URL") {
            base = serve.printedURL
            return base != nil && FileManager.default.fileExists(atPath: caFile)
        }
        let url = try #require(base) + "/bytes/s.bin?size=7000"
        #expect(url.hasPrefix("https://"))
        let run = try await HaulProcess.run(["get", "--cacert", caFile, "-d", dir.path, url])
        #expect(run.status == 0, "\(run)")
        #expect(contentsOf(dir.file("s.bin")) == TestServer.expectedBytes(name: "s.bin", size: 7000))
        serve.send(SIGTERM)
        let stopped = await serve.finish()
        #expect(stopped.stdout.contains("CA certificate written to \(caFile)"), "\(stopped)")
    }
}
