import Foundation
import Haul
import HaulDaemon
import HaulTestServer
import HaulTestSupport
import Testing

/// The options of `addUri` that replace the downloader's settings for one download: retries, timeouts, proxy, TLS,
/// revalidation and the file's time, each shown to change what the download does against a real loopback server.
@Suite("haul daemon: per-download settings", .timeLimit(.minutes(2)))
struct DaemonOptionTests {
    @Test("max-tries and retry-wait: as many requests as tries, aria2's fixed wait between them")
    func retries() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness()
            let once = try #require(
                try await harness.call(
                    "aria2.addUri",
                    [
                        [.string(server.url(path: "/bytes/once", query: ["status": "503"]).absoluteString)],
                        ["max-tries": "1"],
                    ]
                ).string)
            try await harness.waitFor(once, status: "error")
            #expect(server.stats.requests.filter { $0.path == "/bytes/once" }.count == 1)
            let twice = try #require(
                try await harness.call(
                    "aria2.addUri",
                    [
                        [.string(server.url(path: "/bytes/twice", query: ["status": "503"]).absoluteString)],
                        ["max-tries": "3", "retry-wait": "7"],
                    ]
                ).string)
            try await harness.waitFor(twice, status: "error")
            #expect(server.stats.requests.filter { $0.path == "/bytes/twice" }.count == 3)
            #expect(harness.clock.recorded == [.seconds(7), .seconds(7)])
            let options = try await harness.call("aria2.getOption", [.string(twice)]).object
            #expect(options?["max-tries"] == "3" && options?["retry-wait"] == "7")
            await harness.stop()
        }
    }

    @Test("max-connection-per-server: split's connections, at most that many to the one server, as aria2 opens them")
    func connectionsPerServer() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness()
            // Slow enough that more connections would be worth it, were they allowed.
            let url = server.url(path: "/bytes/one-server.bin", query: ["size": String(3 << 20), "rate": "2000000"])
            let gid = try #require(
                try await harness.call(
                    "aria2.addUri",
                    [
                        [.string(url.absoluteString)],
                        ["split": "3", "max-connection-per-server": "1", "min-split-size": "1M"],
                    ]
                ).string)
            try await harness.waitFor(gid, status: "complete")
            #expect(server.stats.maxInFlight == 1, "\(server.stats.requests.map(\.path))")
            // The same with two per server: the file comes over two at once. Each response stalls for 1.5 s after its
            // first 64 KiB: the first's speed then calls for more connections whenever a loaded machine weighs it, and
            // the second stalls as long, in flight beside the first.
            let slower = server.url(
                path: "/bytes/one-server.bin",
                query: ["size": String(3 << 20), "rate": "2000000", "stallAfter": "65536", "stall": "1500"])
            let two = try #require(
                try await harness.call(
                    "aria2.addUri",
                    [
                        [.string(slower.absoluteString)],
                        ["split": "3", "max-connection-per-server": "2", "min-split-size": "1M", "out": "two.bin"],
                    ]
                ).string)
            let began = ContinuousClock.now
            try await harness.waitFor(two, status: "complete")
            let requests = server.stats.requests.filter { $0.receivedAt >= began }.map {
                "\($0.range ?? "-") at \($0.receivedAt - began)"
            }
            #expect(server.stats.maxInFlight == 2, "\(requests)")
            await harness.stop()
        }
    }

    @Test("timeout: a transfer that stops sending fails after the download's own seconds, saying so")
    func stallTimeout() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness()
            let url = server.url(
                path: "/bytes/stall", query: ["size": "100000", "stallAfter": "1000", "stall": "forever"])
            let gid = try #require(
                try await harness.call(
                    "aria2.addUri", [[.string(url.absoluteString)], ["timeout": "1", "max-tries": "1"]]
                ).string)
            try await harness.waitFor(gid, status: "error")
            let status = try await harness.call("aria2.tellStatus", [.string(gid), ["errorMessage"]])
            let message = status.object?["errorMessage"]?.string ?? ""
            #expect(
                message.contains("no data for 1.0 seconds") || message.contains("no data for 1 second"), "\(message)")
            await harness.stop()
        }
    }

    @Test("connect-timeout: a server that never finishes the TLS handshake fails the download after its own seconds")
    func connectTimeout() async throws {
        // The raw server waits for an HTTP head, which a TLS ClientHello never ends with: the handshake hangs.
        try await RawServer.withRunning(responses: [[]]) { port in
            let harness = try await DaemonHarness()
            let gid = try #require(
                try await harness.call(
                    "aria2.addUri",
                    [[.string("https://127.0.0.1:\(port)/silent")], ["connect-timeout": "1", "max-tries": "1"]]
                ).string)
            try await harness.waitFor(gid, status: "error")
            let message = try await harness.call("aria2.tellStatus", [.string(gid), ["errorMessage"]])
            #expect("\(message)".contains("timed out connecting to 127.0.0.1:\(port) after 1 s"), "\(message)")
            await harness.stop()
        }
    }

    @Test("check-certificate and ca-certificate: an https server the daemon does not trust, trusted for one download")
    func tls() async throws {
        try await TestServer.withRunning(TestTLS.server()) { server in
            let harness = try await DaemonHarness()
            func add(_ name: String, _ options: JSON) async throws -> String {
                let url = server.url(path: "/bytes/\(name)", query: ["size": "2000"]).absoluteString
                return try #require(try await harness.call("aria2.addUri", [[.string(url)], options]).string)
            }
            let untrusted = try await add("untrusted", ["max-tries": "1"])
            let withCA = try await add("ca", ["ca-certificate": .string(TestTLS.caFile)])
            let unchecked = try await add("unchecked", ["check-certificate": "false"])
            try await harness.waitFor(untrusted, status: "error")
            try await harness.waitFor(withCA, status: "complete")
            try await harness.waitFor(unchecked, status: "complete")
            #expect(Set(harness.root.contents()).isSuperset(of: ["ca", "unchecked"]))
            #expect(!harness.root.contents().contains("untrusted"))
            await harness.stop()
        }
    }

    @Test("all-proxy: the download goes to the proxy given, whose password is never shown")
    func proxy() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness()
            // Nothing listens there: the download fails on the proxy, which it names.
            let port = try freeLoopbackPort()
            let gid = try #require(
                try await harness.call(
                    "aria2.addUri",
                    [
                        [.string(server.url(path: "/bytes/p").absoluteString)],
                        ["all-proxy": .string("http://user:proxy-pass-1@127.0.0.1:\(port)"), "max-tries": "1"],
                    ]
                ).string)
            try await harness.waitFor(gid, status: "error")
            #expect(server.stats.requests.isEmpty)
            let status = try await harness.call("aria2.tellStatus", [.string(gid)])
            #expect(status.object?["errorMessage"]?.string?.contains("127.0.0.1:\(port)") == true, "\(status)")
            let options = try await harness.call("aria2.getOption", [.string(gid)])
            #expect(options.object?["all-proxy"] == .string("http://user:...@127.0.0.1:\(port)"))
            #expect(!"\(status)\(options)".contains("proxy-pass-1"))
            // And through no proxy at all: an empty value.
            let direct = try #require(
                try await harness.call(
                    "aria2.addUri", [[.string(server.url(path: "/bytes/d").absoluteString)], ["all-proxy": ""]]
                ).string)
            try await harness.waitFor(direct, status: "complete")
            await harness.stop()
        }
    }

    @Test("remote-time: the file takes the server's Last-Modified unless it is false")
    func remoteTime() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness()
            for (name, remote) in [("remote", "true"), ("local", "false")] {
                let gid = try #require(
                    try await harness.call(
                        "aria2.addUri",
                        [
                            [.string(server.url(path: "/bytes/\(name)").absoluteString)],
                            ["remote-time": .string(remote)],
                        ]
                    ).string)
                try await harness.waitFor(gid, status: "complete")
            }
            func age(_ name: String) throws -> TimeInterval {
                let attributes = try FileManager.default.attributesOfItem(atPath: harness.root.url.path + "/" + name)
                return -((attributes[.modificationDate] as? Date) ?? .distantPast).timeIntervalSinceNow
            }
            #expect(try age("remote") > 86_400)
            #expect(try age("local") < 3_600)
            await harness.stop()
        }
    }

    @Test("conditional-get: a file the daemon completed is asked for again with its validator, and kept on 304")
    func conditionalGet() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness(journal: MemoryJournal())
            let url = server.url(path: "/bytes/c").absoluteString
            for conditional in ["false", "true"] {
                let gid = try #require(
                    try await harness.call(
                        "aria2.addUri",
                        [
                            [.string(url)],
                            ["out": "c", "allow-overwrite": "true", "conditional-get": .string(conditional)],
                        ]
                    ).string)
                try await harness.waitFor(gid, status: "complete")
            }
            let requests = server.stats.requests.filter { $0.path == "/bytes/c" }
            #expect(requests.count == 2)
            #expect(requests.first?.value(forHeader: "if-none-match") == nil)
            #expect(requests.last?.value(forHeader: "if-none-match") != nil)
            #expect(harness.root.contents().filter { !$0.hasPrefix(".") } == ["c"])
            await harness.stop()
        }
    }

    @Test(
        "bad values are refused, naming the option",
        arguments: [
            ("max-tries", "-1"), ("retry-wait", "601"), ("timeout", "0"), ("connect-timeout", "601"),
            ("all-proxy", "ftp://127.0.0.1:1"), ("ca-certificate", "/nonexistent/ca.pem"),
            ("check-certificate", "maybe"), ("conditional-get", "yes"), ("remote-time", "1"),
            ("all-proxy-user", "u"),
        ])
    func badValues(name: String, value: String) async throws {
        let harness = try await DaemonHarness()
        await #expect {
            try await harness.call("aria2.addUri", [["http://127.0.0.1:1/x"], .object([name: .string(value)])])
        } throws: { error in
            let message = (error as? CallError)?.message ?? ""
            return message.contains(name) || (name == "all-proxy" && message.contains("proxy"))
        }
        #expect(try await harness.call("aria2.tellStopped", [0, 10]) == [])
        await harness.stop()
    }

    @Test("a refused URI's password and a malformed secret header's value are not in the answer")
    func refusalsHideSecrets() async throws {
        let harness = try await DaemonHarness()
        let secret = "hunter2-s3cret"
        for (uris, options) in [
            ([JSON.string("ftp://alice:\(secret)@127.0.0.1:1/x")], [:] as JSON),
            (["http://127.0.0.1:1/x"], ["header": .array([.string("Authorization Bearer \(secret)")])]),
        ] {
            await #expect {
                try await harness.call("aria2.addUri", [.array(uris), options])
            } throws: { error in
                let message = (error as? CallError)?.message ?? ""
                return !message.isEmpty && !message.contains(secret)
            }
        }
        await harness.stop()
    }
}
