import ArgumentParser
import Haul
import HaulAsyncHTTPClient
import HaulNIO

#if canImport(Darwin)
import HaulURLSession
#endif

/// Which transport moves the bytes (`--transport`).
enum TransportChoice: String, CaseIterable, ExpressibleByArgument {
    /// Haul's own HTTP/1.1 client (HaulNIO) for http and https, AsyncHTTPClient for HTTP/2: the default.
    case nio
    case asyncHTTPClient = "async-http-client"
    #if canImport(Darwin)
    /// The system's URLSession (Apple platforms: on Linux it would bring libcurl and its libraries into every start).
    case urlSession = "urlsession"
    #endif

    /// Whether the transport trusts the system's store only and chooses the HTTP version itself.
    var isSystemStack: Bool {
        #if canImport(Darwin)
        self == .urlSession
        #else
        false
        #endif
    }

    /// The choices as `--help` lists them.
    static let names = allCases.map(\.rawValue).joined(separator: "|")
}

/// How a run moves bytes: its transport, the engine's configuration, and the AsyncHTTPClient the transport started
/// (shut down once the run is over), if any.
struct Engine {
    var transport: any HTTPTransport
    var configuration: Downloader.Configuration
    var ownedTransport: AsyncHTTPClientTransport?
}

extension ConnectionOptions {
    /// The transport of the options for `maxConcurrent` connections at once, with `configuration`. Warns on
    /// standard error about `--insecure`.
    func makeEngine(configuration: Downloader.Configuration, maxConcurrent: Int) -> Engine {
        let transport: any HTTPTransport
        let ownedTransport: AsyncHTTPClientTransport?
        switch self.transport {
        case .nio where httpVersion != .http2:
            // http and https are NIOTransport's own, and the plan holds nothing else: no fallback to start and stop.
            transport = NIOTransport()
            ownedTransport = nil
        case .nio, .asyncHTTPClient:
            let client = AsyncHTTPClientTransport(
                maximumConnectionsPerHost: max(maxConcurrent, 1), connectTimeout: configuration.connectTimeout)
            transport = self.transport == .nio ? NIOTransport(fallback: client) : client
            ownedTransport = client
        #if canImport(Darwin)
        case .urlSession:
            transport = URLSessionTransport(maximumConnectionsPerHost: max(maxConcurrent, 1))
            ownedTransport = nil
        #endif
        }
        if !configuration.tls.verifiesPeer {
            Console.err(
                "haul: warning: --insecure: server certificates are not verified; anyone on the path can "
                    + "read and change what is downloaded\n")
        }
        return Engine(transport: transport, configuration: configuration, ownedTransport: ownedTransport)
    }
}

extension Downloader.Configuration {
    /// The engine's defaults as `haul` runs downloads: a cancelled download keeps its partial file, which the next
    /// run resumes.
    static var commandLine: Self {
        var configuration = Downloader.Configuration()
        configuration.keepsPartialOnCancel = true
        return configuration
    }
}
