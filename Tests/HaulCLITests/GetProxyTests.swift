import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

/// `haul get` through a real HTTP proxy (Debian's tinyproxy, with Basic authentication): the environment as curl
/// reads it, `--proxy`, `--noproxy`, and an unreachable proxy; the proxy's password in no output.
@Suite(
    "haul get: proxies", .serialized, .timeLimit(.minutes(2)),
    .enabled(if: TestPlatform.isLinux, "runs Debian's tinyproxy, squid and microsocks, which scripts/test installs"))
struct GetProxyTests {
    @Test(
        "http_proxy and https_proxy are used (absolute form, CONNECT), --noproxy skips them, the password is never shown"
    )
    func environmentAndOptions() async throws {
        try await TestServer.withRunning { plain in
            try await TestServer.withRunning(TestTLS.server()) { secure in
                try await Tinyproxy.withRunning(credentials: (user: "pu", password: "pr0xy-s3cret")) { tinyproxy in
                    let dir = try TemporaryDirectory()
                    let ca = URL(fileURLWithPath: TestTLS.caFile)
                    let proxy = "http://pu:pr0xy-s3cret@127.0.0.1:\(tinyproxy.port)"
                    let urls = [
                        plain.url(path: "/bytes/p.bin", query: ["size": "100000"]).absoluteString,
                        secure.url(path: "/bytes/s.bin", query: ["size": "100000"]).absoluteString,
                    ]
                    for arguments in [["--json"], ["-v"], []] {
                        let run = try await HaulProcess.run(
                            ["get", "--no-journal", "--on-conflict", "overwrite", "--cacert", ca.path, "-d", dir.path]
                                + arguments + urls,
                            environment: ["http_proxy": proxy, "HTTPS_PROXY": proxy])
                        #expect(run.status == 0, "\(run)")
                        #expect(!(run.stdout + run.stderr).contains("pr0xy-s3cret"))
                    }
                    let seen = tinyproxy.requests
                    #expect(seen.filter { $0.hasPrefix("GET http://127.0.0.1:\(plain.port)/bytes/p.bin") }.count == 3)
                    #expect(seen.filter { $0.hasPrefix("CONNECT 127.0.0.1:\(secure.port)") }.count == 3)

                    // --noproxy and no_proxy send matching hosts straight to the server.
                    plain.resetStats()
                    let direct = try await HaulProcess.run(
                        ["get", "--no-journal", "--on-conflict", "overwrite", "-d", dir.path, "--noproxy", "127.0.0.1"]
                            + [urls[0]],
                        environment: ["http_proxy": "http://127.0.0.1:1"])
                    #expect(direct.status == 0 && plain.stats.requestCount == 1, "\(direct)")
                    let byVariable = try await HaulProcess.run(
                        ["get", "--no-journal", "--on-conflict", "overwrite", "-d", dir.path, urls[0]],
                        environment: ["http_proxy": "http://127.0.0.1:1", "NO_PROXY": "*"])
                    #expect(byVariable.status == 0, "\(byVariable)")

                    // A proxy that refuses the credentials, and one nobody listens on: at once, naming the proxy.
                    let port = try freeLoopbackPort()
                    for (setting, says) in [
                        ("http://pu:wrong@127.0.0.1:\(tinyproxy.port)", "refused the user and password"),
                        ("http://pu:pr0xy-s3cret@127.0.0.1:\(port)", "connection refused"),
                    ] {
                        let run = try await HaulProcess.run([
                            "get", "--no-journal", "-d", dir.file("x").path, "--proxy", setting, urls[0],
                        ])
                        #expect(run.status == 1 && run.stdout.contains(says), "\(run)")
                        #expect(run.stdout.contains("proxy http://pu:***@127.0.0.1:"), "\(run)")
                        #expect(!run.stdout.contains("retry") && !(run.stdout + run.stderr).contains("pr0xy-s3cret"))
                    }
                }
            }
        }
    }
}
