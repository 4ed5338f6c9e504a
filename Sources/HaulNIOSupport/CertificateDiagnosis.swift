import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import SwiftASN1
import X509

/// Says why a server's certificate was refused, in the terms curl and browsers use (expired, self-signed, issued
/// by an unknown CA, for another host).
///
/// BoringSSL reports every refused chain as `CERTIFICATE_VERIFY_FAILED`. To say more, this connects to the server
/// once more without verifying, takes the certificate it presents and examines it. Only a request that has already
/// failed for good pays for this one extra handshake.
package enum CertificateDiagnosis {
    /// Why the certificate at `destination` is not trusted, or `nil` when the server cannot be reached again.
    package static func untrusted(at destination: ServerAddress, connectTimeout: Duration) async -> String? {
        guard let certificate = await presentedCertificate(at: destination, connectTimeout: connectTimeout) else {
            return nil
        }
        let host = destination.host
        let now = Date()
        if now > certificate.notValidAfter { return "certificate for \(host) has expired" }
        if now < certificate.notValidBefore { return "certificate for \(host) is not valid yet" }
        if certificate.issuer == certificate.subject {
            return "certificate not trusted for \(host): self-signed certificate"
        }
        return "certificate not trusted for \(host): issued by an unknown CA (\(name(certificate.issuer)))"
    }

    /// `host name mismatch: certificate is for NAMES`, or `nil` when the server cannot be reached again.
    package static func nameMismatch(at destination: ServerAddress, connectTimeout: Duration) async -> String? {
        guard let certificate = await presentedCertificate(at: destination, connectTimeout: connectTimeout) else {
            return nil
        }
        let names = self.names(in: certificate)
        return
            "host name mismatch: certificate is for \(names.isEmpty ? "no host name" : names.joined(separator: ", "))"
    }

    /// The DNS names and IP addresses a certificate is for (its subject alternative names; its common name when it
    /// has none).
    static func names(in certificate: Certificate) -> [String] {
        var names: [String] = []
        if let alternatives = try? certificate.extensions.subjectAlternativeNames {
            for name in alternatives {
                switch name {
                case .dnsName(let dns): names.append(dns)
                case .ipAddress(let octets): names.append(address(Array(octets.bytes)))
                default: break
                }
            }
        }
        if names.isEmpty {
            names = certificate.subject.flatMap { $0 }.filter { $0.type == .RDNAttributeType.commonName }.map {
                String(describing: $0.value)
            }
        }
        return names
    }

    private static func address(_ bytes: [UInt8]) -> String {
        if bytes.count == 4 { return bytes.map(String.init).joined(separator: ".") }
        guard bytes.count == 16 else { return bytes.map { String($0, radix: 16) }.joined(separator: ":") }
        var storage = in6_addr()
        withUnsafeMutableBytes(of: &storage) { $0.copyBytes(from: bytes) }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        guard inet_ntop(AF_INET6, &storage, &text, socklen_t(text.count)) != nil else { return "?" }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The common name of a distinguished name, else the whole name.
    private static func name(_ name: DistinguishedName) -> String {
        let common = name.flatMap { $0 }.first { $0.type == .RDNAttributeType.commonName }
        return common.map { String(describing: $0.value) } ?? String(describing: name)
    }

    /// The leaf certificate the server at `destination` presents, fetched without verifying it.
    private static func presentedCertificate(at destination: ServerAddress, connectTimeout: Duration) async
        -> Certificate?
    {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.certificateVerification = .none
        guard let context = try? NIOSSLContext(configuration: configuration) else { return nil }
        // SNI carries names only: an IP literal is sent without it, as every client does.
        let serverName = destination.host.isIPAddress ? nil : destination.host
        let group = MultiThreadedEventLoopGroup.singleton
        let handshake = group.next().makePromise(of: NIOSSLCertificate?.self)
        do {
            let channel = try await ClientBootstrap(group: handshake.futureResult.eventLoop)
                .connectTimeout(.nanoseconds(Int64(connectTimeout / .nanoseconds(1))))
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let tls = try NIOSSLClientHandler(context: context, serverHostname: serverName)
                        try channel.pipeline.syncOperations.addHandler(tls)
                        try channel.pipeline.syncOperations.addHandler(HandshakeWatcher(tls: tls, done: handshake))
                    }
                }
                .connect(host: destination.host, port: destination.port)
                .get()
            defer { channel.close(promise: nil) }
            guard let presented = try await handshake.futureResult.get() else { return nil }
            return try Certificate(derEncoded: presented.toDERBytes())
        } catch {
            handshake.fail(error)
            return nil
        }
    }
}

/// Completes `done` with the peer's certificate once the handshake is over, or with the error that ended it.
private final class HandshakeWatcher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    private let tls: NIOSSLClientHandler
    private let done: EventLoopPromise<NIOSSLCertificate?>

    init(tls: NIOSSLClientHandler, done: EventLoopPromise<NIOSSLCertificate?>) {
        self.tls = tls
        self.done = done
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted? = event as? TLSUserEvent { done.succeed(tls.peerCertificate) }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        done.fail(error)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        done.fail(ChannelError.ioOnClosedChannel)
        context.fireChannelInactive()
    }
}

extension String {
    /// Whether this is an IPv4 or IPv6 literal (without brackets).
    var isIPAddress: Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, self, &v4) == 1 || inet_pton(AF_INET6, self, &v6) == 1
    }
}
