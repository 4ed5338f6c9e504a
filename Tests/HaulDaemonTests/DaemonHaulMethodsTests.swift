import Foundation
import Haul
import HaulDaemon
import HaulNIO
import HaulTestServer
import HaulTestSupport
import Testing

/// Haul's own methods beside aria2's: a host's limit and its pause, obeyed as the test server counts them, and the
/// whole history paged and searched.
@Suite("haul daemon: haul.* methods", .timeLimit(.minutes(2)))
struct DaemonHaulMethodsTests {
    @Test("getVersion lists Haul's features; haul.* methods are listed")
    func listed() async throws {
        let harness = try await DaemonHarness()
        let features = try await harness.call("aria2.getVersion").object?["enabledFeatures"]?.array ?? []
        #expect(["haul.onDownloadWaiting", "haul.hosts", "haul.history"].allSatisfy { features.contains(.string($0)) })
        let methods = try await harness.call("system.listMethods", [], token: nil).array ?? []
        #expect(
            ["haul.getHosts", "haul.changeHostOption", "haul.pauseHost", "haul.tellHistory"].allSatisfy {
                methods.contains(.string($0))
            })
        await harness.stop()
    }

    @Test("a host paused holds its downloads back, its limit lets that many run, as the server counts them")
    func hostLimitAndPause() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness(maxConcurrent: 8)
            let host = "http://localhost:\(server.port)"
            #expect(try await harness.call("haul.pauseHost", [.string(host + "/any/path")]) == "OK")
            var gids: [String] = []
            for index in 0..<4 {
                let url = server.url(path: "/bytes/h\(index)", query: ["hold": "h"], host: "localhost").absoluteString
                gids.append(try #require(try await harness.call("aria2.addUri", [[.string(url)]]).string))
            }
            let other = try #require(
                try await harness.call(
                    "aria2.addUri", [[.string(server.url(path: "/bytes/o", query: ["hold": "o"]).absoluteString)]]
                ).string)
            try await eventually("the other host's download held") { server.heldCount(at: "o") == 1 }
            #expect(server.heldCount(at: "h") == 0)
            // How long they waited depends on the machine's speed; every other member is known.
            let hosts = try #require(try await harness.call("haul.getHosts").array).map {
                JSON.object($0.object?.filter { $0.key != "oldestWait" } ?? [:])
            }
            #expect(
                hosts.contains([
                    "host": .string(host),
                    "numActive": "0", "numWaiting": "4", "maxConnections": "", "ownLimit": "false", "paused": "true",
                    "downloadSpeed": "0",
                ]), "\(hosts)")
            #expect(
                try await harness.call("haul.changeHostOption", [.string(host), ["max-connections": "2"]]) == "OK")
            #expect(try await harness.call("haul.unpauseHost", [.string(host)]) == "OK")
            try await eventually("two of the paused host's started") { server.heldCount(at: "h") == 2 }
            server.openGate("h")
            server.openGate("o")
            for gid in gids + [other] { try await harness.waitFor(gid, status: "complete") }
            #expect(server.stats.maxInFlightByHost["localhost:\(server.port)"] == 2)
            for bad: [JSON] in [
                [.string(host), ["max-connections": "0"]], [.string(host), ["speed": "1"]],
                ["ftp://example.org", ["max-connections": "1"]], ["not a host", [:]],
            ] {
                await #expect(throws: CallError.self, "\(bad)") {
                    try await harness.call("haul.changeHostOption", bad)
                }
            }
            await harness.stop()
        }
    }

    @Test("the history: newest first, paged, searched by name and URI, filtered by status, with its total")
    func history() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness(maxConcurrent: 4)
            var done: [String] = []
            for index in 0..<6 {
                let name = index % 2 == 0 ? "report-\(index).pdf" : "photo-\(index).jpg"
                let url = server.url(path: "/bytes/\(name)", query: ["size": "100"]).absoluteString
                let gid = try #require(try await harness.call("aria2.addUri", [[.string(url)]]).string)
                try await harness.waitFor(gid, status: "complete")
                done.append(gid)
            }
            let failed = try #require(
                try await harness.call(
                    "aria2.addUri",
                    [[.string(server.url(path: "/bytes/missing-report", query: ["status": "404"]).absoluteString)]]
                ).string)
            try await harness.waitFor(failed, status: "error")
            func page(_ offset: Int64, _ count: Int64, _ filter: JSON = [:]) async throws -> (Int, [String]) {
                let answer = try await harness.call("haul.tellHistory", [.int(offset), .int(count), filter, ["gid"]])
                let total = Int(answer.object?["total"]?.string ?? "") ?? -1
                return (total, answer.object?["downloads"]?.array?.compactMap { $0.object?["gid"]?.string } ?? [])
            }
            let newestFirst = [failed] + done.reversed()
            #expect(try await page(0, 3) == (7, Array(newestFirst.prefix(3))))
            #expect(try await page(3, 10) == (7, Array(newestFirst.dropFirst(3))))
            #expect(try await page(0, 10, ["query": "REPORT"]) == (4, [failed, done[4], done[2], done[0]]))
            #expect(try await page(1, 1, ["query": "report", "status": ["complete"]]) == (3, [done[2]]))
            #expect(try await page(0, 10, ["status": ["error"]]) == (1, [failed]))
            #expect(try await page(0, 10, ["query": "no-such-name"]) == (0, []))
            await #expect(throws: CallError.self) {
                try await harness.call("haul.tellHistory", [0, 10, ["status": ["active"]]])
            }
            await #expect(throws: CallError.self) { try await harness.call("haul.tellHistory", [-1, 10]) }
            await harness.stop()
        }
    }

    @Test("haul.tellQueue: running first, then the waiting order, searched and filtered by state, with its total")
    func queueListing() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness(maxConcurrent: 1)
            var gids: [String] = []
            for name in ["alpha", "beta", "gamma", "delta"] {
                let url = server.url(path: "/bytes/\(name).bin", query: ["size": "100", "hold": "q"])
                let options: JSON = name == "gamma" ? ["pause": "true"] : [:]
                gids.append(
                    try #require(
                        try await harness.call("aria2.addUri", [[.string(url.absoluteString)], options]).string))
            }
            try await eventually("the first held") { server.heldCount(at: "q") == 1 }
            func listed(_ filter: JSON, offset: Int64 = 0, num: Int64 = 10) async throws -> (Int, [String], [String]) {
                let page = try await harness.call(
                    "haul.tellQueue", [.int(offset), .int(num), filter, ["gid", "status"]])
                let downloads = page.object?["downloads"]?.array ?? []
                return (
                    Int(page.object?["total"]?.string ?? "") ?? -1,
                    downloads.compactMap { $0.object?["gid"]?.string },
                    downloads.compactMap { $0.object?["status"]?.string }
                )
            }
            let all = try await listed([:])
            #expect(all.0 == 4 && all.1 == gids && all.2 == ["active", "waiting", "paused", "waiting"])
            #expect(try await listed([:], offset: 1, num: 2).1 == Array(gids[1...2]))
            #expect(try await listed(["status": ["waiting"]]).1 == [gids[1], gids[3]])
            #expect(try await listed(["status": ["paused", "active"]]).1 == [gids[0], gids[2]])
            let found = try await listed(["query": "GAMMA"])
            #expect(found.0 == 1 && found.1 == [gids[2]])
            await #expect(throws: CallError.self) {
                try await harness.call("haul.tellQueue", [0, 10, ["status": ["complete"]]])
            }
            await #expect(throws: CallError.self) { try await harness.call("haul.tellQueue", [-1, 10]) }
            server.openGate("q")
            await harness.stop()
        }
    }

    @Test(
        "the lists sorted on the daemon: the queue by name, size and progress; the history by age, size and path, with and without a store"
    )
    func sorted() async throws {
        try await TestServer.withRunning { server in
            let root = try TemporaryDirectory()
            try FileManager.default.createDirectory(at: root.file(".haul"), withIntermediateDirectories: true)
            let stored = try Daemon(
                queue: daemonTestQueue(width: 1),
                configuration: .init(
                    root: root.url, store: try DaemonStore(path: root.file(".haul/daemon.sqlite").path)))
            let harness = try await DaemonHarness(maxConcurrent: 1)
            let files = [("b.bin", 300), ("a.bin", 100), ("c.bin", 200)]
            func names(_ answer: JSON) -> [String] {
                answer.object?["downloads"]?.array?.compactMap {
                    $0.object?["files"]?.array?.first?.object?["path"]?.string.map {
                        ($0 as NSString).lastPathComponent
                    }
                } ?? []
            }
            for call in [
                { (method: String, params: [JSON]) in try stored.call(method, params) },
                { try harness.daemon.call($0, $1) },
            ] {
                var gids: [String] = []
                for (name, size) in files {
                    let url = server.url(path: "/bytes/\(name)", query: ["size": String(size)])
                    gids.append(try #require(try call("aria2.addUri", [[.string(url.absoluteString)]]).string))
                }
                try await eventually("all three complete") {
                    (try? call("aria2.getGlobalStat", []))?.object?["numStopped"] == "3"
                }
                func history(_ sort: String) throws -> [String] {
                    names(try call("haul.tellHistory", [0, 10, ["sort": .string(sort)], ["files"]]))
                }
                #expect(try history("newest") == ["c.bin", "a.bin", "b.bin"])
                #expect(try history("oldest") == ["b.bin", "a.bin", "c.bin"])
                #expect(try history("size") == ["a.bin", "c.bin", "b.bin"])
                #expect(try history("-size") == ["b.bin", "c.bin", "a.bin"])
                #expect(try history("path") == ["a.bin", "b.bin", "c.bin"])
                #expect(try history("-path") == ["c.bin", "b.bin", "a.bin"])
                #expect(names(try call("haul.tellHistory", [1, 1, ["sort": "size"], ["files"]])) == ["c.bin"])
                #expect(throws: RPCError.self) { try call("haul.tellHistory", [0, 10, ["sort": "progress"]]) }
            }
            // The queue: held at the gate, all three waiting but the first.
            var queued: [String] = []
            for (name, size) in files {
                let url = server.url(path: "/bytes/q-\(name)", query: ["size": String(size), "hold": "s"])
                queued.append(
                    try #require(try await harness.call("aria2.addUri", [[.string(url.absoluteString)]]).string))
            }
            try await eventually("the first held") { server.heldCount(at: "s") == 1 }
            func queue(_ sort: String) async throws -> [String] {
                let page = try await harness.call("haul.tellQueue", [0, 10, ["sort": .string(sort)], ["gid"]])
                return page.object?["downloads"]?.array?.compactMap { $0.object?["gid"]?.string } ?? []
            }
            #expect(try await queue("position") == queued)
            #expect(try await queue("-position") == queued.reversed())
            #expect(try await queue("name") == [queued[1], queued[0], queued[2]])
            #expect(try await queue("-name") == [queued[2], queued[0], queued[1]])
            await #expect(throws: CallError.self) { try await queue("newest") }
            server.openGate("s")
            stored.close()
            await harness.stop()
        }
    }

    @Test("haul.tellDetail: a download's redirect, retries and segments in words, its sources, no credentials")
    func detail() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness()
            // Slow enough for more connections to be worth it (the rest would take over a second on one).
            let split = server.url(path: "/bytes/split.bin", query: ["size": String(3 << 20), "rate": "1000000"])
            let segmented = try #require(
                try await harness.call(
                    "aria2.addUri",
                    [
                        [.string(split.absoluteString)],
                        ["split": "3", "max-connection-per-server": "3", "min-split-size": "1M"],
                    ]
                ).string)
            // Alone, so that its extra connections find free slots at once.
            try await harness.waitFor(segmented, status: "complete")
            let target = server.url(path: "/bytes/flaky.bin", query: ["size": "2000", "fail": "1"]).absoluteString
            var redirecting = URLComponents(
                url: server.url(path: "/bytes/start.bin", query: ["redirectTo": target, "redirectStatus": "301"]),
                resolvingAgainstBaseURL: false)
            redirecting?.user = "carol"
            redirecting?.password = "hunter2-secret"
            let start = try #require(redirecting?.url?.absoluteString)
            let flaky = try #require(try await harness.call("aria2.addUri", [[.string(start)]]).string)
            let plain = try #require(
                try await harness.call(
                    "aria2.addUri",
                    [[.string(server.url(path: "/bytes/plain.bin", query: ["size": "10"]).absoluteString)]]
                ).string)
            for gid in [flaky, segmented, plain] { try await harness.waitFor(gid, status: "complete") }

            let detail = try await harness.call("haul.tellDetail", [.string(flaky)])
            let events = detail.object?["events"]?.array ?? []
            let kinds = events.compactMap { $0.object?["kind"]?.string }
            // The second attempt starts from the URL given, and is redirected again.
            #expect(kinds == ["redirected", "retrying", "started", "redirected", "finished"], "\(events)")
            let messages = events.compactMap { $0.object?["message"]?.string }
            // Its credentials went into the request's Authorization: the URL shown has none.
            #expect(messages.first?.hasPrefix("301 from http://127.0.0.1:") == true, "\(messages)")
            #expect(
                messages.dropFirst().first?.hasPrefix("attempt 1 failed: server answered 503") == true, "\(messages)")
            #expect(messages.dropFirst().first?.hasSuffix("attempt 2 in 0.5 s") == true, "\(messages)")
            let time = Double(events.first?.object?["time"]?.string ?? "") ?? 0
            #expect(abs(time / 1000 - Date().timeIntervalSince1970) < 60)
            let served = detail.object?["servedBy"]?.array?.compactMap(\.string) ?? []
            #expect(served.count == 1 && served.first?.contains("/bytes/flaky.bin") == true)
            let text = String(decoding: detail.encoded(), as: UTF8.self)
            #expect(!text.contains("hunter2-secret"), "\(text)")

            let segments =
                try await harness.call("haul.tellDetail", [.string(segmented)]).object?["segments"]?.array ?? []
            // The first response's bytes come before the split; from there the segments cover the rest, end to end.
            #expect(segments.count >= 2, "\(segments)")
            #expect(segments.allSatisfy { $0.object?["state"] == "done" })
            let bounds = segments.map {
                (Int($0.object?["from"]?.string ?? "") ?? -1, Int($0.object?["to"]?.string ?? "") ?? -1)
            }
            #expect(zip(bounds, bounds.dropFirst()).allSatisfy { $0.1 == $1.0 }, "\(bounds)")
            #expect(bounds.last?.1 == 3 << 20)
            #expect(Set(segments.compactMap { $0.object?["connection"]?.string }).count >= 2)

            let quiet = try await harness.call("haul.tellDetail", [.string(plain)])
            #expect(quiet.object?["events"]?.array?.isEmpty == true)
            await #expect(throws: CallError.self) { try await harness.call("haul.tellDetail", ["0123456789abcdef"]) }
            await harness.stop()
        }
    }

    @Test("haul.getHosts tells each host's speed and how long its oldest download has waited")
    func hostLoad() async throws {
        try await TestServer.withRunning { server in
            let harness = try await DaemonHarness(maxConcurrent: 1)
            let slow = server.url(path: "/bytes/slow.bin", query: ["size": "2000000", "rate": "200000"])
            let waiting = server.url(path: "/bytes/next.bin", query: ["size": "10"])
            let first = try #require(try await harness.call("aria2.addUri", [[.string(slow.absoluteString)]]).string)
            _ = try await harness.call("aria2.addUri", [[.string(waiting.absoluteString)]])
            try await eventuallyAsync("some speed and a wait of a second", within: .seconds(8)) {
                let host = (try? await harness.call("haul.getHosts"))?.array?.first?.object
                return (Int(host?["downloadSpeed"]?.string ?? "") ?? 0) > 0 && host?["oldestWait"] != "0"
                    && host?["numWaiting"] == "1"
            }
            _ = try await harness.call("aria2.remove", [.string(first)])
            await harness.stop()
        }
    }

    @Test("host settings are kept across a restart")
    func hostsKept() async throws {
        let root = try TemporaryDirectory()
        try FileManager.default.createDirectory(at: root.file(".haul"), withIntermediateDirectories: true)
        func start() throws -> (Daemon, DownloadQueue) {
            let queue = daemonTestQueue(width: 2)
            let store = try DaemonStore(path: root.file(".haul/daemon.sqlite").path)
            return (try Daemon(queue: queue, configuration: .init(root: root.url, store: store)), queue)
        }
        let (first, _) = try start()
        #expect(try first.call("haul.changeHostOption", ["https://a.example", ["max-connections": "3"]]) == "OK")
        #expect(try first.call("haul.pauseHost", ["http://b.example:8080/x"]) == "OK")
        first.close()
        let (second, queue) = try start()
        let hosts = queue.hostStatuses()
        #expect(
            hosts == [
                HostStatus(host: "http://b.example:8080", running: 0, waiting: 0, ownLimit: 0, limit: 0),
                HostStatus(host: "https://a.example:443", running: 0, waiting: 0, ownLimit: 3, limit: 3),
            ])
        let answer = try second.call("haul.getHosts", [])
        #expect(answer.array?.first?.object?["paused"] == "true")
        #expect(answer.array?.last?.object?["maxConnections"] == "3")
        second.close()
    }

    @Test("a limit and a pause of one host at once: both hold")
    func hostChangesAtOnce() async throws {
        let root = try TemporaryDirectory()
        try FileManager.default.createDirectory(at: root.file(".haul"), withIntermediateDirectories: true)
        let store = try DaemonStore(path: root.file(".haul/daemon.sqlite").path)
        let queue = daemonTestQueue(width: 2)
        let daemon = try Daemon(queue: queue, configuration: .init(root: root.url, store: store))
        for round in 1...40 {
            async let limit = Task.detached {
                try daemon.call(
                    "haul.changeHostOption", ["http://c.example", ["max-connections": .string("\(round)")]])
            }.value
            async let pause = Task.detached { try daemon.call("haul.pauseHost", ["http://c.example"]) }.value
            _ = try await (limit, pause)
            let host = try #require(try daemon.call("haul.getHosts", []).array?.first?.object, "round \(round)")
            #expect(host["paused"] == "true" && host["maxConnections"] == .string("\(round)"), "round \(round)")
            #expect(try daemon.call("haul.unpauseHost", ["http://c.example"]) == "OK")
        }
        daemon.close()
    }
}

/// A daemon delivers one notification per event for as long as it runs: the ten-thousandth costs what the first did.
@Suite("haul daemon: notifications for as long as it runs", .timeLimit(.minutes(2)))
struct DaemonNotificationCountTests {
    @Test("50,000 notifications in a row are delivered, each once, each from the same depth of the stack")
    func manyNotifications() async throws {
        let root = try TemporaryDirectory()
        let queue = daemonTestQueue(width: 1)
        queue.pause()
        let daemon = try Daemon(queue: queue, configuration: .init(root: root.url))
        let delivered = Locked(0)
        // Where the handler's frame is: the calls below all come from the same place, so a handler reached through
        // more and more layers (closures re-wrapped on every call) sits deeper every time.
        let depths = Locked<(first: UInt?, last: UInt)>((nil, 0))
        daemon.onNotification { _, _ in
            var marker = 0
            let address = withUnsafeMutablePointer(to: &marker) { UInt(bitPattern: $0) }
            delivered.withLock { $0 += 1 }
            depths.withLock { $0 = ($0.first ?? address, address) }
        }
        let gid = try #require(try daemon.call("aria2.addUri", [["http://127.0.0.1:1/n"], ["pause": "true"]]).string)
        // Each unpause announces the download waiting again; each pause takes it back.
        for _ in 0..<25_000 {
            _ = try daemon.call("aria2.unpause", [.string(gid)])
            _ = try daemon.call("aria2.pause", [.string(gid)])
        }
        #expect(delivered.withLock { $0 } == 25_000)
        let (seen, last) = depths.withLock { $0 }
        let first = try #require(seen)
        #expect(max(first, last) - min(first, last) < 4096, "the handler went \(Int(first) - Int(last)) bytes deeper")
        daemon.close()
        queue.cancelAll()
        await queue.waitUntilIdle()
    }
}
