import Crypto
public import Foundation
import SwiftASN1
import X509

/// A throwaway certificate authority made at run time, and the certificates a TLS ``TestServer`` presents: good
/// ones for `localhost`, `127.0.0.1` and `::1`, and deliberately bad ones (see ``TestServer/CertificateKind``).
///
/// Nothing is read from or written to disk unless asked: give a client ``certificatePEM`` (or the file
/// ``writeCertificate(to:)`` makes) as the CA it trusts.
///
/// ```swift
/// let authority = try TestCertificateAuthority()
/// try await TestServer.withRunning(.init(tls: .init(authority: authority))) { server in
///     try authority.writeCertificate(to: caFile)   // then: haul get --cacert caFile server.url(...)
/// }
/// ```
public struct TestCertificateAuthority: Sendable {
    /// The CA certificate, PEM.
    public let certificatePEM: String
    private let certificate: Certificate
    private let key: Certificate.PrivateKey

    /// A certificate and its private key, both PEM.
    public struct Issued: Sendable {
        /// The certificate followed by the certificates between it and the CA (none here), PEM.
        public let certificatePEM: String
        /// The private key, PEM (PKCS #8).
        public let keyPEM: String
    }

    /// Makes a new CA with a fresh P-256 key, valid from an hour ago for thirty days.
    ///
    /// - Parameter commonName: the CA's name, as clients print it.
    public init(commonName: String = "Haul Test CA") throws {
        let key = Certificate.PrivateKey(P256.Signing.PrivateKey())
        let name = try DistinguishedName { CommonName(commonName) }
        let now = Date()
        certificate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: key.publicKey,
            notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(30 * 86400),
            issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: key)
        self.key = key
        certificatePEM = try certificate.serializeAsPEM().pemString
    }

    /// Writes ``certificatePEM`` to `url` (replacing it).
    public func writeCertificate(to url: URL) throws {
        try Data(certificatePEM.utf8).write(to: url, options: .atomic)
    }

    /// A server certificate of the given kind.
    ///
    /// - Parameter kind: ``TestServer/CertificateKind/valid`` is issued by this CA for `localhost`, `127.0.0.1` and
    ///   `::1`; the others are wrong in the way their names say.
    public func serverCertificate(_ kind: TestServer.CertificateKind) throws -> Issued {
        let now = Date()
        let day: TimeInterval = 86400
        let loopback: [GeneralName] = [
            .dnsName("localhost"), .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1])),
            .ipAddress(ASN1OctetString(contentBytes: ArraySlice([UInt8](repeating: 0, count: 15) + [1]))),
        ]
        switch kind {
        case .valid:
            return try issue("localhost", names: loopback, from: now - 3600, to: now + 30 * day, usage: .serverAuth)
        case .expired:
            return try issue("localhost", names: loopback, from: now - 30 * day, to: now - day, usage: .serverAuth)
        case .notYetValid:
            return try issue("localhost", names: loopback, from: now + day, to: now + 30 * day, usage: .serverAuth)
        case .wrongHost:
            return try issue(
                "example.test", names: [.dnsName("example.test")], from: now - 3600, to: now + 30 * day,
                usage: .serverAuth)
        case .selfSigned:
            return try Self.selfSigned("localhost", names: loopback, from: now - 3600, to: now + 30 * day)
        case .unknownCA:
            let stranger = try TestCertificateAuthority(commonName: "Unknown Test CA")
            return try stranger.issue(
                "localhost", names: loopback, from: now - 3600, to: now + 30 * day, usage: .serverAuth)
        }
    }

    /// A server certificate issued by this CA for the DNS names `dnsNames` and the IP addresses `addresses` (4 or 16
    /// bytes each), as its subject alternative names: to see which names a client takes it for.
    public func serverCertificate(dnsNames: [String], addresses: [[UInt8]] = []) throws -> Issued {
        let now = Date()
        let names =
            dnsNames.map { GeneralName.dnsName($0) }
            + addresses.map { .ipAddress(ASN1OctetString(contentBytes: ArraySlice($0))) }
        return try issue(
            dnsNames.first ?? "haul test server", names: names, from: now - 3600, to: now + 30 * 86400,
            usage: .serverAuth)
    }

    /// A client certificate issued by this CA, for a server that asks for one (``TestServer/TLS/requiresClientCertificate``).
    public func clientCertificate(commonName: String = "haul client") throws -> Issued {
        let now = Date()
        return try issue(commonName, names: [], from: now - 3600, to: now + 30 * 86400, usage: .clientAuth)
    }

    private func issue(
        _ commonName: String, names: [GeneralName], from start: Date, to end: Date, usage: ExtendedKeyUsage.Usage
    ) throws -> Issued {
        let leafKey = Certificate.PrivateKey(P256.Signing.PrivateKey())
        let leaf = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: leafKey.publicKey, notValidBefore: start,
            notValidAfter: end, issuer: certificate.subject, subject: try DistinguishedName { CommonName(commonName) },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Self.leafExtensions(names: names, usage: usage), issuerPrivateKey: key)
        return Issued(
            certificatePEM: try leaf.serializeAsPEM().pemString, keyPEM: try leafKey.serializeAsPEM().pemString)
    }

    private static func selfSigned(_ commonName: String, names: [GeneralName], from start: Date, to end: Date)
        throws -> Issued
    {
        let key = Certificate.PrivateKey(P256.Signing.PrivateKey())
        let name = try DistinguishedName { CommonName(commonName) }
        let certificate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: key.publicKey, notValidBefore: start, notValidAfter: end,
            issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try leafExtensions(names: names, usage: .serverAuth), issuerPrivateKey: key)
        return Issued(
            certificatePEM: try certificate.serializeAsPEM().pemString, keyPEM: try key.serializeAsPEM().pemString)
    }

    private static func leafExtensions(names: [GeneralName], usage: ExtendedKeyUsage.Usage) throws
        -> Certificate.Extensions
    {
        try Certificate.Extensions {
            Critical(BasicConstraints.notCertificateAuthority)
            Critical(KeyUsage(digitalSignature: true, keyEncipherment: true))
            try ExtendedKeyUsage([usage])
            if !names.isEmpty { SubjectAlternativeNames(names) }
        }
    }
}

extension TestServer {
    /// Which certificate a TLS ``TestServer`` presents.
    public enum CertificateKind: String, Sendable, CaseIterable {
        /// Issued by the server's ``TestCertificateAuthority`` for `localhost`, `127.0.0.1` and `::1`.
        case valid
        /// As `valid`, but its validity ended yesterday.
        case expired
        /// As `valid`, but its validity starts tomorrow.
        case notYetValid
        /// Issued by the server's CA for `example.test` only.
        case wrongHost
        /// For `localhost` and the loopback addresses, signed by its own key.
        case selfSigned
        /// For `localhost` and the loopback addresses, issued by a CA that nobody trusts.
        case unknownCA
    }
}
