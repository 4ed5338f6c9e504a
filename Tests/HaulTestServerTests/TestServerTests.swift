import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

@Suite(.timeLimit(.minutes(1)))
struct TestServerTests {
    @Test func generatedBytesMatchExpectedBytesAndAreDeterministic() async throws {
        try await TestServer.withRunning { server in
            let first = try await RawHTTPClient.get("/bytes/alpha?size=300000", port: server.port)
            let second = try await RawHTTPClient.get("/bytes/alpha?size=300000", port: server.port)
            #expect(first.status == 200)
            #expect(first.body.count == 300_000)
            #expect(first.body == second.body)
            #expect(first.body == TestServer.expectedBytes(name: "alpha", size: 300_000))
            #expect(first.header("ETag") == TestServer.entityTag(name: "alpha", size: 300_000))
            #expect(first.header("Accept-Ranges") == "bytes")
            #expect(first.header("Last-Modified") != nil)
        }
    }

    @Test func expectedBytesArePositionDependentAndNameDependent() {
        let bytes = TestServer.expectedBytes(name: "n", size: 3 << 16)
        #expect(Array(bytes[0..<65536]) != Array(bytes[65536..<131072]))
        #expect(TestServer.expectedBytes(name: "m", size: 1000) != Array(bytes[0..<1000]))
        #expect(TestServer.expectedBytes(name: "n", size: 3 << 16, range: 70000..<80000) == Array(bytes[70000..<80000]))
        #expect(TestServer.expectedBytes(name: "n", size: 10, version: 1) != Array(bytes[0..<10]))
    }

    @Test(arguments: [
        ("bytes=100-199", 206, 100..<200),
        ("bytes=999990-", 206, 999_990..<1_000_000),
        ("bytes=-10", 206, 999_990..<1_000_000),
        ("bytes=0-5000000", 206, 0..<1_000_000),
        ("bytes=0-0", 206, 0..<1),
    ])
    func singleRanges(header: String, status: Int, expected: Range<Int>) async throws {
        try await TestServer.withRunning { server in
            let response = try await RawHTTPClient.get(
                "/bytes/r?size=1000000", port: server.port, headers: [("Range", header)])
            #expect(response.status == status)
            #expect(response.body == TestServer.expectedBytes(name: "r", size: 1_000_000, range: expected))
            #expect(
                response.header("Content-Range") == "bytes \(expected.lowerBound)-\(expected.upperBound - 1)/1000000")
            #expect(response.contentLength == expected.count)
        }
    }

    @Test func unsatisfiableRangeIs416WithSize() async throws {
        try await TestServer.withRunning { server in
            let response = try await RawHTTPClient.get(
                "/bytes/r?size=100", port: server.port, headers: [("Range", "bytes=100-")])
            #expect(response.status == 416)
            #expect(response.header("Content-Range") == "bytes */100")
            #expect(response.body.isEmpty)
        }
    }

    @Test func multipleRangesGetTheFullBody() async throws {
        try await TestServer.withRunning { server in
            let response = try await RawHTTPClient.get(
                "/bytes/r?size=100", port: server.port, headers: [("Range", "bytes=0-1,5-6")])
            #expect(response.status == 200)
            #expect(response.body.count == 100)
        }
    }

    @Test func ifRangeMatchingETagOrDateGives206AndMismatchGives200() async throws {
        try await TestServer.withRunning { server in
            let full = try await RawHTTPClient.get("/bytes/i?size=1000", port: server.port)
            let etag = try #require(full.header("ETag"))
            let date = try #require(full.header("Last-Modified"))
            for validator in [etag, date] {
                let partial = try await RawHTTPClient.get(
                    "/bytes/i?size=1000", port: server.port, headers: [("Range", "bytes=10-"), ("If-Range", validator)])
                #expect(partial.status == 206)
                #expect(partial.body.count == 990)
            }
            for validator in ["\"other\"", "W/\(etag)", "Mon, 01 Jan 2001 00:00:00 GMT"] {
                let whole = try await RawHTTPClient.get(
                    "/bytes/i?size=1000", port: server.port, headers: [("Range", "bytes=10-"), ("If-Range", validator)])
                #expect(whole.status == 200)
                #expect(whole.body.count == 1000)
            }
        }
    }

    @Test func headSendsTheSameHeadersAndNoBody() async throws {
        try await TestServer.withRunning { server in
            // HEAD then GET on one connection: a stray HEAD body would corrupt the second response.
            let responses = try await RawHTTPClient.send(
                [RawRequest("HEAD", "/bytes/h?size=5000"), RawRequest("GET", "/bytes/h?size=5000")], port: server.port)
            #expect(responses.count == 2)
            #expect(responses[0].status == 200)
            #expect(responses[0].contentLength == 5000)
            #expect(responses[0].header("ETag") == responses[1].header("ETag"))
            #expect(responses[1].body == TestServer.expectedBytes(name: "h", size: 5000))
        }
    }

    @Test func unknownPathIs404() async throws {
        try await TestServer.withRunning { server in
            let unknown = try await RawHTTPClient.get("/nothing", port: server.port)
            let noRoot = try await RawHTTPClient.get("/files/x", port: server.port)
            #expect(unknown.status == 404)
            #expect(noRoot.status == 404)
        }
    }

    @Test func keepAlivePipelinedRequestsAnswerInOrder() async throws {
        try await TestServer.withRunning { server in
            let requests = (0..<20).map { RawRequest("GET", "/bytes/p\($0)?size=\(1000 + $0)") }
            let responses = try await RawHTTPClient.send(requests, port: server.port)
            #expect(responses.count == 20)
            for (index, response) in responses.enumerated() {
                #expect(response.body == TestServer.expectedBytes(name: "p\(index)", size: 1000 + index))
            }
            #expect(server.stats.requestCount == 20)
        }
    }

    @Test func urlHelperBuildsLoopbackURLs() async throws {
        try await TestServer.withRunning { server in
            #expect(server.baseURL.absoluteString == "http://127.0.0.1:\(server.port)")
            let url = server.url(
                path: "/bytes/a", query: ["size": "10", "disposition": "attachment; filename=\"x y\""],
                host: "localhost")
            #expect(
                url.absoluteString.hasPrefix("http://localhost:\(server.port)/bytes/a?disposition=attachment%3B%20"))
        }
    }

    @Test func localhostReachesTheServerOverIPv6WhenAvailable() async throws {
        try await TestServer.withRunning { server in
            let viaIPv6 = try? await RawHTTPClient.send(
                [RawRequest("GET", "/bytes/v6?size=10")], port: server.port, address: "::1")
            // Machines without IPv6 loopback cannot connect at all; the server must still work on IPv4.
            if let response = viaIPv6?.first { #expect(response.status == 200) }
            let viaIPv4 = try await RawHTTPClient.get("/bytes/v4?size=10", port: server.port)
            #expect(viaIPv4.status == 200)
        }
    }

    @Test func parallelServersRunOnDistinctPorts() async throws {
        let ports = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<8 {
                group.addTask {
                    try await TestServer.withRunning { server in
                        let response = try await RawHTTPClient.get("/bytes/s\(index)?size=100", port: server.port)
                        #expect(response.body == TestServer.expectedBytes(name: "s\(index)", size: 100))
                        return server.port
                    }
                }
            }
            return try await group.reduce(into: Set<Int>()) { $0.insert($1) }
        }
        #expect(ports.count == 8)
    }

    @Test(.enabled(if: TestPlatform.isLinux, "counts the event loop threads in /proc/self/task"))
    func repeatedStartAndShutdownLeaveNoThreadsOrListeners() async throws {
        var lastPort = 0
        for _ in 0..<20 {
            let server = try await Self.startOutsideEphemeralRange(.init(eventLoopThreads: 1))
            lastPort = server.port
            #expect(Self.ownedEventLoopThreadCount() >= 1)  // the probe sees a running group's thread
            _ = try await RawHTTPClient.get("/bytes/z?size=10", port: server.port)
            try await server.shutdown()
        }
        // Owned event loop threads are joined by shutdown. Only threads of server-owned groups are counted:
        // the whole process's count moves with whatever other suites run in parallel.
        #expect(Self.ownedEventLoopThreadCount() == 0)
        try await eventually("port \(lastPort) released") { Self.canListen(on: lastPort) }
    }

    @Test func shutdownAfterThrowingBodyStillStops() async throws {
        struct Boom: Error {}
        // A port outside the range other tests' servers get theirs from (see startOutsideEphemeralRange).
        var port = 0
        for _ in 0..<50 {
            port = Int.random(in: 20_000..<32_000)
            do {
                try await TestServer.withRunning(.init(port: port)) { _ in throw Boom() }
            } catch is Boom {
                break
            } catch {
                continue  // that port was taken: try another
            }
        }
        try await eventually("port \(port) released") { Self.canListen(on: port) }
    }

    /// A started server on a port below Linux's ephemeral range (32768-60999), which the servers of tests running
    /// in parallel (port 0) never get: so "the port is free after shutdown" cannot be spoiled by one of them.
    static func startOutsideEphemeralRange(_ configuration: TestServer.Configuration) async throws -> TestServer {
        var lastError: any Error = CancellationError()
        for _ in 0..<50 {
            var configuration = configuration
            configuration.port = Int.random(in: 20_000..<32_000)
            let server = TestServer(configuration: configuration)
            do {
                try await server.start()
                return server
            } catch {
                lastError = error
            }
        }
        throw lastError
    }

    /// Whether a listening socket can take `port` on 127.0.0.1, i.e. no server holds it. (Connecting to check
    /// is not reliable: with nothing listening, Linux may pick that very port as the client's ephemeral port and
    /// connect the socket to itself, and the request then waits for an answer that never comes.)
    static func canListen(on port: Int) -> Bool {
        let descriptor = socket(AF_INET, streamSocket, 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var reuse: Int32 = 1  // connections of the stopped server may linger in TIME_WAIT
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &reuse, socklen_t(MemoryLayout<Int32>.size))
        let bound = withLoopbackAddress(port: port) { bind(descriptor, $0, $1) }.result
        return bound == 0 && listen(descriptor, 1) == 0
    }

    /// Threads of event loop groups a server created for itself. NIO names them `NIO-ELT-<group>-#<n>`; the
    /// shared singleton's are `NIO-SGLTN-…`, and only this suite gives servers their own group.
    static func ownedEventLoopThreadCount() -> Int {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.count { task in
            let name = try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)
            return name?.hasPrefix("NIO-ELT-") == true
        }
    }
}
