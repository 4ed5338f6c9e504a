import ArgumentParser
import Haul
import HaulNIOSupport

/// How bytes move, for `haul get` and `haul worker`: the transport, TLS and HTTP version, and connection timeouts.
/// (Not the library's ``Haul/TransportOptions``, which is what a transport is given with each request.)
struct ConnectionOptions: ParsableArguments {
    @Option(
        name: .customLong("connect-timeout"),
        help: ArgumentHelp("Seconds to establish a connection.", valueName: "S"))
    var connectTimeout: Double = 10

    @Option(
        name: .customLong("stall-timeout"),
        help: ArgumentHelp("No byte for S seconds is a transient failure.", valueName: "S"))
    var stallTimeout: Double = 30

    @Option(
        help: ArgumentHelp(
            "How bytes move: nio (Haul's own HTTP/1.1 client, http and https; --http2 goes through "
                + "async-http-client), async-http-client, or urlsession (Apple platforms).",
            valueName: TransportChoice.names))
    var transport: TransportChoice = .nio

    @Option(
        name: .customLong("cacert"),
        help: ArgumentHelp(
            "Trust the CA certificates in FILE (PEM) instead of the system's (default: $SSL_CERT_FILE).",
            valueName: "FILE"))
    var caFile: String?

    @Option(
        name: .customLong("capath"),
        help: ArgumentHelp(
            "Trust the CA certificates in DIR (PEM files named by subject hash, as c_rehash makes them) instead of "
                + "the system's (default: $SSL_CERT_DIR).",
            valueName: "DIR"))
    var caDirectory: String?

    @Flag(
        name: [.customShort("k"), .customLong("insecure")],
        help: "Accept any server certificate: encrypted, but the server is not authenticated (prints a warning).")
    var insecure = false

    @Option(
        name: .customLong("cert"),
        help: ArgumentHelp("Client certificate to present (PEM; may hold its key too).", valueName: "FILE"))
    var clientCertificate: String?

    @Option(name: .customLong("key"), help: ArgumentHelp("Private key of --cert (PEM).", valueName: "FILE"))
    var clientKey: String?

    @Flag(
        name: .customLong("http1.1"),
        help: "Use HTTP/1.1 only, even where an https server offers HTTP/2 (the nio transport's default).")
    var http1_1 = false

    @Flag(
        name: .customLong("http2"),
        help: ArgumentHelp(
            "Use HTTP/2 where an https server offers it by ALPN, else HTTP/1.1.",
            discussion:
                "The nio transport sends such requests through AsyncHTTPClient; async-http-client (and urlsession) "
                + "negotiate HTTP/2 by default."))
    var http2 = false

    func validate() throws {
        if http1_1 && http2 { throw ValidationError("--http1.1 and --http2 cannot be combined") }
        if clientKey != nil && clientCertificate == nil { throw ValidationError("--key needs --cert") }
        if transport.isSystemStack,
            insecure || caFile != nil || caDirectory != nil || clientCertificate != nil || http1_1
        {
            throw ValidationError(
                "--transport urlsession verifies with the system's trust store and negotiates the HTTP version itself: "
                    + "--cacert, --capath, --insecure, --cert and --http1.1 need the nio or async-http-client transport"
            )
        }
        for (name, value) in [("--connect-timeout", connectTimeout), ("--stall-timeout", stallTimeout)]
        where !(value > 0 && value <= 86_400) {
            throw ValidationError("\(name) must be a number of seconds above 0, not \(value)")
        }
    }

    /// Sets the timeouts and the HTTP version of `configuration` (TLS is ``tlsSettings(checkingFiles:)``'s, the
    /// transport ``makeEngine(configuration:maxConcurrent:)``'s).
    func apply(to configuration: inout Downloader.Configuration) {
        configuration.connectTimeout = .milliseconds(Int64(connectTimeout * 1000))
        configuration.stallTimeout = .milliseconds(Int64(stallTimeout * 1000))
        configuration.httpVersion = httpVersion
    }

    /// `--http1.1`, `--http2`, else the transport's choice.
    var httpVersion: HTTPVersionPreference { http1_1 ? .http1_1 : http2 ? .http2 : .automatic }

    /// Refuses `--proxy` with the system's stack, which takes the system's proxy settings.
    func validate(with network: NetworkOptions) throws {
        if transport.isSystemStack, network.proxy?.isEmpty == false {
            throw ValidationError(
                "--transport urlsession takes the system's proxy settings: --proxy needs the nio or async-http-client "
                    + "transport")
        }
    }

    /// The TLS settings of the options (the environment's CA when none is given); with `checkingFiles`, every file
    /// they name is read and checked.
    func tlsSettings(checkingFiles: Bool) throws -> TLSSettings {
        let environment = TLSSettings.fromEnvironment()
        let fromOptions = caFile != nil || caDirectory != nil
        var settings = fromOptions ? TLSSettings(caFile: caFile, caDirectory: caDirectory) : environment
        // The system store is used by the urlsession transport; it takes no CA from the environment.
        if transport.isSystemStack { settings = .default }
        settings.verifiesPeer = !insecure
        settings.clientCertificateFile = clientCertificate
        settings.clientKeyFile = clientKey
        func origin(of path: String?) -> String {
            switch path {
            case settings.caFile: fromOptions ? "--cacert" : "SSL_CERT_FILE"
            case settings.caDirectory: fromOptions ? "--capath" : "SSL_CERT_DIR"
            case clientKey: "--key"
            default: "--cert"
            }
        }
        guard checkingFiles else { return settings }
        do {
            try settings.validate()
            _ = try settings.makeClientConfiguration()
        } catch let error as DownloadError {
            throw UsageFailure([InputProblem(origin: origin(of: error.path), message: error.message)])
        } catch let error as TransportError {
            let path = [settings.caFile, clientCertificate, clientKey].compactMap { $0 }.first {
                error.message.contains("'\($0)'")
            }
            throw UsageFailure([InputProblem(origin: origin(of: path), message: error.message)])
        }
        return settings
    }
}
