import Foundation
import Haul
import HaulTestServer
import HaulTestSupport
import HTTPTypes
import Testing

@testable import HaulURLSession

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Runs `body` in a task; `nil` when it has not ended within `limit` (the task is then cancelled and left).
private func within<T: Sendable>(
    _ limit: Duration, _ body: @escaping @Sendable () async throws -> T
) async -> Result<T, any Error>? {
    let box = Gate<Result<T, any Error>>()
    let task = Task {
        do { box.open(with: .success(try await body())) } catch { box.open(with: .failure(error)) }
    }
    let deadline = ContinuousClock.now + limit
    while box.value == nil, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(10)) }
    if box.value == nil { task.cancel() }
    return box.value
}

/// Sends through `transport` in a task that lets go of it once done.
private func sendReleasingTransport(_ transport: URLSessionTransport, _ url: URL) async throws -> TransportResponse {
    try await transport.send(HTTPRequest(method: .get, url: url), options: TransportOptions())
}

@Suite("URLSessionTransport: review hazards", .serialized, .timeLimit(.minutes(1)))
struct URLSessionReviewHazardTests {
    @Test("a redirect is handed to the engine, not followed")
    func redirectRefused() async throws {
        try await TestServer.withRunning { server in
            let transport = URLSessionTransport()
            let url = server.url(path: "/bytes/r", query: ["size": "10", "redirects": "1"])
            let outcome = await within(.seconds(10)) {
                let response = try await transport.send(
                    HTTPRequest(method: .get, url: url), options: TransportOptions())
                await response.body.close()
                return response.head.status.code
            }
            let status = try #require(try outcome?.get())
            #expect((300..<400).contains(status), "status \(status)")
            #expect(server.stats.requestCount == 1)
        }
    }

    @Test("the body arrives exactly as sent; an encoded one is refused")
    func bodyAsSent() async throws {
        try await TestServer.withRunning { server in
            let transport = URLSessionTransport()
            let url = server.url(path: "/bytes/exact", query: ["size": "300000"])
            let outcome = await within(.seconds(20)) {
                let response = try await transport.send(
                    HTTPRequest(method: .get, url: url), options: TransportOptions())
                var bytes: [UInt8] = []
                for try await chunk in response.body { chunk.withUnsafeBytes { bytes += $0 } }
                await response.body.close()
                return bytes
            }
            #expect(try #require(try outcome?.get()) == TestServer.expectedBytes(name: "exact", size: 300000))

            let gzipped = server.url(path: "/bytes/z", query: ["size": "3000", "gzip": "1"])
            let refused = await within(.seconds(10)) {
                _ = try await transport.send(HTTPRequest(method: .get, url: gzipped), options: TransportOptions())
            }
            let result = try #require(refused)
            #expect(throws: TransportError.self) { try result.get() }
        }
    }

    @Test("cancelling the task waiting for a head, or reading a stalled body, ends it promptly")
    func cancellation() async throws {
        try await TestServer.withRunning { server in
            let transport = URLSessionTransport()
            let held = server.url(path: "/bytes/h", query: ["size": "100", "hold": "g"])
            let waiting = Task {
                try await transport.send(HTTPRequest(method: .get, url: held), options: TransportOptions())
            }
            try await eventually("held") { server.heldCount(at: "g") == 1 }
            waiting.cancel()
            let head = await within(.seconds(5)) { _ = try await waiting.value }
            #expect(head != nil, "send never returned after its task was cancelled")
            if case .success? = head { Issue.record("a cancelled send returned a response") }
            server.openGate("g")

            let stalled = server.url(
                path: "/bytes/s", query: ["size": "1000000", "stallAfter": "1000", "stall": "forever"])
            let response = try #require(
                try await within(.seconds(10)) {
                    try await transport.send(HTTPRequest(method: .get, url: stalled), options: TransportOptions())
                }?.get())
            let reading = Task {
                for try await _ in response.body {}
            }
            try await Task.sleep(for: .milliseconds(200))
            reading.cancel()
            #expect(await within(.seconds(5)) { try await reading.value } != nil, "a cancelled read never ended")
            #expect(await within(.seconds(5)) { await response.body.close() } != nil, "close never returned")
        }
    }

    @Test("a session replaced mid-transfer finishes its transfer; a transport released mid-transfer ends it")
    func replacedAndReleased() async throws {
        try await TestServer.withRunning { server in
            var transport: URLSessionTransport? = URLSessionTransport(maximumConnectionsPerHost: 2)
            let held = server.url(path: "/bytes/rep", query: ["size": "50000", "hold": "g"])
            let sent = Task { [transport] in
                let response = try await transport!.send(
                    HTTPRequest(method: .get, url: held), options: TransportOptions())
                var count = 0
                for try await chunk in response.body { count += chunk.count }
                return count
            }
            try await eventually("held") { server.heldCount(at: "g") == 1 }
            transport!.allowConnections(perHost: 100)
            server.openGate("g")
            let count = await within(.seconds(10)) { try await sent.value }
            #expect(try #require(count).get() == 50000)

            let stalled = server.url(
                path: "/bytes/gone", query: ["size": "100000", "stallAfter": "1000", "stall": "forever"])
            let response = try await sendReleasingTransport(transport!, stalled)
            let reading = Task {
                for try await _ in response.body {}
            }
            try await Task.sleep(for: .milliseconds(300))
            weak let released = transport
            transport = nil
            #expect(released == nil, "the test still holds the transport")
            let ended = await within(.seconds(5)) { try await reading.value }
            #expect(ended != nil, "a read on a released transport never ended")
        }
    }
}
