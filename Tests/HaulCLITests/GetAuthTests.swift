import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

/// `haul get` with credentials and cookies: the user and password of a URL, `--user`, netrc files, cookie files
/// and jars, checked against the test server's record of each request; and no password anywhere a person or a
/// file could see it.
@Suite("haul get: credentials and cookies", .timeLimit(.minutes(2)))
struct GetAuthTests {
    static let user = "al ice"
    static let password = "s3cr:et w@rd"
    static let basic = "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
    /// A cookie value no path, port or timing in the output could contain by chance.
    static let cookieValue = "c00kie-5ecret-v4lue"

    /// A generated file's URL with the test credentials as its user info.
    func urlWithPassword(_ server: TestServer, _ name: String, _ query: [String: String] = [:]) throws -> String {
        var components = try #require(
            URLComponents(url: server.url(path: "/bytes/\(name)", query: query), resolvingAgainstBaseURL: false))
        components.user = Self.user
        components.password = Self.password
        return try #require(components.string)
    }

    /// Everything under `directory` (the journal's database and logs included), as text.
    func everyFile(in directory: URL) -> String {
        let files = FileManager.default.enumerator(atPath: directory.path)?.compactMap { $0 as? String } ?? []
        return files.compactMap { contentsOf(directory.appendingPathComponent($0)) }
            .map { String(decoding: $0, as: UTF8.self) }.joined()
    }

    @Test(
        "a URL's password is sent (Basic) and appears in no output, NDJSON line, log line or journal file; the journal directory is owner-only"
    )
    func urlPasswordNeverShown() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let good = try urlWithPassword(server, "ok.bin", ["size": "300000", "requireAuth": Self.basic])
            let missing = try urlWithPassword(server, "gone.bin", ["status": "404"])
            for arguments in [
                ["get", "-d", dir.path], ["get", "--json", "-d", dir.path], ["get", "-v", "-d", dir.path],
            ] {
                let run = try await HaulProcess.run(arguments + [good, missing])
                #expect(run.status == 1, "\(run)")
                let seen = run.stdout + run.stderr + everyFile(in: dir.url)
                #expect(!seen.contains(Self.password) && !seen.contains("s3cr%3Aet"), "\(run)")
                #expect(!seen.contains(Self.basic.dropFirst(6)))
                #expect(run.stdout.contains("404") || run.stderr.contains("404"))
            }
            // Secrets in header fields stay out of the journal too (it keeps a failed download's request).
            let fields = try await HaulProcess.run([
                "get", "-d", dir.path, "--header", "Authorization: Bearer h3ader-t0ken", "--header",
                "Cookie: c00kie-s3cret", server.url(path: "/bytes/gone2.bin", query: ["status": "404"]).absoluteString,
            ])
            #expect(fields.status == 1, "\(fields)")
            let stored = everyFile(in: dir.url)
            #expect(!stored.contains("h3ader-t0ken") && !stored.contains("c00kie-s3cret"))
            #expect(
                { contentsOf(dir.file("ok.bin")) == TestServer.expectedBytes(name: "ok.bin", size: 300_000) }(),
                "not the server's bytes")
            #expect(
                server.stats.requests.filter { $0.path == "/bytes/ok.bin" }.allSatisfy {
                    $0.authorization == Self.basic
                })
            let journal = try FileManager.default.attributesOfItem(atPath: dir.file(".haul").path)
            #expect((journal[.posixPermissions] as? Int) == 0o700)
        }
    }

    @Test("a 401 without credentials fails at once with a message saying so; --user sends them to each URL's origin")
    func userOption() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let locked = server.url(path: "/bytes/locked.bin", query: ["size": "10", "requireAuth": Self.basic])
            let refused = try await HaulProcess.run(["get", "--no-journal", "-d", dir.path, locked.absoluteString])
            #expect(refused.status == 1 && refused.stdout.contains("401") && refused.stdout.contains("none were sent"))
            #expect(server.stats.requests.count == 1)
            let elsewhere = server.url(path: "/bytes/other.bin", query: ["size": "10"], host: "localhost")
            let hop = server.url(path: "/bytes/hop", query: ["size": "10", "redirectTo": elsewhere.absoluteString])
            server.resetStats()
            let run = try await HaulProcess.run([
                "get", "--no-journal", "-d", dir.path, "-u", "\(Self.user):\(Self.password)", locked.absoluteString,
                "-o", "x",
            ])
            #expect(run.status == 0, "\(run)")
            server.resetStats()
            let redirected = try await HaulProcess.run([
                "get", "--no-journal", "-d", dir.path, "-u", "\(Self.user):\(Self.password)", "-o", "y",
                hop.absoluteString,
            ])
            #expect(redirected.status == 0, "\(redirected)")
            #expect(server.stats.requests.map(\.authorization) == [Self.basic, nil])
        }
    }

    @Test("--netrc-file and --netrc-optional follow curl's rules; a bad or missing file names itself and its line")
    func netrc() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let netrc = dir.file("netrc")
            try "machine 127.0.0.1 login \"\(Self.user)\" password \"\(Self.password)\"\n".write(
                to: netrc, atomically: true, encoding: .utf8)
            let locked = server.url(path: "/bytes/n.bin", query: ["size": "10", "requireAuth": Self.basic])
            let out = dir.file("out")
            let run = try await HaulProcess.run([
                "get", "--no-journal", "-d", out.path, "--netrc-file", netrc.path, locked.absoluteString,
            ])
            #expect(run.status == 0, "\(run)")

            // --netrc-optional: the URL's own credentials come first; a missing file is no error.
            var components = try #require(URLComponents(url: locked, resolvingAgainstBaseURL: false))
            components.user = "wrong"
            components.password = "pw"
            let withOwn = try #require(components.string)
            let optional = try await HaulProcess.run(
                ["get", "--no-journal", "-d", out.path, "-o", "o2", "--netrc-optional", withOwn],
                environment: ["NETRC": netrc.path])
            #expect(optional.status == 1 && optional.stdout.contains("refused"), "\(optional)")
            // --netrc: the file's credentials replace the URL's.
            let required = try await HaulProcess.run(
                ["get", "--no-journal", "-d", out.path, "-o", "o3", "--netrc", withOwn],
                environment: ["NETRC": netrc.path])
            #expect(required.status == 0, "\(required)")
            let absent = try await HaulProcess.run(
                ["get", "--no-journal", "-d", out.path, "-o", "o4", "--netrc-optional", locked.absoluteString],
                environment: ["NETRC": dir.file("none").path])
            #expect(absent.status == 1 && absent.stdout.contains("none were sent"), "\(absent)")

            let missingFile = try await HaulProcess.run([
                "get", "-d", out.path, "--netrc-file", dir.file("none").path, locked.absoluteString,
            ])
            #expect(missingFile.status == 2 && missingFile.stderr.contains("--netrc-file"), "\(missingFile)")
            try "machine x\nlogin\n".write(to: netrc, atomically: true, encoding: .utf8)
            let bad = try await HaulProcess.run([
                "get", "-d", out.path, "--netrc-file", netrc.path, locked.absoluteString,
            ])
            #expect(bad.status == 2 && bad.stderr.contains("\(netrc.path):2"), "\(bad)")
        }
    }

    @Test("-b sends a cookie file's cookies where they match; -c keeps what servers set and writes it mode 0600")
    func cookies() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let file = dir.file("in.txt")
            try "127.0.0.1\tFALSE\t/\tFALSE\t0\tgiven\tyes\nexample.org\tTRUE\t/\tFALSE\t0\tforeign\tno\n".write(
                to: file, atomically: true, encoding: .utf8)
            let jar = dir.file("jar.txt")
            let url = server.url(
                path: "/bytes/c.bin",
                query: ["size": "10", "redirects": "1", "setCookie": "sid=\(Self.cookieValue); Path=/"])
            let run = try await HaulProcess.run([
                "get", "--no-journal", "-d", dir.file("out").path, "-b", file.path, "--cookie-jar", jar.path,
                url.absoluteString,
            ])
            #expect(run.status == 0, "\(run)")
            #expect(server.stats.requests.map(\.cookie) == ["given=yes", "given=yes; sid=\(Self.cookieValue)"])
            let written = String(decoding: contentsOf(jar) ?? [], as: UTF8.self)
            #expect(
                written.contains("\tsid\t\(Self.cookieValue)") && written.contains("\tgiven\tyes")
                    && written.contains("foreign"))
            let mode = try FileManager.default.attributesOfItem(atPath: jar.path)[.posixPermissions] as? Int
            #expect(mode == 0o600)
            #expect(!run.stdout.contains(Self.cookieValue) && !run.stderr.contains(Self.cookieValue))

            // The jar read back on the next run; a missing -b file is an error, unless it is the jar to write.
            server.resetStats()
            let again = try await HaulProcess.run([
                "get", "--no-journal", "-d", dir.file("out2").path, "-b", jar.path, url.absoluteString,
            ])
            #expect(
                again.status == 0 && server.stats.requests.first?.cookie == "given=yes; sid=\(Self.cookieValue)",
                "\(again)")
            let missing = try await HaulProcess.run(["get", "-b", dir.file("none").path, url.absoluteString])
            #expect(missing.status == 2 && missing.stderr.contains("-b/--cookie"), "\(missing)")
            let fresh = dir.file("fresh.txt")
            let start = try await HaulProcess.run([
                "get", "--no-journal", "-d", dir.file("out3").path, "-b", fresh.path, "--cookie-jar", fresh.path,
                url.absoluteString,
            ])
            #expect(start.status == 0 && String(decoding: contentsOf(fresh) ?? [], as: UTF8.self).contains("sid"))
            try "not a cookie line\n".write(to: file, atomically: true, encoding: .utf8)
            let bad = try await HaulProcess.run(["get", "-b", file.path, url.absoluteString])
            #expect(bad.status == 2 && bad.stderr.contains("\(file.path):1"), "\(bad)")
        }
    }

    @Test("a bad --proxy or proxy variable is a usage error naming it, its password hidden; --proxy '' ignores them")
    func badProxySettings() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let url = server.url(path: "/bytes/p.bin", query: ["size": "10"]).absoluteString
            let option = try await HaulProcess.run(["get", "-d", dir.path, "--proxy", "socks4://u:hunter2@h:1", url])
            #expect(option.status == 2 && option.stderr.contains("--proxy"), "\(option)")
            let variable = try await HaulProcess.run(
                ["get", "-d", dir.path, url], environment: ["http_proxy": "gopher://u:hunter2@h:1"])
            #expect(variable.status == 2 && variable.stderr.contains("http_proxy"), "\(variable)")
            #expect(!(option.stderr + variable.stderr).contains("hunter2"))
            let off = try await HaulProcess.run(
                ["get", "--no-journal", "-d", dir.path, "--proxy", "", url],
                environment: ["http_proxy": "gopher://u:hunter2@h:1"])
            #expect(off.status == 0, "\(off)")
        }
    }
}
