import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

@Suite(.timeLimit(.minutes(1)))
struct FaultTests {
    @Test func fixedStatusWithRetryAfterSeconds() async throws {
        try await TestServer.withRunning { server in
            let response = try await RawHTTPClient.get("/bytes/a?status=503&retryAfter=3", port: server.port)
            #expect(response.status == 503)
            #expect(response.header("Retry-After") == "3")
        }
    }

    @Test func failFirstRequestsThenSucceed() async throws {
        try await TestServer.withRunning { server in
            let target = "/bytes/f?size=100&fail=2&failStatus=500&retryAfter=7&retryAfterDate=1"
            let first = try await RawHTTPClient.get(target, port: server.port)
            let second = try await RawHTTPClient.get(target, port: server.port)
            let third = try await RawHTTPClient.get(target, port: server.port)
            #expect([first.status, second.status, third.status] == [Int]([500, 500, 200]))
            #expect(first.header("Retry-After")?.hasSuffix(" GMT") == true)
            #expect(third.body == TestServer.expectedBytes(name: "f", size: 100))
            #expect(server.stats.requests(toPath: "/bytes/f") == 3)
        }
    }

    @Test func delayHoldsTheHead() async throws {
        try await TestServer.withRunning { server in
            let clock = ContinuousClock()
            let start = clock.now
            let response = try await RawHTTPClient.get("/bytes/d?size=10&delay=200", port: server.port)
            #expect(response.status == 200)
            #expect(clock.now - start >= .milliseconds(190))
        }
    }

    @Test func rateThrottlesTheBody() async throws {
        try await TestServer.withRunning { server in
            let clock = ContinuousClock()
            let start = clock.now
            // 100 KB at 200 KB/s: at least half a second.
            let response = try await RawHTTPClient.get("/bytes/t?size=100000&rate=200000", port: server.port)
            #expect(response.body == TestServer.expectedBytes(name: "t", size: 100_000))
            #expect(clock.now - start >= .milliseconds(475))
        }
    }

    @Test func cutAfterClosesMidBodyAndCutTimesLetsAResumeSucceed() async throws {
        try await TestServer.withRunning { server in
            let target = "/bytes/c?size=100000&cutAfter=30000&cutTimes=1"
            let cut = try await RawHTTPClient.get(target, port: server.port)
            #expect(cut.status == 200)
            #expect(cut.contentLength == 100_000)
            #expect(cut.body == TestServer.expectedBytes(name: "c", size: 100_000, range: 0..<30000))
            #expect(cut.connectionClosed && !cut.isComplete)
            let resumed = try await RawHTTPClient.get(target, port: server.port, headers: [("Range", "bytes=30000-")])
            #expect(resumed.status == 206)
            #expect(resumed.body == TestServer.expectedBytes(name: "c", size: 100_000, range: 30000..<100_000))
        }
    }

    @Test func stallPausesTheBodyThenResumes() async throws {
        try await TestServer.withRunning { server in
            let clock = ContinuousClock()
            let start = clock.now
            let response = try await RawHTTPClient.get(
                "/bytes/s?size=10000&stallAfter=5000&stall=200", port: server.port)
            #expect(response.body == TestServer.expectedBytes(name: "s", size: 10000))
            #expect(clock.now - start >= .milliseconds(190))
        }
    }

    @Test func stallForeverLastsUntilTheClientLeaves() async throws {
        try await TestServer.withRunning { server in
            let partial = try await RawHTTPClient.get(
                "/bytes/s?size=10000&stallAfter=5000&stall=forever", port: server.port, stopAfterBodyBytes: 5000)
            #expect(partial.body == TestServer.expectedBytes(name: "s", size: 10000, range: 0..<5000))
            // The client closed its connection when it stopped reading; only then does the request end.
            try await eventually("no request in flight") { server.stats.inFlight == 0 }
            #expect(server.stats.bodyBytesSent == 5000)
        }
    }

    @Test func shortByAnnouncesMoreThanItSends() async throws {
        try await TestServer.withRunning { server in
            let response = try await RawHTTPClient.get("/bytes/b?size=1000&shortBy=100", port: server.port)
            #expect(response.contentLength == 1000)
            #expect(response.body.count == 900)
            #expect(response.connectionClosed)
        }
    }

    @Test func ignoreRangeSendsTheFullBody() async throws {
        try await TestServer.withRunning { server in
            let response = try await RawHTTPClient.get(
                "/bytes/g?size=1000&ignoreRange=1", port: server.port, headers: [("Range", "bytes=10-")])
            #expect(response.status == 200)
            #expect(response.body.count == 1000)
        }
    }

    @Test func changeAfterFirstBumpsContentAndETag() async throws {
        try await TestServer.withRunning { server in
            let target = "/bytes/v?size=1000&changeAfterFirst=1"
            let first = try await RawHTTPClient.get(target, port: server.port)
            let second = try await RawHTTPClient.get(
                target, port: server.port, headers: [("Range", "bytes=10-"), ("If-Range", first.header("ETag")!)])
            #expect(first.body == TestServer.expectedBytes(name: "v", size: 1000, version: 0))
            #expect(second.status == 200)
            #expect(second.header("ETag") == TestServer.entityTag(name: "v", size: 1000, version: 1))
            #expect(second.header("ETag") != first.header("ETag"))
            #expect(second.body == TestServer.expectedBytes(name: "v", size: 1000, version: 1))
        }
    }

    @Test(arguments: [301, 302, 303, 307, 308])
    func redirectChainCountsDown(status: Int) async throws {
        try await TestServer.withRunning { server in
            let response = try await RawHTTPClient.get(
                "/bytes/r?size=10&redirects=2&redirectStatus=\(status)", port: server.port)
            #expect(response.status == status)
            #expect(
                response.header("Location")
                    == "http://127.0.0.1:\(server.port)/bytes/r?size=10&redirects=1&redirectStatus=\(status)")
            let last = try await RawHTTPClient.get("/bytes/r?size=10&redirects=0", port: server.port)
            #expect(last.status == 200)
        }
    }

    @Test func redirectLoopAndRedirectTo() async throws {
        try await TestServer.withRunning { server in
            let loop = try await RawHTTPClient.get(
                "/bytes/l?redirectLoop=1", port: server.port, host: "localhost:\(server.port)")
            #expect(loop.status == 302)
            #expect(loop.header("Location") == "http://localhost:\(server.port)/bytes/l?redirectLoop=1")
            let away = try await RawHTTPClient.get(
                "/bytes/l?redirectTo=file%3A%2F%2F%2Fetc%2Fpasswd", port: server.port)
            #expect(away.header("Location") == "file:///etc/passwd")
        }
    }

    @Test func dispositionIsSentVerbatim() async throws {
        try await TestServer.withRunning { server in
            let value = "attachment; filename=\"../../x\""
            let encoded = value.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let response = try await RawHTTPClient.get("/bytes/x?size=1&disposition=\(encoded)", port: server.port)
            #expect(response.header("Content-Disposition") == value)
        }
    }

    @Test func requireAuthDemandsTheExactAuthorization() async throws {
        try await TestServer.withRunning { server in
            let target = "/bytes/a?size=5&requireAuth=Bearer%20t0k"
            let missing = try await RawHTTPClient.get(target, port: server.port)
            let wrong = try await RawHTTPClient.get(
                target, port: server.port, headers: [("Authorization", "Bearer no")])
            let right = try await RawHTTPClient.get(
                target, port: server.port, headers: [("Authorization", "Bearer t0k")])
            #expect(missing.status == 401 && wrong.status == 401)
            #expect(missing.header("WWW-Authenticate") != nil)
            #expect(right.status == 200)
            #expect(server.stats.requests.map(\.authorization) == [nil, "Bearer no", "Bearer t0k"])
        }
    }

    @Test func gzipWrapsTheBodyInStoredDeflateBlocks() async throws {
        try await TestServer.withRunning { server in
            let response = try await RawHTTPClient.get(
                "/bytes/z?size=200000&gzip=1", port: server.port, headers: [("Range", "bytes=5-")])
            #expect(response.status == 200)
            #expect(response.header("Content-Encoding") == "gzip")
            #expect(try GzipTests.gunzipStored(response.body) == TestServer.expectedBytes(name: "z", size: 200_000))
        }
    }

    @Test func dropConnectionSendsNothing() async throws {
        try await TestServer.withRunning { server in
            let response = try await RawHTTPClient.get("/bytes/a?dropConnection=1", port: server.port)
            #expect(response.status == 0)
            #expect(response.connectionClosed)
        }
    }

    @Test func headOnlySendsTheHeadAndKeepsTheRequestInFlight() async throws {
        try await TestServer.withRunning { server in
            let response = try await RawHTTPClient.get(
                "/bytes/a?size=100&headOnly=1", port: server.port, stopAfterBodyBytes: 0)
            #expect(response.status == 200)
            #expect(response.contentLength == 100)
            #expect(response.body.isEmpty)
            try await eventually("no request in flight") { server.stats.inFlight == 0 }
        }
    }

    @Test func closeAnswersWholeThenClosesTheConnection() async throws {
        try await TestServer.withRunning { server in
            // Pipelined: the second request is never answered, as the server closed after the first.
            let responses = try await RawHTTPClient.send(
                [RawRequest("GET", "/bytes/a?size=100&close=1"), RawRequest("GET", "/bytes/b?size=10")],
                port: server.port)
            try #require(responses.count == 2)
            #expect(responses[0].status == 200 && responses[0].isComplete)
            #expect(responses[0].header("Connection") == "close")
            #expect(responses[0].body == TestServer.expectedBytes(name: "a", size: 100))
            #expect(responses[1].status == 0 && responses[1].connectionClosed)
            // Without it the connection stays open for the next request.
            let kept = try await RawHTTPClient.send(
                [RawRequest("GET", "/bytes/a?size=100"), RawRequest("GET", "/bytes/b?size=10")], port: server.port)
            #expect(kept.map(\.status) == [200, 200] && kept[0].header("Connection") == nil)
        }
    }

    @Test func rulesApplyByPathPrefixAndHostAndQueryWins() async throws {
        try await TestServer.withRunning { server in
            var fault = Fault()
            fault.status = 500
            server.addRule(FaultRule(pathPrefix: "/bytes/ruled", host: "localhost:\(server.port)", fault: fault))
            let otherHost = try await RawHTTPClient.get("/bytes/ruled?size=1", port: server.port)
            let matching = try await RawHTTPClient.get(
                "/bytes/ruled-too?size=1", port: server.port, host: "localhost:\(server.port)")
            let overridden = try await RawHTTPClient.get(
                "/bytes/ruled?size=1&status=418", port: server.port, host: "localhost:\(server.port)")
            #expect(otherHost.status == 200)
            #expect(matching.status == 500)
            #expect(overridden.status == 418)
            server.removeAllRules()
            let cleared = try await RawHTTPClient.get(
                "/bytes/ruled?size=1", port: server.port, host: "localhost:\(server.port)")
            #expect(cleared.status == 200)
        }
    }
}
