import NIOCore
import NIOTLS

/// Sits behind swift-nio-ssl's handler while the connection is new and completes `handshake` when the TLS handshake
/// ends: with success, or with the error that ended it (a certificate that is not trusted, a closed connection).
/// Touched only on the channel's event loop; once the handshake is over it passes everything on untouched.
final class HandshakeWatcher: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = NIOAny

    private let handshake: EventLoopPromise<Void>

    init(_ handshake: EventLoopPromise<Void>) {
        self.handshake = handshake
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted? = event as? TLSUserEvent { handshake.succeed() }
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
