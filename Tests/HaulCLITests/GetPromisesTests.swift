import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

/// `haul get`'s promises tried as a cron job and an attacker would: a revalidation that fails, a checksum published
/// later, secrets in the argument vector, TLS files that do not go together.
@Suite("haul get: promises held again", .timeLimit(.minutes(3)))
struct GetPromisesTests {
    @Test("a failed -N (404, cut, server gone) leaves the file Haul's: plain runs skip, the next -N checks again")
    func failedRevalidation() async throws {
        let dir = try TemporaryDirectory()
        let out = dir.path + "/D"
        var port = 0
        try await TestServer.withRunning { server in
            port = server.port
            let url = bytes(server, "f", size: 300_000)
            #expect(try await HaulProcess.run(["get", "-d", out, url]).status == 0)
            for failing in [["status": "404"], ["size": "300001", "cutAfter": "100000"]] {
                var query = ["size": "300000"]
                query.merge(failing) { _, new in new }
                let broken = server.url(path: "/bytes/f", query: query).absoluteString
                let run = try await HaulProcess.run(["get", "-N", "--retries", "0", "-d", out, broken])
                #expect(run.status == 1, "\(run)")
                let plain = try await HaulProcess.run(["get", "-d", out, url])
                #expect(plain.status == 0 && plain.stdout.contains("skip   f: already complete"), "\(plain)")
            }
        }
        // The server is gone, then back: a cron line with --on-conflict skip revalidates again once it is.
        let url = "http://127.0.0.1:\(port)/bytes/f?size=300000"
        let gone = try await HaulProcess.run(["get", "-N", "--retries", "0", "--on-conflict", "skip", "-d", out, url])
        #expect(gone.status == 1, "\(gone)")
        try await TestServer.withRunning(TestServer.Configuration(port: port)) { server in
            let cron = try await HaulProcess.run(["get", "-N", "--on-conflict", "skip", "-d", out, url])
            #expect(cron.status == 0 && cron.stdout.contains("unchanged on the server (304)"), "\(cron)")
            #expect(server.stats.requests.first?.value(forHeader: "if-none-match") != nil)
        }
        #expect(
            { contentsOf(URL(fileURLWithPath: out + "/f")) == TestServer.expectedBytes(name: "f", size: 300_000) }())
    }

    @Test("a rerun with checksum= lines the files do not match fails those files, naming the digests")
    func checksumPublishedLater() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let out = dir.path + "/D"
            let (a, b) = (bytes(server, "a", size: 1000), bytes(server, "b", size: 1000))
            #expect(try await HaulProcess.run(["get", "-d", out, a, b]).status == 0)
            let good = sha256Hex(TestServer.expectedBytes(name: "a", size: 1000))
            let bad = String(repeating: "0", count: 64)
            let list = dir.file("list.txt")
            try Data("\(a)\n  checksum=sha-256=\(good)\n\(b)\n  checksum=sha-256=\(bad)\n".utf8).write(to: list)
            let run = try await HaulProcess.run(["get", "-d", out, "-i", list.path])
            #expect(run.status == 1, "\(run)")
            #expect(run.stdout.contains("skip   a: already complete"), "\(run)")
            #expect(run.stderr.contains("fail   b: '\(out)/b' is there already, but its sha-256 is "), "\(run)")
            #expect(run.stderr.contains("expected \(bad)"), "\(run)")
            #expect(server.stats.requestCount == 2)
        }
    }

    @Test(
        "passwords in -u, --header, -x and URLs are hidden from the process's argument vector while it runs",
        .enabled(if: TestPlatform.isLinux, "reads the argument vector from /proc/PID/cmdline"))
    func secretsHiddenFromPS() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            var held = URLComponents(
                url: server.url(path: "/bytes/h", query: ["size": "10", "hold": "g"]), resolvingAgainstBaseURL: false)
            held?.user = "me"
            held?.password = "URLPASSWORD"
            let url = try #require(held?.string)
            let process = try HaulProcess([
                "get", "-u", "me:USERPASSWORD", "--header", "Authorization: Bearer HEADERTOKEN",
                "--header=Cookie: sid=COOKIEVALUE", "--header", "PRIVATE-TOKEN: GITLABTOKEN", "--noproxy", "*", "-x",
                "http://p:PROXYPASSWORD@127.0.0.1:9",
                "-d", dir.path, url,
            ])
            try await eventually("the request is held") { server.stats.heldByGate["g", default: 0] > 0 }
            let cmdline = try String(contentsOfFile: "/proc/\(process.pid)/cmdline", encoding: .utf8)
            server.openGate("g")
            let run = await process.finish()
            #expect(run.status == 0, "\(run)")
            for secret in ["USERPASSWORD", "HEADERTOKEN", "COOKIEVALUE", "PROXYPASSWORD", "URLPASSWORD", "GITLABTOKEN"]
            {
                #expect(!cmdline.contains(secret), "\(secret) in \(cmdline)")
            }
            // What is not a secret stays readable.
            #expect(cmdline.contains("me:*") && cmdline.contains("--noproxy") && cmdline.contains("/bytes/h"))
            // The request still carried them.
            #expect(server.stats.requests.first?.authorization == "Bearer HEADERTOKEN")
        }
    }

    @Test("a published file takes the user's umask: 077 gives 0600, 022 gives 0644")
    func umask() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let haul = try HaulProcess.binary().path
            for (mask, mode) in [("077", 0o600), ("022", 0o644)] {
                let out = dir.path + "/\(mask)"
                let shell = try ChildProcess(
                    "/bin/sh",
                    [
                        "-c", "umask \(mask) && exec \"$0\" get -q -d \"$1\" \"$2\"", haul, out,
                        bytes(server, "m", size: 10),
                    ],
                    environment: ProcessInfo.processInfo.environment)
                #expect(await shell.finish().status == 0)
                let attributes = try FileManager.default.attributesOfItem(atPath: out + "/m")
                #expect((attributes[.posixPermissions] as? Int) == mode, "umask \(mask)")
            }
        }
    }

    @Test("a client key that is not the certificate's, or is encrypted, is a usage error before any request")
    func clientKeyProblems() async throws {
        try await TestServer.withRunning(TestTLS.server()) { server in
            let dir = try TemporaryDirectory()
            let (one, two) = (try TestTLS.authority.clientCertificate(), try TestTLS.authority.clientCertificate())
            let certificate = dir.file("one.pem")
            let otherKey = dir.file("two.key")
            try Data(one.certificatePEM.utf8).write(to: certificate)
            try Data(two.keyPEM.utf8).write(to: otherKey)
            let url = server.url(path: "/bytes/k", query: ["size": "10"]).absoluteString
            let mismatch = try await HaulProcess.run([
                "get", "--cacert", TestTLS.caFile, "--cert", certificate.path, "--key", otherKey.path, "-d", dir.path,
                url,
            ])
            #expect(mismatch.status == 2, "\(mismatch)")
            #expect(mismatch.stderr.contains("the private key does not match the client certificate"), "\(mismatch)")

            let plainKey = dir.file("one.key")
            try Data(one.keyPEM.utf8).write(to: plainKey)
            let encrypted = dir.file("encrypted.key")
            let openssl = try ChildProcess(
                "/usr/bin/openssl",
                ["pkey", "-in", plainKey.path, "-aes256", "-passout", "pass:secret", "-out", encrypted.path],
                input: "", environment: ProcessInfo.processInfo.environment)
            #expect(await openssl.finish().0 == 0)
            let locked = try await HaulProcess.run([
                "get", "--cacert", TestTLS.caFile, "--cert", certificate.path, "--key", encrypted.path, "-d", dir.path,
                url,
            ])
            #expect(locked.status == 2, "\(locked)")
            #expect(locked.stderr.contains("holds an encrypted private key; decrypt it first"), "\(locked)")
            #expect(server.stats.connectionsAccepted == 0)
        }
    }
}
