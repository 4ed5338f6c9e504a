import NIOCore
import NIOSSL
import NIOTLS

/// Sits behind swift-nio-ssl's handler while the connection is new and completes `handshake` when the TLS handshake
/// ends: with success, or with the error that ended it (a certificate that is not trusted, a closed connection).
/// Touched only on the channel's event loop; once the handshake is over it passes everything on untouched.
///
/// With `identity`, it checks the server's certificate against that host itself: a connection through a proxy's
/// tunnel, where swift-nio-ssl would check the certificate's IP addresses against the address connected to, the
/// proxy's, so that a certificate for the proxy's address would pass for any server.
final class HandshakeWatcher: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = NIOAny

    private let handshake: EventLoopPromise<Void>
    private let identity: String?

    init(_ handshake: EventLoopPromise<Void>, identity: String? = nil) {
        self.handshake = handshake
        self.identity = identity
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted? = event as? TLSUserEvent {
            if let identity {
                let certificate = try? context.pipeline.syncOperations.nioSSL_peerCertificate()
                guard let certificate, CertificateIdentity.names(identity, in: certificate) else {
                    handshake.fail(NIOSSLExtraError.failedToValidateHostname)
                    context.close(promise: nil)
                    return
                }
            }
            handshake.succeed()
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        handshake.fail(error)  // ignored once the handshake succeeded: a promise completes once
        context.fireErrorCaught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        handshake.fail(NIOTransportError.closedBeforeResponse)
        context.fireChannelInactive()
    }
}
