public import Haul

/// Why a ``NIOTransport`` request failed.
///
/// A struct over a private code, so that kinds can be added without breaking callers; compare with the static
/// members (`error == .closedDuringBody`). The engine treats every one of them as a transport error: retried
/// when it may be transient (a closed connection), reported otherwise.
public struct NIOTransportError: TransportFailure, Hashable, CustomStringConvertible {
    private enum Code: Hashable {
        case unsupportedScheme, invalidAuthority, invalidTarget, invalidResponse, closedBeforeResponse, closedDuringBody
    }

    private let code: Code
    /// The scheme, authority or request target the error is about, or what is wrong with a response; empty for the
    /// others.
    public let detail: String

    private init(_ code: Code, _ detail: String = "") {
        self.code = code
        self.detail = detail
    }

    /// The URL's scheme is neither `http` nor `https`, or an `https` request asks for HTTP/2, and no fallback
    /// transport was given.
    public static func unsupportedScheme(_ scheme: String) -> Self { Self(.unsupportedScheme, scheme) }
    /// The request's authority has no host, or a port that is not a number from 1 to 65535.
    public static func invalidAuthority(_ authority: String) -> Self { Self(.invalidAuthority, authority) }
    /// The request's path is empty or holds a space or a control character, which cannot go on an HTTP/1.1 request
    /// line as they are (percent-encode them).
    public static func invalidTarget(_ target: String) -> Self { Self(.invalidTarget, target) }
    /// The server's response is not valid HTTP/1.1 (`detail` says where); the connection is closed.
    public static func invalidResponse(_ detail: String) -> Self { Self(.invalidResponse, detail) }
    /// The server closed the connection before a response head arrived.
    public static let closedBeforeResponse = Self(.closedBeforeResponse)
    /// The server closed the connection before the body ended.
    public static let closedDuringBody = Self(.closedDuringBody)

    /// Whether the server's bytes were not HTTP (kept as they are wherever the connection's failure is reported).
    var isInvalidResponse: Bool { code == .invalidResponse }

    /// Only a closed connection may go better on another attempt: a request Haul cannot send, or a response that is
    /// not valid HTTP/1.1, comes out the same every time.
    public var isTransient: Bool { code == .closedBeforeResponse || code == .closedDuringBody }

    /// A sentence naming what went wrong and what to do.
    public var description: String {
        switch code {
        case .unsupportedScheme:
            "NIOTransport speaks http and https over HTTP/1.1; a '\(detail)' request of another scheme or asking for "
                + "HTTP/2 needs a fallback transport (pass one, e.g. an AsyncHTTPClientTransport, to "
                + "NIOTransport(fallback:))"
        case .invalidAuthority: "invalid host or port in '\(detail)'"
        case .invalidTarget:
            "invalid request target '\(detail)': it must not be empty nor hold spaces or control characters "
                + "(percent-encode them)"
        case .invalidResponse: "the server's response is not valid HTTP/1.1: \(detail)"
        case .closedBeforeResponse: "the server closed the connection before sending a response"
        case .closedDuringBody: "the server closed the connection before the body ended"
        }
    }
}
