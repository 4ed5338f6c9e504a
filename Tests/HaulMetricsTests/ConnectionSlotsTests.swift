@testable import HaulMetrics
import NIOCore
import NIOEmbedded
import Testing

/// ``ConnectionSlots`` on channels of no socket: which connection makes room for a new one at the limit.
@Suite("ConnectionSlots")
struct ConnectionSlotsTests {
    /// A channel that is open, as one just accepted is.
    func connected() throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9)).wait()
        return channel
    }

    @Test("at the limit a new connection closes an unvouched session first, then a held one, else is refused")
    func evictionOrder() throws {
        let slots = ConnectionSlots(limit: 3)
        let (plain, held, unvouched) = (try connected(), try connected(), try connected())
        for channel in [plain, held, unvouched] { #expect(slots.admit(channel)) }
        slots.mark(held, .held, true)
        slots.mark(unvouched, .unvouched, true)

        #expect(slots.admit(try connected()))
        #expect(!unvouched.isActive && held.isActive && plain.isActive)
        #expect(slots.count == 3)
        #expect(slots.admit(try connected()))
        #expect(!held.isActive && plain.isActive)
        #expect(!slots.admit(try connected()), "no spare connection is left")
        #expect(slots.count == 3)
    }

    @Test("a connection that is no longer spare stays; a closed one frees its place")
    func unmarkAndClose() throws {
        let slots = ConnectionSlots(limit: 2)
        let (first, second) = (try connected(), try connected())
        #expect(slots.admit(first) && slots.admit(second))
        // Held and unvouched at once: vouched for, it is still held and may go.
        slots.mark(first, .unvouched, true)
        slots.mark(first, .held, true)
        slots.mark(first, .unvouched, false)
        slots.mark(first, .held, false)
        #expect(!slots.admit(try connected()), "neither is spare")
        #expect(first.isActive && second.isActive)

        try second.close().wait()
        second.embeddedEventLoop.run()
        #expect(slots.count == 1)
        #expect(slots.admit(try connected()))
        // A mark for a connection that has gone is not kept for a later one.
        slots.mark(second, .held, true)
        #expect(!slots.admit(try connected()))
    }
}
