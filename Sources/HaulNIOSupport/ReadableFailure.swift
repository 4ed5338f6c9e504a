#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
package import Haul
import NIOCore
import NIOPosix
import NIOSSL

/// Where a request was going, for messages: the host as the URL names it and the port connected to.
package struct ServerAddress: Sendable, Hashable {
    /// The host without brackets (`::1`, not `[::1]`).
    package let host: String
    package let port: Int

    package init(host: String, port: Int) {
        self.host = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        self.port = port
    }

    /// `host:port`, with an IPv6 literal in brackets.
    package var described: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// Turns the errors of SwiftNIO and swift-nio-ssl into ``TransportError``s whose messages name the host and the
/// reason, the same whichever transport met them.
package enum ReadableFailure {
    /// The readable form of `error`, or `nil` when it is not one this knows (the caller keeps it as it is).
    ///
    /// A failed certificate check is explained by ``CertificateDiagnosis``, which connects once more to look at the
    /// certificate: that is why this is `async`.
    /// - Parameter diagnoses: whether a refused certificate may be looked at through a connection of its own (not
    ///   when the server is reached through a proxy: it may be out of direct reach).
    package static func of(
        _ error: any Error, at destination: ServerAddress, connectTimeout: Duration, diagnoses: Bool = true
    ) async -> TransportError? {
        if error is TransportError || error is CancellationError { return nil }
        if let connection = error as? NIOConnectionError { return describe(connection, at: destination) }
        if let io = error as? IOError { return describe(errno: io.errnoCode, underlying: io, at: destination) }
        if let channel = error as? ChannelError, case .connectTimeout = channel {
            return timedOut(at: destination, after: connectTimeout, underlying: error)
        }
        if let address = error as? SocketAddressError, case .unknown = address {
            return TransportError("no such host: \(destination.host)", isTransient: false, underlying: error)
        }
        if let ssl = error as? NIOSSLExtraError, ssl == .failedToValidateHostname {
            let reason =
                diagnoses
                ? await CertificateDiagnosis.nameMismatch(at: destination, connectTimeout: connectTimeout) : nil
            return TransportError(
                reason ?? "host name mismatch: the certificate is not for \(destination.host)", isTransient: false,
                underlying: error)
        }
        if let ssl = error as? NIOSSLError {
            return await describe(ssl, at: destination, connectTimeout: connectTimeout, diagnoses: diagnoses)
        }
        if let boring = error as? BoringSSLError {
            // An alert after the handshake: in TLS 1.3 a refused client certificate arrives on the first read.
            let reason = String(describing: boring)
            return clientCertificateRefusal(reason, at: destination, underlying: error)
                ?? TransportError("TLS error with \(destination.described): \(shortReason(reason))", underlying: error)
        }
        return nil
    }

    /// A failure to connect, in the words of ``of(_:at:connectTimeout:diagnoses:)``, for a client that names no
    /// destination of its own (the shared queue's PostgreSQL connections): the address comes from the error. `nil`
    /// for an error that is not a failure to connect.
    package static func ofConnection(_ error: any Error) -> TransportError? {
        if let connection = error as? NIOConnectionError {
            return describe(connection, at: ServerAddress(host: connection.host, port: connection.port))
        }
        return nil
    }

    /// A failure to reach or use `proxy`, in words that name it (`cannot use the proxy http://user:***@host:3128:
    /// connection refused (host:3128)`). Never transient: a proxy that cannot be used is a setting to fix, and
    /// retrying it for every download only delays the message (curl gives up at once too).
    package static func ofProxy(_ error: any Error, proxy: Proxy, connectTimeout: Duration) async -> TransportError {
        let readable = await of(
            error, at: ServerAddress(host: proxy.host, port: proxy.port), connectTimeout: connectTimeout)
        return proxyFailure(proxy, reason: readable?.message ?? String(describing: error), underlying: error)
    }

    /// `cannot use the proxy PROXY: REASON`, not transient (see ``ofProxy(_:proxy:connectTimeout:)``).
    package static func proxyFailure(_ proxy: Proxy, reason: String, underlying: any Error) -> TransportError {
        TransportError("cannot use the proxy \(proxy): \(reason)", isTransient: false, underlying: underlying)
    }

    /// `timed out connecting to host:port after N s`.
    package static func timedOut(
        at destination: ServerAddress, after timeout: Duration, underlying: (any Error)?
    ) -> TransportError {
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        let shown = seconds == seconds.rounded() ? String(Int(seconds)) : String(format: "%.1f", seconds)
        return TransportError(
            "timed out connecting to \(destination.described) after \(shown) s", underlying: underlying)
    }

    private static func describe(_ error: NIOConnectionError, at destination: ServerAddress) -> TransportError {
        if error.connectionErrors.isEmpty {
            // Name resolution gave no address: a typo or a host that does not exist is not retried.
            return TransportError("no such host: \(destination.host)", isTransient: false, underlying: error)
        }
        let errnos = error.connectionErrors.compactMap { ($0.error as? IOError)?.errnoCode }
        if let first = errnos.first, errnos.count == error.connectionErrors.count, errnos.allSatisfy({ $0 == first }) {
            return describe(errno: first, underlying: error, at: destination)
        }
        if error.connectionErrors.contains(where: { failure in
            if case .connectTimeout? = failure.error as? ChannelError { true } else { false }
        }) {
            return TransportError("timed out connecting to \(destination.described)", underlying: error)
        }
        return TransportError("could not connect to \(destination.described)", underlying: error)
    }

    private static func describe(errno code: CInt, underlying: any Error, at destination: ServerAddress)
        -> TransportError
    {
        let place = destination.described
        switch code {
        case ECONNREFUSED: return TransportError("connection refused (\(place))", underlying: underlying)
        case ECONNRESET: return TransportError("connection reset by \(place)", underlying: underlying)
        case ETIMEDOUT: return TransportError("timed out connecting to \(place)", underlying: underlying)
        case EHOSTUNREACH, ENETUNREACH: return TransportError("no route to \(place)", underlying: underlying)
        case EPIPE: return TransportError("connection closed by \(place)", underlying: underlying)
        default:
            let reason = String(cString: strerror(code)).lowercased()
            return TransportError("\(reason) (\(place))", underlying: underlying)
        }
    }

    private static func describe(
        _ error: NIOSSLError, at destination: ServerAddress, connectTimeout: Duration, diagnoses: Bool
    ) async -> TransportError {
        switch error {
        case .handshakeFailed(let boring):
            let reason = String(describing: boring)
            if reason.contains("CERTIFICATE_VERIFY_FAILED") {
                let explained =
                    diagnoses
                    ? await CertificateDiagnosis.untrusted(at: destination, connectTimeout: connectTimeout) : nil
                return TransportError(
                    explained ?? "certificate not trusted for \(destination.host)", isTransient: false,
                    underlying: error)
            }
            if let refused = clientCertificateRefusal(reason, at: destination, underlying: error) { return refused }
            return TransportError(
                "TLS handshake with \(destination.described) failed: \(shortReason(reason))", isTransient: false,
                underlying: error)
        case .uncleanShutdown:
            return TransportError(
                "the TLS connection to \(destination.described) ended without close_notify", underlying: error)
        default:
            if let refused = clientCertificateRefusal(String(describing: error), at: destination, underlying: error) {
                return refused
            }
            return TransportError("TLS error with \(destination.described): \(error)", underlying: error)
        }
    }

    /// A server that wants a client certificate answers a missing or untrusted one with an alert; in TLS 1.3 it
    /// comes after the client thinks the handshake is done, so it can surface on the first read.
    package static func clientCertificateRefusal(
        _ reason: String, at destination: ServerAddress, underlying: any Error
    ) -> TransportError? {
        let alerts = [
            "CERTIFICATE_REQUIRED", "ALERT_BAD_CERTIFICATE", "ALERT_UNKNOWN_CA", "ALERT_CERTIFICATE_UNKNOWN",
            "ALERT_HANDSHAKE_FAILURE",
        ]
        guard alerts.contains(where: reason.contains) else { return nil }
        return TransportError(
            "\(destination.described) refused the TLS handshake: it asks for a client certificate it trusts",
            isTransient: false, underlying: underlying)
    }

    /// BoringSSL's `error:...:SSL routines:OPENSSL_internal:REASON` cut to its reason, in lower case words.
    private static func shortReason(_ reason: String) -> String {
        guard let range = reason.range(of: "OPENSSL_internal:") else { return reason }
        let code = reason[range.upperBound...].prefix { $0.isLetter || $0.isNumber || $0 == "_" }
        return code.replacingOccurrences(of: "_", with: " ").lowercased()
    }
}
