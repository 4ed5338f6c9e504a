public import Foundation

/// Where a downloader finds credentials for a request that carries none of its own (see
/// ``Downloader/Configuration/credentials``).
///
/// Asked for every request, redirects included, with the URL about to be requested: a provider answers for the
/// hosts it knows and returns `nil` for others, so credentials never reach a server they were not meant for.
/// ``Netrc`` is one; ``OriginCredentials`` another.
public protocol CredentialProvider: Sendable {
    /// The credentials to send (HTTP Basic) with a request for `url`, or `nil` to send none.
    func credentials(for url: URL) -> Credentials?
}

/// Credentials for exact origins (scheme, host and port), such as those a command line gave for its URLs.
public struct OriginCredentials: CredentialProvider, Hashable {
    private var byOrigin: [String: Credentials] = [:]

    /// An empty provider.
    public init() {}

    /// Sends `credentials` to the origin of `url` (its scheme, host and port; the path does not matter).
    public mutating func add(_ credentials: Credentials, for url: URL) {
        byOrigin[Self.key(url)] = credentials
    }

    /// The credentials for the origin of `url`, if any were added.
    public func credentials(for url: URL) -> Credentials? {
        byOrigin.isEmpty ? nil : byOrigin[Self.key(url)]
    }

    private static func key(_ url: URL) -> String {
        let origin = HTTPRules.origin(of: url)
        return "\(origin.scheme)://\(origin.host):\(origin.port)"
    }
}
