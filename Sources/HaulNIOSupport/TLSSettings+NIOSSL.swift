import Foundation
package import Haul
package import NIOSSL

extension TLSSettings {
    /// The swift-nio-ssl client configuration these settings describe, with `applicationProtocols` left to the
    /// caller (it depends on the HTTP versions the connection may speak).
    ///
    /// Certificate and key files are read here, so a file that cannot be used fails with its path before any
    /// connection is made.
    ///
    /// - Throws: ``TransportError`` (permanent) naming the file and what is wrong with it.
    package func makeClientConfiguration() throws -> TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        if !verifiesPeer {
            configuration.certificateVerification = .none
        } else if let caFile, let caDirectory {
            // The directory first: given certificates and then a directory, swift-nio-ssl fails to make the context
            // (`failedToLoadCertificate`), which made every https request fail with SSL_CERT_FILE and SSL_CERT_DIR set.
            configuration.trustRoots = .file(caDirectory)
            configuration.additionalTrustRoots = [
                .certificates(try Self.certificates(caFile, what: "CA certificate file"))
            ]
        } else if let caFile {
            configuration.trustRoots = .certificates(try Self.certificates(caFile, what: "CA certificate file"))
        } else if let caDirectory {
            // swift-nio-ssl hands a directory to OpenSSL's hashed-directory lookup.
            configuration.trustRoots = .file(caDirectory)
        }
        if let clientCertificateFile {
            let chain = try Self.certificates(clientCertificateFile, what: "client certificate file")
            configuration.certificateChain = chain.map { .certificate($0) }
            let keyFile = clientKeyFile ?? clientCertificateFile
            let keyBlocks = try Self.pemBlocks(keyFile, what: "client key file") { $0.hasSuffix("PRIVATE KEY") }
            do {
                guard let block = keyBlocks.first else { throw NIOSSLError.failedToLoadPrivateKey }
                configuration.privateKey = .privateKey(try NIOSSLPrivateKey(bytes: Array(block.utf8), format: .pem))
            } catch {
                throw TransportError(
                    "client key file '\(keyFile)' holds no usable PEM private key", isTransient: false,
                    underlying: error)
            }
        }
        return configuration
    }

    /// The certificates in a PEM file; other blocks (a private key beside a client certificate, say) are skipped.
    private static func certificates(_ path: String, what: String) throws -> [NIOSSLCertificate] {
        let blocks = try pemBlocks(path, what: what) { $0 == "CERTIFICATE" }
        guard !blocks.isEmpty else {
            throw TransportError("\(what) '\(path)' holds no PEM certificate", isTransient: false)
        }
        do {
            return try NIOSSLCertificate.fromPEMBytes(Array(blocks.joined(separator: "\n").utf8))
        } catch {
            throw TransportError("\(what) '\(path)' cannot be read as PEM", isTransient: false, underlying: error)
        }
    }

    /// The `-----BEGIN LABEL-----` ... `-----END LABEL-----` blocks of the file at `path` whose label `wanted` accepts.
    private static func pemBlocks(_ path: String, what: String, wanted: (String) -> Bool) throws -> [String] {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw TransportError("\(what) '\(path)' cannot be read", isTransient: false, underlying: error)
        }
        var blocks: [String] = []
        var current: (label: String, lines: [String])?
        for line in text.split(whereSeparator: \.isNewline).map({ $0.trimmingCharacters(in: .whitespaces) }) {
            if current == nil, line.hasPrefix("-----BEGIN "), line.hasSuffix("-----") {
                current = (String(line.dropFirst(11).dropLast(5)), [line])
            } else if let open = current {
                current?.lines.append(line)
                if line == "-----END \(open.label)-----" {
                    if wanted(open.label) { blocks.append((current?.lines ?? []).joined(separator: "\n") + "\n") }
                    current = nil
                }
            }
        }
        return blocks
    }
}
