/// A transport failure in words a person can act on, such as `connection refused (localhost:8443)` or
/// `certificate for localhost has expired`, with the library's own error kept underneath.
///
/// The engine reports ``message`` as the download's failure; the error underneath (``underlying``) is for
/// diagnostics (`haul get -v` prints it). Transports map their libraries' errors to this type so that messages
/// are the same whichever transport moved the bytes.
public struct TransportError: TransportFailure, CustomStringConvertible {
    /// What went wrong, naming the host (and port) where it helps; no credentials.
    public let message: String
    /// Whether another attempt may succeed: `false` for a certificate that is not trusted, say.
    public let isTransient: Bool
    /// The transport library's own error, if any.
    public let underlying: (any Error)?

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - message: what went wrong, short and stable (tests and scripts may match it).
    ///   - isTransient: whether another attempt may succeed.
    ///   - underlying: the library's error, for diagnostics.
    public init(_ message: String, isTransient: Bool = true, underlying: (any Error)? = nil) {
        self.message = message
        self.isTransient = isTransient
        self.underlying = underlying
    }

    /// The message.
    public var description: String { message }
}
