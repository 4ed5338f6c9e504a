import Foundation
import HTTPTypes
import Haul
import Testing

/// Which header fields are secrets, the one rule the journal, the daemon's store, its answers and the command line's
/// argument vector all follow.
@Suite("DownloadRequest: secret header fields (no I/O)")
struct DownloadRequestSecretsTests {
    @Test("credential fields and fields named as keys, tokens, secrets or sessions are secrets; others are not")
    func secretNames() {
        for name in [
            "Authorization", "proxy-authorization", "Cookie", "X-Api-Key", "PRIVATE-TOKEN", "X-Auth-Token",
            "X-Amz-Security-Token", "Ocp-Apim-Subscription-Key", "X-Client-Secret", "X-Session-Id", "X-Password",
            "X-Goog-Signature", "X-Credential",
        ] {
            #expect(DownloadRequest.isSecretField(name), "\(name)")
        }
        for name in ["Accept", "User-Agent", "Referer", "Range", "If-None-Match", "X-Trace", "Accept-Language"] {
            #expect(!DownloadRequest.isSecretField(name), "\(name)")
        }
    }

    @Test("an encoded request holds no secret field's value, and keeps the others")
    func encodingLeavesSecretsOut() throws {
        // swift-format-ignore: NeverForceUnwrap
        var request = DownloadRequest(
            url: URL(string: "https://example.test/f")!, destination: .directory(URL(fileURLWithPath: "/tmp/d")))
        for (name, value) in [
            ("Authorization", "Bearer AUTHVALUE"), ("X-Api-Key", "APIKEYVALUE"), ("PRIVATE-TOKEN", "TOKENVALUE"),
            ("X-Trace", "TRACEVALUE"),
        ] {
            request.headerFields[try #require(HTTPField.Name(name))] = value
        }
        let text = String(decoding: try JSONEncoder().encode(request), as: UTF8.self)
        for secret in ["AUTHVALUE", "APIKEYVALUE", "TOKENVALUE"] {
            #expect(!text.contains(secret), "\(secret) in \(text)")
        }
        #expect(text.contains("TRACEVALUE"))
    }
}
