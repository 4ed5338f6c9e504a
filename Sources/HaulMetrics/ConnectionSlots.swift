import HaulOperations
package import NIOCore

/// A server's open connections, at most `limit` of them, and which of them may be closed to make room for a new one:
/// those that need no secret and must not lock callers out by staying open (``Spare``). With the limit reached, a new
/// connection closes one of them, the kind listed first going first, or is closed itself when there is none.
package final class ConnectionSlots: Sendable {
    /// Why an open connection may be closed to make room for a new one.
    package struct Spare: OptionSet, Sendable {
        package let rawValue: UInt8
        package init(rawValue: UInt8) { self.rawValue = rawValue }

        /// A WebSocket session no call has vouched for (with the secret, or signed in): notifications need none, so
        /// idle ones opened by anyone would otherwise hold every slot.
        package static let unvouched = Spare(rawValue: 1)
        /// Waiting for a wrong secret's held-back answer, never sent when it is closed. That tells a guesser nothing
        /// it could not tell already, since a right secret's answer is never held: a guess not answered at once is a
        /// wrong one.
        package static let held = Spare(rawValue: 2)

        /// The order in which they are closed.
        static let order: [Spare] = [.unvouched, .held]
    }

    private struct Open {
        let channel: any Channel
        var spare: Spare = []
    }
    private let open = Locked<[ObjectIdentifier: Open]>([:])
    private let limit: Int

    package init(limit: Int) {
        self.limit = limit
    }

    /// How many connections are open.
    package var count: Int { open.withLock { $0.count } }

    /// Counts `channel` in and has it forgotten once it closes, closing a spare connection to make room when the
    /// limit is reached; `false` when there is none (`channel` is not counted: the caller closes it).
    package func admit(_ channel: any Channel) -> Bool {
        let key = ObjectIdentifier(channel)
        let outcome = open.withLock { open -> (admitted: Bool, evicted: (any Channel)?) in
            var evicted: (any Channel)?
            if open.count >= limit {
                var victim: ObjectIdentifier?
                for kind in Spare.order where victim == nil {
                    victim = open.first { $0.value.spare.contains(kind) }?.key
                }
                guard let victim else { return (false, nil) }
                evicted = open.removeValue(forKey: victim)?.channel
            }
            open[key] = Open(channel: channel)
            return (true, evicted)
        }
        guard outcome.admitted else { return false }
        outcome.evicted?.close(promise: nil)
        channel.closeFuture.whenComplete { _ in self.remove(channel) }
        return true
    }

    private func remove(_ channel: any Channel) {
        _ = open.withLock { $0.removeValue(forKey: ObjectIdentifier(channel)) }
    }

    /// Marks `channel` as one that may be closed to make room (`true`), for `kind`, or no longer.
    package func mark(_ channel: any Channel, _ kind: Spare, _ spare: Bool) {
        open.withLock { open in
            let key = ObjectIdentifier(channel)
            guard open[key] != nil else { return }
            if spare { open[key]?.spare.insert(kind) } else { open[key]?.spare.remove(kind) }
        }
    }

    /// Runs `deliver` on `channel`'s loop after `delay`, the channel marked ``Spare/held`` meanwhile.
    package func hold(_ channel: any Channel, for delay: Duration, then deliver: @escaping @Sendable () -> Void) {
        mark(channel, .held, true)
        channel.eventLoop.scheduleTask(in: TimeAmount(delay)) {
            self.mark(channel, .held, false)
            deliver()
        }
    }

    /// Closes every open connection.
    package func closeAll() {
        let channels = open.withLock { open in
            defer { open = [:] }
            return open.values.map(\.channel)
        }
        for channel in channels { channel.close(promise: nil) }
    }
}
