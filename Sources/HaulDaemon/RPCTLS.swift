import NIOSSL

/// The certificate and private key the RPC is served with over TLS (`https://` and `wss://`), for a daemon other
/// machines reach: without it the secret, and every URL and header of a download, would cross the network in clear.
public struct RPCTLS: Sendable {
    let context: NIOSSLContext

    /// Reads a PEM certificate chain (the server's certificate first) and its PEM private key; an error names the file
    /// that could not be used and why.
    public init(certificateFile: String, privateKeyFile: String) throws(RPCTLSError) {
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMFile(certificateFile)
        } catch {
            throw RPCTLSError(file: certificateFile, reason: "not a PEM certificate (\(error))")
        }
        guard !chain.isEmpty else { throw RPCTLSError(file: certificateFile, reason: "holds no certificate") }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(file: privateKeyFile, format: .pem)
        } catch {
            throw RPCTLSError(file: privateKeyFile, reason: "not an unencrypted PEM private key (\(error))")
        }
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        do {
            context = try NIOSSLContext(configuration: configuration)
        } catch {
            throw RPCTLSError(
                file: privateKeyFile, reason: "does not go with the certificate in \(certificateFile) (\(error))")
        }
    }
}

/// A certificate or key file ``RPCTLS`` could not use.
public struct RPCTLSError: Error, Sendable, CustomStringConvertible {
    /// The file.
    public var file: String
    /// What is wrong with it.
    public var reason: String

    /// `'FILE': REASON`.
    public var description: String { "'\(file)': \(reason)" }
}
