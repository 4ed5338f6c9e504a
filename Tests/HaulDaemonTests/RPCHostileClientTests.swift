import Foundation
import Haul
import HaulDaemon
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A hostile client on loopback: guesses of the secret packed into batches, multicalls, WebSocket messages and
/// parallel connections; requests that stall; connections piled up; a session cookie taken by another local program.
@Suite("RPC server against a hostile client", .timeLimit(.minutes(3)))
struct RPCHostileClientTests {
    static let delay = Duration.milliseconds(40)

    static func guess(_ id: Int, token: String) -> JSON {
        ["jsonrpc": "2.0", "id": .int(Int64(id)), "method": "aria2.getVersion", "params": [.string("token:\(token)")]]
    }

    @Test("guesses in one batch or one multicall are held back one after another: the right one comes no sooner")
    func batchOfGuesses() async throws {
        let harness = try await DaemonHarness(access: RPCAccess(unauthorizedDelay: Self.delay))
        defer { Task { await harness.stop() } }
        let count = 40
        let calls =
            (0..<count - 1).map { Self.guess($0, token: "guess-\($0)") } + [
                Self.guess(count - 1, token: DaemonHarness.secret)
            ]
        var started = ContinuousClock.now
        let batch = try await harness.post(.array(calls))
        #expect(ContinuousClock.now - started >= Self.delay * (count - 1))
        #expect(batch.json?.array?.count == count)

        let inner: [JSON] = (0..<count).map { index in
            let token = index == count - 1 ? DaemonHarness.secret : "guess-\(index)"
            return ["methodName": "aria2.getVersion", "params": [.string("token:\(token)")]]
        }
        started = ContinuousClock.now
        let multicall = try await harness.post(
            ["jsonrpc": "2.0", "id": 1, "method": "system.multicall", "params": [.array(inner)]])
        #expect(ContinuousClock.now - started >= Self.delay * (count - 1))
        #expect(multicall.json?.object?["result"]?.array?.count == count)
    }

    @Test("guesses sent back to back on one WebSocket are answered one after another, in order")
    func webSocketGuesses() async throws {
        let harness = try await DaemonHarness(access: RPCAccess(unauthorizedDelay: Self.delay))
        defer { Task { await harness.stop() } }
        let socket = try await WebSocketClient.open(port: harness.port, headers: [("Host", harness.host)])
        #expect(socket.upgraded)
        let count = 30
        let started = ContinuousClock.now
        for index in 0..<count {
            socket.send(
                Self.guess(index, token: index == count - 1 ? DaemonHarness.secret : "guess-\(index)").encoded())
        }
        try await eventually("every guess answered", within: .seconds(60)) { socket.messages.count == count }
        #expect(ContinuousClock.now - started >= Self.delay * (count - 1))
        #expect(socket.messages.map { $0.object?["id"] } == (0..<count).map { JSON.int(Int64($0)) })
        // Reading goes on once the guesses are answered: a right call is answered at once.
        socket.send(Self.guess(count, token: DaemonHarness.secret).encoded())
        try await eventually("answered") { socket.messages.count == count + 1 }
    }

    @Test("guesses spread over parallel connections wait for each other: one answer per hold-back in all")
    func parallelConnections() async throws {
        let harness = try await DaemonHarness(access: RPCAccess(unauthorizedDelay: Self.delay))
        defer { Task { await harness.stop() } }
        let count = 12
        let started = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<count {
                group.addTask { _ = try await harness.post(Self.guess(index, token: "guess-\(index)")) }
            }
            try await group.waitForAll()
        }
        #expect(ContinuousClock.now - started >= Self.delay * count)
        // A right secret is never held back behind them.
        let right = ContinuousClock.now
        _ = try await harness.call("aria2.getVersion")
        #expect(ContinuousClock.now - right < .seconds(5))
    }

    @Test("a request that stops halfway is closed after the request timeout; a body over the limit is refused at once")
    func stalledRequests() async throws {
        // Long enough for a loaded machine to answer a request in time; the too large one is answered well before.
        let harness = try await DaemonHarness(access: RPCAccess(requestTimeout: .seconds(3)))
        defer { Task { await harness.stop() } }
        let (port, host) = (harness.port, harness.host)
        let stalled = try await sendUntilClosed(
            port: port, "POST /jsonrpc HTTP/1.1\r\nHost: \(host)\r\nContent-Length: 100\r\n\r\n[[[[", waiting: 20)
        #expect(stalled == [], "a stalled request's connection was neither closed nor answered with nothing")
        // An idle connection too, once a request has been answered on it.
        let idle = try await sendUntilClosed(port: port, "GET / HTTP/1.1\r\nHost: \(host)\r\n\r\n", waiting: 20).map {
            String(decoding: $0, as: UTF8.self)
        }
        #expect(idle?.hasPrefix("HTTP/1.1 200") == true)
        // A head that says the body is too large is answered at once, before any of the body.
        let tooLarge = try await sendUntilClosed(
            port: port, "POST /jsonrpc HTTP/1.1\r\nHost: \(host)\r\nContent-Length: 99999999\r\n\r\n", waiting: 1.5
        ).map { String(decoding: $0, as: UTF8.self) }
        #expect(tooLarge?.hasPrefix("HTTP/1.1 413") == true, "\(tooLarge ?? "no answer before the timeout")")
    }

    @Test("connections beyond the limit are closed as soon as they are accepted; a closed one frees its place")
    func connectionLimit() async throws {
        let harness = try await DaemonHarness(access: RPCAccess(maxConnections: 3))
        defer { Task { await harness.stop() } }
        let port = harness.port
        let held = try (0..<3).map { _ in try connectedLoopbackSocket(port: port) }
        // The server has counted them once each answers a request.
        for fd in held {
            let answer = try await onOwnThread { () -> String in
                writeAll(fd, Array("GET / HTTP/1.1\r\nHost: \(harness.host)\r\n\r\n".utf8))
                var buffer = [UInt8](repeating: 0, count: 4096)
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                return String(decoding: buffer.prefix(max(count, 0)), as: UTF8.self)
            }
            #expect(answer.hasPrefix("HTTP/1.1 200"))
        }
        let refused = try await sendUntilClosed(
            port: port, "GET / HTTP/1.1\r\nHost: \(harness.host)\r\n\r\n", waiting: 20)
        #expect(refused == [], "a connection over the limit was answered")
        for fd in held { close(fd) }
        try await eventuallyAsync("a place free again") {
            (try? await RawHTTP.send(port: port, method: "GET", path: "/", headers: [("Host", harness.host)]))?
                .status == 200
        }
    }

    @Test("the session cookie, which another local program's page receives too, is not enough to call the daemon")
    func cookieAtAnotherPort() async throws {
        try await withDashboard(.chromium) { harness, other, browser in
            // A cookie goes to every port of its host: a page of another program on loopback receives it.
            try await browser.open(other.url(path: "/bytes/page", query: ["size": "10"]).absoluteString)
            try await eventually("the other program asked") { !other.stats.requests.isEmpty }
            let cookie = try #require(
                other.stats.requests.compactMap(\.cookie).first { $0.contains("haul_session_\(harness.port)=") })
            // With it alone, that program is not signed in, gets no token, and its calls are refused.
            let state = try await RawHTTP.send(
                port: harness.port, method: "GET", path: "/session",
                headers: [("Host", harness.host), ("Cookie", cookie)])
            #expect(state.json?.object?["signedIn"] == false && state.json?.object?["csrf"] == nil)
            let call = try await harness.post(
                ["jsonrpc": "2.0", "id": 1, "method": "aria2.addUri", "params": [["http://127.0.0.1:9/x"]]],
                headers: [("Cookie", cookie), ("X-Haul-CSRF", "")])
            #expect(call.json?.object?["error"]?.object?["message"] == "Unauthorized")
            // The dashboard, opened again, is still signed in: it kept its token.
            try await browser.open("http://\(harness.host)/")
            try await browser.waitUntil("signed in again", "return !document.getElementById('app').hidden")
        }
    }
}
