import HaulTestServer
import NIOSSL
import Testing

@testable import HaulNIO

/// ``CertificateIdentity``: which hosts a certificate names, for a connection through a proxy's tunnel (no I/O).
@Suite("CertificateIdentity: the names a certificate is for")
struct CertificateIdentityTests {
    func certificate(_ dnsNames: [String], addresses: [[UInt8]] = []) throws -> NIOSSLCertificate {
        let issued = try TestCertificateAuthority().serverCertificate(dnsNames: dnsNames, addresses: addresses)
        return try NIOSSLCertificate(bytes: Array(issued.certificatePEM.utf8), format: .pem)
    }

    @Test("host names: exact, any case, a trailing dot; a wildcard stands for one whole leftmost label")
    func hostNames() throws {
        let cert = try certificate(["Files.Example.org", "*.cdn.example.net"])
        for host in ["files.example.org", "FILES.example.org", "files.example.org.", "a.cdn.example.net"] {
            #expect(CertificateIdentity.names(host, in: cert), "\(host)")
        }
        for host in [
            "example.org", "x.files.example.org", "cdn.example.net", "a.b.cdn.example.net", ".cdn.example.net",
        ] {
            #expect(!CertificateIdentity.names(host, in: cert), "\(host)")
        }
        #expect(!CertificateIdentity.names("example.com", in: try certificate(["*.com"])), "a wildcard over a TLD")
    }

    @Test("IP addresses match only the certificate's addresses, never its DNS names")
    func addresses() throws {
        let loopback6 = [UInt8](repeating: 0, count: 15) + [1]
        let cert = try certificate(["127.0.0.3"], addresses: [[127, 0, 0, 1], loopback6])
        #expect(CertificateIdentity.names("127.0.0.1", in: cert))
        #expect(CertificateIdentity.names("::1", in: cert))
        #expect(CertificateIdentity.names("[::1]", in: cert))
        #expect(!CertificateIdentity.names("127.0.0.2", in: cert))
        #expect(!CertificateIdentity.names("127.0.0.3", in: cert), "an address written as a DNS name is not one")
        #expect(!CertificateIdentity.names("localhost", in: cert))
    }
}
