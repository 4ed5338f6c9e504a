public import Foundation

/// A proxy that requests go through: an HTTP proxy (plain or over TLS) or a SOCKS5 proxy.
///
/// ```swift
/// let proxy = try Proxy(url: "http://user:secret@proxy.example:3128")
/// ```
///
/// Through an HTTP proxy, `http` requests are sent in absolute form and `https` requests through a `CONNECT`
/// tunnel; through a SOCKS5 proxy, both go through the tunnel it opens. Its description never shows the password.
public struct Proxy: Sendable, Hashable, CustomStringConvertible {
    /// How the client talks to the proxy.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// An HTTP proxy, spoken to in plain HTTP (`http://`).
        case http
        /// An HTTP proxy, spoken to over TLS (`https://`), verified with the downloader's TLS settings.
        case https
        /// A SOCKS5 proxy; host names are resolved by the client (`socks5://`).
        case socks5
        /// A SOCKS5 proxy that resolves host names itself (`socks5h://`).
        case socks5h
    }

    /// How the client talks to the proxy.
    public var kind: Kind
    /// The proxy's host name or address (an IPv6 address without brackets).
    public var host: String
    /// The proxy's port.
    public var port: Int
    /// The user and password the proxy asks for: `Proxy-Authorization: Basic` for an HTTP proxy, the
    /// user/password method (RFC 1929) for SOCKS5.
    public var credentials: Credentials?

    /// Creates a proxy.
    public init(kind: Kind, host: String, port: Int, credentials: Credentials? = nil) {
        self.kind = kind
        self.host = host
        self.port = port
        self.credentials = credentials
    }

    /// Parses a proxy URL as curl takes it: `[SCHEME://][USER:PASSWORD@]HOST[:PORT]`, where SCHEME is `http` (the
    /// default), `https`, `socks5` or `socks5h`, the user and password are percent-decoded, and a missing port is
    /// 1080 (443 for `https`).
    ///
    /// - Throws: ``ProxyError`` naming the value (its password hidden) and what is wrong with it.
    public init(url text: String) throws(ProxyError) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let withScheme = trimmed.contains("://") ? trimmed : "http://" + trimmed
        guard let url = URL(string: withScheme), let scheme = url.scheme?.lowercased() else {
            throw ProxyError("'\(Self.redacted(trimmed))' is not a proxy URL")
        }
        guard let kind = Kind(rawValue: scheme) else {
            throw ProxyError(
                "unsupported proxy scheme '\(scheme)' in '\(Self.redacted(trimmed))': use http, https, socks5 or "
                    + "socks5h")
        }
        guard let host = url.host(percentEncoded: false), !host.isEmpty else {
            throw ProxyError("the proxy URL '\(Self.redacted(trimmed))' has no host")
        }
        let path = url.path(percentEncoded: true)
        guard path.isEmpty || path == "/", url.query == nil else {
            throw ProxyError("the proxy URL '\(Self.redacted(trimmed))' has a path: give only the host and port")
        }
        let port = url.port ?? (kind == .https ? 443 : 1080)
        guard (1...65535).contains(port) else {
            throw ProxyError("the proxy URL '\(Self.redacted(trimmed))' has an invalid port")
        }
        let unbracketed = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        self.init(kind: kind, host: unbracketed, port: port, credentials: Credentials(userInfoOf: url))
    }

    /// `host:port`, an IPv6 address in brackets.
    public var authority: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// The proxy as a URL with its password hidden (`http://user:***@host:3128`).
    public var description: String {
        let user = credentials.map {
            ($0.user.addingPercentEncoding(withAllowedCharacters: .urlUserAllowed) ?? "") + ":***@"
        }
        return "\(kind.rawValue)://\(user ?? "")\(authority)"
    }

    /// Whether the proxy resolves the destination's host name (an HTTP proxy, `socks5h`), rather than the client.
    public var resolvesHostNames: Bool { kind != .socks5 }

    /// Whether a request goes to this proxy itself, in absolute form (`GET http://host/path`), rather than through a
    /// tunnel (`CONNECT`, or SOCKS5): plain `http` (not `secure`) through an HTTP proxy.
    package func takesRequestsInAbsoluteForm(secure: Bool) -> Bool {
        !secure && (kind == .http || kind == .https)
    }

    /// What a `407` from this proxy means, said the same whether it answered a request or a `CONNECT`: `answered`
    /// is its status line (`407 Proxy Authentication Required`).
    package func authenticationFailure(answered: String) -> String {
        credentials == nil
            ? "the proxy \(self) answered \(answered): it needs a user and password (give them in the proxy URL)"
            : "the proxy \(self) answered \(answered): it refused the user and password given for it"
    }

    /// A proxy URL as text with any password replaced by `***`, for messages about a value that did not parse.
    static func redacted(_ text: String) -> String { URLText.redacted(text) }
}

/// A proxy setting that cannot be used: names the setting and its value, never a password.
public struct ProxyError: Error, Sendable, Hashable, CustomStringConvertible, LocalizedError {
    /// What is wrong.
    public let message: String

    init(_ message: String) { self.message = message }

    /// The message.
    public var description: String { message }
    /// Same as ``description``.
    public var errorDescription: String? { message }
}
