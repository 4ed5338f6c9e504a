package import NIOCore

/// Closes an HTTP connection whose client takes longer than `timeout` to send a request: armed while a request is
/// awaited (at the connection's start, from a request's head, and again once an answer is written), not while one is
/// answered. A connection that stops halfway through a request, or sits idle, would otherwise hold its descriptor for
/// ever. Kept by one channel handler, on its event loop.
package struct RequestDeadline {
    private let timeout: TimeAmount
    private var scheduled: Scheduled<Void>?

    /// A deadline of `timeout`, not armed yet.
    package init(_ timeout: Duration) {
        self.timeout = TimeAmount(timeout)
    }

    /// Starts (or starts again) the wait for the client.
    package mutating func arm(_ context: ChannelHandlerContext) {
        scheduled?.cancel()
        let channel = context.channel
        scheduled = context.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
    }

    /// Stops the wait: a request is complete and being answered, or the handler leaves the connection.
    package mutating func disarm() {
        scheduled?.cancel()
        scheduled = nil
    }
}
