public import Foundation

/// How `https` connections are verified and which client certificate they present: one value the engine hands
/// every transport with each request (``TransportOptions/tls``), so that trusting a private CA needs no
/// transport-specific code.
///
/// The defaults verify the server's certificate chain against the system's trust store and its name against the
/// URL's host, as curl and browsers do.
///
/// ```swift
/// var configuration = Downloader.Configuration()
/// configuration.tls.caFile = "/etc/company/ca.pem"   // trust this CA instead of the system store
/// let downloader = Downloader(transport: transport, configuration: configuration)
/// ```
public struct TLSSettings: Sendable, Hashable {
    /// A PEM file of CA certificates trusted instead of the system store (curl's `--cacert`).
    public var caFile: String?
    /// A directory of PEM CA certificates named by subject hash, as OpenSSL's `c_rehash` makes it, trusted instead
    /// of the system store (curl's `--capath`). With ``caFile`` too, both are trusted.
    public var caDirectory: String?
    /// `false` accepts any certificate for any name (curl's `--insecure`): the connection is encrypted but the
    /// server is not authenticated. `true` by default.
    public var verifiesPeer: Bool
    /// A PEM file with the client certificate (and possibly its chain) presented when the server asks for one.
    public var clientCertificateFile: String?
    /// A PEM file with the private key of ``clientCertificateFile``; `nil` when that file holds the key too.
    public var clientKeyFile: String?

    /// Settings that verify against the system's trust store and present no client certificate.
    public init(
        caFile: String? = nil, caDirectory: String? = nil, verifiesPeer: Bool = true,
        clientCertificateFile: String? = nil, clientKeyFile: String? = nil
    ) {
        self.caFile = caFile
        self.caDirectory = caDirectory
        self.verifiesPeer = verifiesPeer
        self.clientCertificateFile = clientCertificateFile
        self.clientKeyFile = clientKeyFile
    }

    /// The system's trust store, full verification, no client certificate.
    public static let `default` = TLSSettings()

    /// The settings OpenSSL-based tools take from the environment: `SSL_CERT_FILE` as ``caFile`` and
    /// `SSL_CERT_DIR` as ``caDirectory`` (an empty value counts as unset).
    ///
    /// - Parameter environment: the variables to read; the process's own by default.
    public static func fromEnvironment(
        _ environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> TLSSettings {
        func value(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
        return TLSSettings(caFile: value("SSL_CERT_FILE"), caDirectory: value("SSL_CERT_DIR"))
    }

    /// Checks that the files and directories named exist and can be read, so that a typo fails before any
    /// request with the path in the message rather than as a handshake error on every download.
    ///
    /// - Throws: ``DownloadError`` with ``DownloadError/Code/invalidRequest`` naming the setting and the path.
    public func validate() throws(DownloadError) {
        let manager = FileManager.default
        func check(_ path: String?, _ what: String, directory: Bool) throws(DownloadError) {
            guard let path else { return }
            var isDirectory: ObjCBool = false
            guard manager.fileExists(atPath: path, isDirectory: &isDirectory) else {
                throw DownloadError(.invalidRequest, message: "\(what) '\(path)' does not exist", path: path)
            }
            guard isDirectory.boolValue == directory else {
                let expected = directory ? "a directory" : "a file"
                throw DownloadError(.invalidRequest, message: "\(what) '\(path)' is not \(expected)", path: path)
            }
            guard manager.isReadableFile(atPath: path) else {
                throw DownloadError(.invalidRequest, message: "\(what) '\(path)' cannot be read", path: path)
            }
        }
        try check(caFile, "CA certificate file", directory: false)
        try check(caDirectory, "CA certificate directory", directory: true)
        try check(clientCertificateFile, "client certificate file", directory: false)
        try check(clientKeyFile, "client key file", directory: false)
        if clientKeyFile != nil, clientCertificateFile == nil {
            throw DownloadError(.invalidRequest, message: "a client key was given without a client certificate")
        }
    }
}
