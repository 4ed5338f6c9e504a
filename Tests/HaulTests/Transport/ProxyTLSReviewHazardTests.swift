import Foundation
import Haul
import HaulNIO
import HaulTestServer
import HaulTestSupport
import Testing

/// A hostile review's: an `https` server is verified against the host of its URL whatever path the connection
/// takes. Through a proxy's tunnel (SOCKS5, `CONNECT`) the socket's peer is the proxy, not the server, so a
/// certificate checked against "the address connected to" is checked against the proxy's address.
@Suite(
    .timeLimit(.minutes(2)),
    .enabled(if: TestPlatform.isLinux, "runs Debian's microsocks and binds 127.0.0.2, which Linux's loopback has"))
struct ProxyTLSReviewHazardTests {
    @Test(
        "https to an IP address through a SOCKS5 proxy: a certificate for the proxy's address, not the server's, is refused"
    )
    func ipCertificateCheckedAgainstTheServerNotTheProxy() async throws {
        // The certificate names localhost, 127.0.0.1 and ::1; the server is reached at 127.0.0.2, which it does not
        // name. The proxy listens on 127.0.0.1, which it does.
        let configuration = TestTLS.server(TestServer.Configuration(host: "127.0.0.2", bindIPv6Loopback: false))
        try await TestServer.withRunning(configuration) { server in
            let url = server.url(path: "/bytes/x.bin", query: ["size": "1000"])
            #expect(url.host() == "127.0.0.2")
            let dir = try TemporaryDirectory()

            // Directly: refused, as it must be.
            var direct = testConfiguration()
            direct.tls = TestTLS.settings
            let refused = await #expect(throws: DownloadError.self) {
                try await Downloader(transport: NIOTransport(), configuration: direct).download(
                    DownloadRequest(url: url, destination: .file(dir.file("direct"))))
            }
            #expect(refused?.code == .transport, "\(String(describing: refused))")

            // Through the proxy: the same server and the same certificate must be refused too.
            try await Microsocks.withRunning { socks in
                var proxied = direct
                proxied.proxy = .all(try Proxy(url: "socks5://127.0.0.1:\(socks.port)"))
                let downloader = Downloader(transport: NIOTransport(), configuration: proxied)
                let outcome = await #expect(throws: DownloadError.self) {
                    try await downloader.download(DownloadRequest(url: url, destination: .file(dir.file("proxied"))))
                }
                #expect(outcome == nil || outcome?.code == .transport, "\(String(describing: outcome))")
                #expect(!FileManager.default.fileExists(atPath: dir.file("proxied").path))
            }
        }
    }
}
