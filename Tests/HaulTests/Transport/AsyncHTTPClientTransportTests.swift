import HaulAsyncHTTPClient
import NIOCore
import NIOPosix
import Testing

@Suite("AsyncHTTPClientTransport", .timeLimit(.minutes(1)))
struct AsyncHTTPClientTransportTests {
    /// Holds the only reference, so that clearing it runs the transport's deinit there and then.
    final class Holder: @unchecked Sendable {  // touched by one thread at a time: the test, then the event loop
        var transport: AsyncHTTPClientTransport?
    }

    // A client's syncShutdown on an event loop thread is a precondition failure in AsyncHTTPClient: the deinit
    // once did that, and crashed any program whose last reference went on one of NIO's threads.
    @Test("the last reference released on an event loop thread shuts the client down without crashing")
    func releasedOnEventLoop() async throws {
        let holder = Holder()
        holder.transport = AsyncHTTPClientTransport()
        try await MultiThreadedEventLoopGroup.singleton.next().submit { holder.transport = nil }.get()
        #expect(holder.transport == nil)
    }
}
