import Foundation
package import Haul
package import HaulTestServer

/// One throwaway CA for the whole test process, the server configurations that use it, and the client settings
/// that trust it.
package enum TestTLS {
    /// The CA every TLS test server's certificate comes from. Made once: key generation is the slow part.
    package static let authority: TestCertificateAuthority = {
        do {
            return try TestCertificateAuthority()
        } catch {
            preconditionFailure("cannot make the test CA: \(error)")
        }
    }()

    /// ``authority``'s certificate in a PEM file, written once for the process.
    package static let caFile: String = {
        let path = (NSTemporaryDirectory() as NSString).appendingPathComponent(
            "haul-test-ca-\(ProcessInfo.processInfo.processIdentifier).pem")
        do {
            try authority.writeCertificate(to: URL(fileURLWithPath: path))
        } catch {
            preconditionFailure("cannot write the test CA to \(path): \(error)")
        }
        return path
    }()

    /// Client settings that trust ``authority`` (and nothing else).
    package static var settings: TLSSettings { TLSSettings(caFile: caFile) }

    /// `configuration` serving HTTPS with a certificate of `kind` from ``authority``.
    package static func server(
        _ configuration: TestServer.Configuration = .init(), certificate kind: TestServer.CertificateKind = .valid,
        requiresClientCertificate: Bool = false
    ) -> TestServer.Configuration {
        var configuration = configuration
        configuration.tls = TestServer.TLS(
            authority: authority, certificate: kind, requiresClientCertificate: requiresClientCertificate)
        return configuration
    }
}
