import HaulTestServer
import HaulTestSupport
import Testing

@Suite(.timeLimit(.minutes(1)))
struct TestServerStatsTests {
    @Test func holdGatesMakeInFlightCountsDeterministic() async throws {
        try await TestServer.withRunning { server in
            let count = 5
            try await withThrowingTaskGroup(of: RawResponse.self) { group in
                for index in 0..<count {
                    group.addTask {
                        try await RawHTTPClient.get("/bytes/held\(index)?size=10&hold=g", port: server.port)
                    }
                }
                try await eventually("requests held at the gate") { server.heldCount(at: "g") == count }
                #expect(server.stats.inFlight == count)
                server.openGate("g")
                for try await response in group { #expect(response.status == 200) }
            }
            try await eventually("no request in flight") { server.stats.inFlight == 0 }
            #expect(server.stats.maxInFlight == count)
            // An open gate lets later holders straight through.
            let later = try await RawHTTPClient.get("/bytes/late?size=1&hold=g", port: server.port)
            #expect(later.status == 200)
        }
    }

    @Test func pathsAreCountedUnlessTurnedOffAndCountedFaultsStillCount() async throws {
        for counting in [true, false] {
            let configuration = TestServer.Configuration(maxRecordedRequests: 0, countsRequestsByPath: counting)
            try await TestServer.withRunning(configuration) { server in
                for index in 0..<3 {
                    let response = try await RawHTTPClient.get("/bytes/p\(index)?size=1", port: server.port)
                    #expect(response.status == 200)
                }
                // `fail=K` counts per path whatever the setting: the first request fails, the second does not.
                let failed = try await RawHTTPClient.get("/bytes/f?size=1&fail=1", port: server.port)
                let passed = try await RawHTTPClient.get("/bytes/f?size=1&fail=1", port: server.port)
                #expect(failed.status == 503 && passed.status == 200)
                #expect(server.stats.requestCount == 5)
                #expect(server.stats.requests.isEmpty)
                #expect(server.stats.requestsByPath.count == (counting ? 4 : 0))
            }
        }
    }

    @Test func maxInFlightIsTrackedPerHost() async throws {
        try await TestServer.withRunning { server in
            let port = server.port
            try await withThrowingTaskGroup(of: RawResponse.self) { group in
                for index in 0..<3 {
                    group.addTask { try await RawHTTPClient.get("/bytes/a\(index)?hold=h", port: port) }
                }
                group.addTask { try await RawHTTPClient.get("/bytes/b?hold=h", port: port, host: "localhost:\(port)") }
                try await eventually("requests held at the gate") { server.heldCount(at: "h") == 4 }
                server.openGate("h")
                for try await _ in group {}
            }
            let stats = server.stats
            #expect(stats.maxInFlightByHost["127.0.0.1:\(port)"] == 3)
            #expect(stats.maxInFlightByHost["localhost:\(port)"] == 1)
            #expect(stats.maxInFlight == 4)
        }
    }

    @Test func requestLogKeepsArrivalOrderAndHeaders() async throws {
        try await TestServer.withRunning { server in
            _ = try await RawHTTPClient.get(
                "/bytes/one?size=3", port: server.port,
                headers: [
                    ("Cookie", "c=1"), ("Range", "bytes=0-0"), ("If-Range", "\"e\""), ("Authorization", "Basic x"),
                ])
            _ = try await RawHTTPClient.get("/bytes/two?size=4", port: server.port, method: "HEAD")
            let log = server.stats.requests
            #expect(log.map(\.target) == ["/bytes/one?size=3", "/bytes/two?size=4"])
            #expect(log.map(\.method) == ["GET", "HEAD"])
            #expect(log[0].cookie == "c=1" && log[0].range == "bytes=0-0" && log[0].ifRange == "\"e\"")
            #expect(log[0].authorization == "Basic x")
            #expect(log[1].authorization == nil && log[1].cookie == nil)
            #expect(log[0].host == "127.0.0.1:\(server.port)")
        }
    }

    @Test func bodyBytesAreCountedPerPathAndResetStatsClears() async throws {
        try await TestServer.withRunning { server in
            _ = try await RawHTTPClient.get("/bytes/x?size=1000", port: server.port)
            _ = try await RawHTTPClient.get("/bytes/y?size=500", port: server.port, headers: [("Range", "bytes=0-99")])
            var stats = server.stats
            #expect(stats.bodyBytesSent == 1100)
            #expect(stats.bodyBytesByPath == ["/bytes/x": 1000, "/bytes/y": 100])
            #expect(stats.requestsByPath == ["/bytes/x": 1, "/bytes/y": 1])
            // The client has the whole answer before the server counts the request ended: a reset keeps what is
            // still in flight as its maximum.
            try await eventually("no request in flight") { server.stats.inFlight == 0 }
            server.resetStats()
            stats = server.stats
            #expect(
                stats.requestCount == 0 && stats.bodyBytesSent == 0 && stats.requests.isEmpty && stats.maxInFlight == 0)
        }
    }

    @Test func resetStatsRearmsGatesAndPerPathCounters() async throws {
        try await TestServer.withRunning { server in
            server.openGate("r")
            _ = try await RawHTTPClient.get("/bytes/r?size=1&hold=r", port: server.port)
            let failed = try await RawHTTPClient.get("/bytes/f?size=1&fail=1", port: server.port)
            let passed = try await RawHTTPClient.get("/bytes/f?size=1&fail=1", port: server.port)
            #expect(failed.status == 503 && passed.status == 200)
            server.resetStats()
            let failedAgain = try await RawHTTPClient.get("/bytes/f?size=1&fail=1", port: server.port)
            #expect(failedAgain.status == 503)
            try await withThrowingTaskGroup(of: RawResponse.self) { group in
                group.addTask { try await RawHTTPClient.get("/bytes/r?size=1&hold=r", port: server.port) }
                try await eventually("requests held at the gate") { server.heldCount(at: "r") == 1 }
                server.openGate("r")
                for try await response in group { #expect(response.status == 200) }
            }
        }
    }

    @Test func closeGateMakesNewHoldersWait() async throws {
        try await TestServer.withRunning { server in
            server.openGate("c")
            server.closeGate("c")
            try await withThrowingTaskGroup(of: RawResponse.self) { group in
                group.addTask { try await RawHTTPClient.get("/bytes/c?size=1&hold=c", port: server.port) }
                try await eventually("requests held at the gate") { server.heldCount(at: "c") == 1 }
                #expect(server.stats.inFlight == 1)
                server.openGate("c")
                for try await response in group { #expect(response.status == 200) }
            }
        }
    }

    @Test func shutdownReleasesHeldAndStalledConnections() async throws {
        let server = TestServer()
        try await server.start()
        let port = server.port
        try await withThrowingTaskGroup(of: RawResponse.self) { group in
            group.addTask { try await RawHTTPClient.get("/bytes/h?hold=never", port: port) }
            group.addTask { try await RawHTTPClient.get("/bytes/s?size=100&stall=forever", port: port) }
            try await eventually("requests held at the gate") {
                server.heldCount(at: "never") == 1 && server.stats.inFlight == 2
            }
            try await server.shutdown()
            for try await response in group { #expect(response.connectionClosed) }
        }
    }
}
