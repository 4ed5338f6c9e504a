import Haul
import HaulNIOSupport
import NIOCore
import NIOPosix

/// Opens a tunnel through a proxy on a connected channel: `CONNECT` for an HTTP proxy (RFC 9110, 9.3.6), or the
/// SOCKS5 handshake (RFC 1928, with RFC 1929's user and password). Once it returns, the channel carries the bytes of
/// the destination's connection, and the caller adds the TLS and exchange handlers above it.
///
/// The handshake is a few short messages once per connection, so it is written as plain sequential code over a
/// ``TunnelReader`` rather than as a state machine in a handler.
enum ProxyTunnel {
    /// Opens a tunnel to `host`:`port` through `proxy` on `channel`, whose pipeline ends with `reader`.
    static func open(
        to host: String, port: Int, through proxy: Proxy, channel: any Channel, reader: TunnelReader
    ) async throws {
        do {
            switch proxy.kind {
            case .http, .https:
                try await connect(to: host, port: port, through: proxy, channel: channel, reader: reader)
            case .socks5, .socks5h:
                try await socks5(to: host, port: port, through: proxy, channel: channel, reader: reader)
            }
        } catch is TunnelReader.Closed {
            throw TransportError("the proxy \(proxy) closed the connection before the tunnel was open")
        } catch is TunnelReader.Oversized {
            throw TransportError(
                "the proxy \(proxy) answered with more than \(TunnelReader.maxMessageSize) bytes without ending its "
                    + "answer", isTransient: false)
        }
        try await channel.pipeline.removeHandler(reader).get()
    }

    /// `host:port` as a request target or `Host` value (an IPv6 address in brackets).
    private static func authority(_ host: String, _ port: Int) -> String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    private static func connect(
        to host: String, port: Int, through proxy: Proxy, channel: any Channel, reader: TunnelReader
    ) async throws {
        let target = authority(host, port)
        var request = "CONNECT \(target) HTTP/1.1\r\nHost: \(target)\r\n"
        if let credentials = proxy.credentials {
            request += "Proxy-Authorization: \(credentials.basicAuthorization)\r\n"
        }
        request += "\r\n"
        try await channel.writeAndFlush(ByteBuffer(string: request)).get()
        let head = String(decoding: try await reader.read(.head, on: channel.eventLoop), as: UTF8.self)
        // "HTTP/1.1 200 Connection established": the status code is the second word of the first line.
        let statusLine = head.split(separator: "\r\n", maxSplits: 1).first.map(String.init) ?? ""
        let words = statusLine.split(separator: " ", maxSplits: 2)
        guard words.count >= 2, words[0].hasPrefix("HTTP/1."), let status = Int(words[1]) else {
            throw TransportError(
                "the proxy \(proxy) answered CONNECT with something that is not HTTP", isTransient: false)
        }
        let answered = words.dropFirst().joined(separator: " ")
        switch status {
        case 200..<300:
            return
        case 407, 401:
            // 407 is the proxy's own status; some proxies (tinyproxy) answer refused credentials with 401, which on
            // a CONNECT can only be the proxy's too.
            throw TransportError(proxy.authenticationFailure(answered: answered), isTransient: false)
        default:
            // A 5xx is the proxy failing to reach the server, which may pass; anything else is its refusal.
            throw TransportError(
                "the proxy \(proxy) refused the tunnel to \(target): it answered \(answered)",
                isTransient: status >= 500)
        }
    }

    private static func socks5(
        to host: String, port: Int, through proxy: Proxy, channel: any Channel, reader: TunnelReader
    ) async throws {
        // Greeting: version 5 and the methods offered: none, and user/password when the proxy URL has them.
        let methods: [UInt8] = proxy.credentials == nil ? [0x00] : [0x00, 0x02]
        try await channel.writeAndFlush(ByteBuffer(bytes: [0x05, UInt8(methods.count)] + methods)).get()
        let chosen: [UInt8]
        do {
            chosen = try await reader.read(.bytes(2), on: channel.eventLoop)
        } catch is TunnelReader.Closed where proxy.credentials == nil {
            // A proxy that wants a password may close rather than answer "no acceptable method" (microsocks).
            throw TransportError(
                "the SOCKS5 proxy \(proxy) closed the connection when offered no authentication: it may need a user "
                    + "and password (give them in the proxy URL)", isTransient: false)
        }
        guard chosen[0] == 0x05 else {
            throw TransportError("the proxy \(proxy) does not speak SOCKS5", isTransient: false)
        }
        switch chosen[1] {
        case 0x00:
            break
        case 0x02 where proxy.credentials != nil:
            let credentials = proxy.credentials ?? Credentials(user: "", password: "")
            let user = Array(credentials.user.utf8)
            let password = Array(credentials.password.utf8)
            guard user.count <= 255, password.count <= 255 else {
                throw TransportError(
                    "the user or password of the proxy \(proxy) is over SOCKS5's 255 bytes", isTransient: false)
            }
            try await channel.writeAndFlush(
                ByteBuffer(bytes: [0x01, UInt8(user.count)] + user + [UInt8(password.count)] + password)
            ).get()
            let verdict: [UInt8]
            do {
                verdict = try await reader.read(.bytes(2), on: channel.eventLoop)
            } catch is TunnelReader.Closed {
                verdict = [0x01, 0xFF]  // closing instead of answering is a refusal too (RFC 1929 closes after one)
            }
            guard verdict[1] == 0x00 else {
                throw TransportError(
                    "the SOCKS5 proxy \(proxy) refused the user and password given for it", isTransient: false)
            }
        default:
            throw TransportError(
                proxy.credentials == nil
                    ? "the SOCKS5 proxy \(proxy) needs a user and password (give them in the proxy URL)"
                    : "the SOCKS5 proxy \(proxy) accepts none of the authentication methods offered",
                isTransient: false)
        }
        var request: [UInt8] = [0x05, 0x01, 0x00]  // CONNECT
        request += try await socksAddress(host, resolvedLocally: !proxy.resolvesHostNames, proxy: proxy)
        request += [UInt8(port >> 8), UInt8(port & 0xFF)]
        try await channel.writeAndFlush(ByteBuffer(bytes: request)).get()
        let reply = try await reader.read(.socksReply, on: channel.eventLoop)
        guard reply[0] == 0x05 else {
            throw TransportError("the proxy \(proxy) does not speak SOCKS5", isTransient: false)
        }
        guard reply[1] == 0x00 else {
            let (reason, transient) = socksReason(reply[1])
            throw TransportError(
                "the SOCKS5 proxy \(proxy) could not connect to \(authority(host, port)): \(reason)",
                isTransient: transient)
        }
    }

    /// The destination as SOCKS5 addresses it: the name for the proxy to resolve (`socks5h`), or an address
    /// resolved here (`socks5`, on NIO's thread pool: `getaddrinfo` blocks).
    private static func socksAddress(_ host: String, resolvedLocally: Bool, proxy: Proxy) async throws -> [UInt8] {
        if let literal = socksAddress(literal: host) { return literal }
        if !resolvedLocally {
            let name = Array(host.utf8)
            guard name.count <= 255 else {
                throw TransportError("the host name \(host) is too long for SOCKS5", isTransient: false)
            }
            return [0x03, UInt8(name.count)] + name
        }
        do {
            let resolved = try await NIOThreadPool.singleton.runIfActive {
                try SocketAddress.makeAddressResolvingHost(host, port: 0)
            }
            return socksAddress(literal: resolved.ipAddress ?? "") ?? []
        } catch {
            throw TransportError("no such host: \(host)", isTransient: false, underlying: error)
        }
    }

    /// An IPv4 or IPv6 address as SOCKS5 carries it.
    private static func socksAddress(literal host: String) -> [UInt8]? {
        guard let bytes = NoProxyList.addressBytes(host) else { return nil }
        return [bytes.count == 4 ? 0x01 : 0x04] + bytes
    }

    /// A SOCKS5 reply code in words, and whether another attempt may succeed.
    private static func socksReason(_ code: UInt8) -> (String, Bool) {
        switch code {
        case 0x01: ("general failure", true)
        case 0x02: ("not allowed by the proxy's rules", false)
        case 0x03: ("network unreachable", true)
        case 0x04: ("host unreachable", true)
        case 0x05: ("connection refused", true)
        case 0x06: ("timed out", true)
        case 0x07: ("the proxy does not support CONNECT", false)
        case 0x08: ("the proxy does not support that address type", false)
        default: ("reply code \(code)", false)
        }
    }
}

/// The first handler above the proxy's connection (or its TLS) while a tunnel is opened: collects what the proxy
/// sends and hands it to ``ProxyTunnel`` a message at a time. Touched only on the channel's event loop; removed once
/// the tunnel is open, before anything of the destination arrives (the client speaks first, in TLS and in HTTP).
final class TunnelReader: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer

    /// The proxy closed the connection while a message was awaited.
    struct Closed: Error {}

    /// The proxy sent more than ``maxMessageSize`` bytes that are not a whole message.
    struct Oversized: Error {}

    /// The most kept of what the proxy sent: a response head as large as ``ResponseParser`` takes (SOCKS5 messages are
    /// a few hundred bytes at most). Beyond it the proxy is not answering, and what it sends is not kept.
    static let maxMessageSize = ResponseParser.maxHeadSize

    /// What to wait for.
    enum Message {
        /// Exactly this many bytes.
        case bytes(Int)
        /// An HTTP response head, up to its empty line.
        case head
        /// A SOCKS5 reply, whose length depends on its address type.
        case socksReply
    }

    private var received = ByteBuffer()
    private var waiting: (message: Message, promise: EventLoopPromise<[UInt8]>)?
    private var failure: (any Error)?

    /// The next message, as bytes (a head as text). Fails when the proxy closes the connection or the connect
    /// deadline passes before all of it has arrived.
    func read(_ message: Message, on loop: any EventLoop) async throws -> [UInt8] {
        try await loop.flatSubmit { [self] in
            let promise = loop.makePromise(of: [UInt8].self)
            waiting = (message, promise)
            // A proxy that answers and closes at once (a 407) may have done both before this read was asked for:
            // what arrived is read first.
            deliver()
            if let failure, waiting != nil { fail(failure) }
            return promise.futureResult
        }.get()
    }

    /// Fails the wait (the connect deadline passed); on the event loop.
    func fail(_ error: any Error) {
        failure = failure ?? error
        waiting?.promise.fail(error)
        waiting = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        received.writeBuffer(&bytes)
        deliver()
        if received.readableBytes > Self.maxMessageSize {
            received.clear()
            fail(Oversized())
            context.close(promise: nil)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(error)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail(Closed())
        context.fireChannelInactive()
    }

    private func deliver() {
        guard let (message, promise) = waiting, let length = complete(message) else { return }
        waiting = nil
        promise.succeed(received.readBytes(length: length) ?? [])
        received.discardReadBytes()
    }

    /// The length of `message` if all of it has arrived.
    private func complete(_ message: Message) -> Int? {
        let view = received.readableBytesView
        switch message {
        case .bytes(let count):
            return view.count >= count ? count : nil
        case .head:
            let end: [UInt8] = [13, 10, 13, 10]
            guard let range = view.firstRange(of: end) else { return nil }
            return view.distance(from: view.startIndex, to: range.upperBound)
        case .socksReply:
            // VER REP RSV ATYP ADDR PORT: the address is 4 bytes (IPv4), 16 (IPv6) or a length byte and a name.
            guard view.count >= 5 else { return nil }
            let start = view.startIndex
            let addressLength: Int
            switch view[start + 3] {
            case 0x01: addressLength = 4
            case 0x04: addressLength = 16
            case 0x03: addressLength = 1 + Int(view[start + 4])
            default: addressLength = 0  // an error reply may carry no usable address
            }
            let total = 4 + addressLength + 2
            return view.count >= total ? total : nil
        }
    }
}
