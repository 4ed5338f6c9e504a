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
            // PKCS #8 `ENCRYPTED PRIVATE KEY`, or a traditional key with `Proc-Type: 4,ENCRYPTED`: a passphrase
            // would be needed, which is not asked for.
            if let block = keyBlocks.first, block.contains("ENCRYPTED") {
                throw TransportError(
                    "client key file '\(keyFile)' holds an encrypted private key; decrypt it first "
                        + "(openssl pkey -in '\(keyFile)' -out KEY.pem)", isTransient: false)
            }
            do {
                guard let block = keyBlocks.first else { throw NIOSSLError.failedToLoadPrivateKey }
                configuration.privateKey = .privateKey(try NIOSSLPrivateKey(bytes: Array(block.utf8), format: .pem))
            } catch {
                throw TransportError(
                    "client key file '\(keyFile)' holds no usable PEM private key", isTransient: false,
                    underlying: error)
            }
            try Self.checkKeyMatches(configuration, certificateFile: clientCertificateFile, keyFile: keyFile)
        }
        return configuration
    }

    /// Fails when the client key is not the key of the client certificate's first certificate: BoringSSL checks the
    /// pair when a context takes them, so one is made with them alone (no trust store read).
    private static func checkKeyMatches(
        _ configuration: TLSConfiguration, certificateFile: String, keyFile: String
    ) throws {
        var pair = TLSConfiguration.makeClientConfiguration()
        pair.trustRoots = .certificates([])
        pair.certificateChain = configuration.certificateChain
        pair.privateKey = configuration.privateKey
        do {
            _ = try NIOSSLContext(configuration: pair)
        } catch {
            let names = certificateFile == keyFile ? "'\(keyFile)'" : "'\(keyFile)' and '\(certificateFile)'"
            throw TransportError(
                "the private key does not match the client certificate (\(names))", isTransient: false,
                underlying: error)
        }
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
    ///
    /// Works on the file's bytes: a system bundle (`SSL_CERT_FILE` often names one, ~150 certificates in 3,500
    /// lines) is read at the start of every run that fetches over https, and splitting and trimming that many lines
    /// as Unicode text costs tens of milliseconds.
    private static func pemBlocks(_ path: String, what: String, wanted: (String) -> Bool) throws -> [String] {
        let bytes: [UInt8]
        do {
            bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        } catch {
            throw TransportError("\(what) '\(path)' cannot be read", isTransient: false, underlying: error)
        }
        let begin = Array("-----BEGIN ".utf8)
        let end = Array("-----END ".utf8)
        let dashes = Array("-----".utf8)
        var blocks: [String] = []
        var label: ArraySlice<UInt8>?
        var block: [UInt8] = []
        for rawLine in bytes.split(whereSeparator: { $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r") }) {
            let line = trimmingBlanks(rawLine)
            if let open = label {
                block += line
                block.append(UInt8(ascii: "\n"))
                if line.starts(with: end), line.dropFirst(end.count).elementsEqual(open + dashes) {
                    let name = String(decoding: open, as: UTF8.self)
                    if wanted(name) { blocks.append(String(decoding: block, as: UTF8.self)) }
                    label = nil
                }
            } else if line.count > begin.count + dashes.count, line.starts(with: begin),
                line.suffix(dashes.count).elementsEqual(dashes)
            {
                label = line.dropFirst(begin.count).dropLast(dashes.count)
                block = Array(line)
                block.append(UInt8(ascii: "\n"))
            }
        }
        return blocks
    }

    /// `line` without the spaces and tabs around it.
    private static func trimmingBlanks(_ line: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        func isBlank(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        guard let first = line.firstIndex(where: { !isBlank($0) }), let last = line.lastIndex(where: { !isBlank($0) })
        else { return [] }
        return line[first...last]
    }
}
