import Foundation
import HaulOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A TCP relay on a free loopback port to another loopback port, which a test can cut (every connection through it
/// is closed and new ones are refused, as a network partition between a client and its server would look to the
/// client) or silence (nothing closed, nothing answered: a route that went dead). Blocking sockets, one thread per
/// direction of a connection.
package final class TCPRelay: Sendable {
    /// The port clients connect to.
    package let port: Int
    private let target: Int
    private let listener: Int32
    private let state = Locked(State())

    private struct State {
        var sockets: Set<Int32> = []
        var cut = false
        var silent = false
        /// Connections taken while silent: no pumps, closed by the cut.
        var held: Set<Int32> = []
    }

    /// Starts relaying 127.0.0.1:`port` to 127.0.0.1:`target`.
    package init(to target: Int) throws {
        self.target = target
        let listener = socket(AF_INET, streamSocket, 0)
        guard listener >= 0 else { throw POSIXError(.EIO) }
        var reuse: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &reuse, socklen_t(MemoryLayout<Int32>.size))
        let (bound, port) = withLoopbackAddress { address, length in
            var length = length
            return bind(listener, address, length) == 0 && listen(listener, 64) == 0
                && getsockname(listener, address, &length) == 0
        }
        guard bound else {
            close(listener)
            throw POSIXError(.EADDRINUSE)
        }
        self.listener = listener
        self.port = port
        let relay = self
        Thread { relay.acceptLoop() }.start()
    }

    /// Closes every connection and refuses new ones from now on.
    package func cut() {
        let (sockets, held) = state.withLock { state in
            state.cut = true
            defer { (state.sockets, state.held) = ([], []) }
            return (state.sockets, state.held)
        }
        shutdown(listener, Int32(SHUT_RDWR))
        for socket in sockets { shutdown(socket, Int32(SHUT_RDWR)) }
        for socket in held { close(socket) }
    }

    /// From now on drops every byte either way, and takes new connections without ever answering them; nothing is
    /// closed until ``cut()``.
    package func silence() {
        state.withLock { $0.silent = true }
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                close(listener)
                return
            }
            let held = state.withLock { state in
                guard state.silent, !state.cut else { return false }
                state.held.insert(client)
                return true
            }
            if held { continue }
            let server = socket(AF_INET, streamSocket, 0)
            let connected = withLoopbackAddress(port: target) { connect(server, $0, $1) }.result == 0
            let accepted = state.withLock { state in
                guard !state.cut, connected else { return false }
                state.sockets.formUnion([client, server])
                return true
            }
            guard accepted else {
                close(client)
                close(server)
                continue
            }
            let relay = self
            let finished = Locked(0)
            Thread { relay.pump(from: client, to: server, finished: finished) }.start()
            Thread { relay.pump(from: server, to: client, finished: finished) }.start()
        }
    }

    private func pump(from source: Int32, to destination: Int32, finished: Locked<Int>) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        copying: while true {
            let count = buffer.withUnsafeMutableBytes { read(source, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            if state.withLock({ $0.silent }) { continue }
            var sent = 0
            while sent < count {
                let written = buffer.withUnsafeBytes { bytes in
                    write(destination, bytes.baseAddress.map { $0 + sent }, count - sent)
                }
                if written < 0, errno == EINTR { continue }
                guard written > 0 else { break copying }
                sent += written
            }
        }
        // Either direction ending ends the connection; the second pump to end closes the descriptors.
        shutdown(source, Int32(SHUT_RDWR))
        shutdown(destination, Int32(SHUT_RDWR))
        let second = finished.withLock { count in
            count += 1
            return count == 2
        }
        guard second else { return }
        state.withLock { state in
            state.sockets.remove(source)
            state.sockets.remove(destination)
        }
        close(source)
        close(destination)
    }
}
