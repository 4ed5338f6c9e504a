import Foundation
import Haul
import HaulDaemon
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Runs `body` with aria2c and a daemon, each on its own free port and directory; both stopped after.
func withBoth(
    maxConcurrent: Int = 4, _ body: (_ aria2: Int, _ haul: DaemonHarness, _ server: TestServer) async throws -> Void
) async throws {
    try await TestServer.withRunning { server in
        let aria2 = try await Aria2Reference(secret: DaemonHarness.secret)
        let harness = try await DaemonHarness(maxConcurrent: maxConcurrent)
        do {
            try await body(aria2.port, harness, server)
        } catch {
            await aria2.stop()
            await harness.stop()
            throw error
        }
        await aria2.stop()
        await harness.stop()
    }
}

/// The whole JSON-RPC answer (`result` or `error`) of `method` with the secret and `params`, POSTed to `port`.
func rpcAnswer(_ port: Int, _ method: String, _ params: [JSON] = []) async throws -> [String: JSON] {
    let body: JSON = [
        "jsonrpc": "2.0", "id": "r", "method": .string(method),
        "params": .array([JSON.string("token:\(DaemonHarness.secret)")] + params),
    ]
    let answer = try await RawHTTP.send(
        port: port, headers: [("Host", "127.0.0.1:\(port)"), ("Content-Type", "application/json")],
        body: body.encoded())
    return try #require(answer.json?.object, "not a JSON-RPC answer from \(port): \(answer.text)")
}

/// The result of `method`, failing the test with the error otherwise.
func rpcResult(_ port: Int, _ method: String, _ params: [JSON] = []) async throws -> JSON {
    let answer = try await rpcAnswer(port, method, params)
    return try #require(answer["result"], "\(method) on \(port): \(answer)")
}

/// Waits until `gid` on `port` has the status `status`.
func waitForStatus(_ port: Int, _ gid: String, _ status: String) async throws {
    try await eventuallyAsync("\(gid) on \(port) \(status)") {
        let answer = try? await rpcAnswer(port, "aria2.tellStatus", [.string(gid), ["status"]])
        return answer?["result"]?.object?["status"]?.string == status
    }
}

@Suite("aria2 compatibility under review: haul daemon against aria2c", .serialized, .timeLimit(.minutes(2)))
struct Aria2CompatReviewTests {
    /// aria2 options that clients send with addUri (`continue` above all: it is in most aria2.conf files and
    /// scripts), all meaningful or harmless for an HTTP download.
    @Test("addUri takes aria2's common HTTP options (continue, file-allocation, always-resume, ...) as aria2 does")
    func addUriTakesCommonOptions() async throws {
        try await withBoth { aria2, haul, server in
            let url = JSON.string(server.url(path: "/bytes/opt", query: ["size": "10"]).absoluteString)
            for (name, value) in [
                ("continue", "true"), ("file-allocation", "none"), ("always-resume", "true"),
                ("max-upload-limit", "0"), ("http-accept-gzip", "true"), ("check-integrity", "false"),
                ("max-file-not-found", "3"), ("remove-control-file", "true"), ("force-save", "false"),
            ] {
                let options: JSON = .object(["pause": "true", name: .string(value)])
                let reference = try await rpcAnswer(aria2, "aria2.addUri", [[url], options])
                let ours = try await rpcAnswer(haul.port, "aria2.addUri", [[url], options])
                #expect(reference["result"]?.string != nil, "aria2 refused \(name): \(reference)")
                #expect(
                    ours["result"]?.string != nil,
                    "addUri with \(name)=\(value): aria2 \(reference["result"] ?? "-"), haul \(ours["error"] ?? "-")")
            }
        }
    }

    /// Motrix's speed-limit switch, and AriaNg's global settings page, send the upload limit with the download one.
    @Test("changeGlobalOption takes max-overall-upload-limit (and other global options) as aria2 does")
    func changeGlobalOptionTakesUploadLimit() async throws {
        try await withBoth { aria2, haul, _ in
            let both: JSON = ["max-overall-download-limit": "1M", "max-overall-upload-limit": "256K"]
            let reference = try await rpcAnswer(aria2, "aria2.changeGlobalOption", [both])
            let ours = try await rpcAnswer(haul.port, "aria2.changeGlobalOption", [both])
            #expect(reference["result"]?.string == "OK")
            #expect(ours["result"]?.string == "OK", "haul: \(ours)")
            for (name, value) in [
                ("continue", "true"), ("max-download-result", "100"), ("save-session-interval", "30"),
                ("optimize-concurrent-downloads", "false"), ("log-level", "warn"),
            ] {
                let option: JSON = .object([name: .string(value)])
                let reference = try await rpcAnswer(aria2, "aria2.changeGlobalOption", [option])
                let ours = try await rpcAnswer(haul.port, "aria2.changeGlobalOption", [option])
                #expect(reference["result"]?.string == "OK")
                #expect(ours["result"]?.string == "OK", "changeGlobalOption \(name): haul \(ours)")
            }
        }
    }

    /// aria2 ends a removed download with its exit status 31 ("removed by the user") and an errorMessage member.
    @Test("a removed active download has aria2's errorCode 31 and an errorMessage")
    func removedDownloadErrorCode() async throws {
        try await withBoth { aria2, haul, server in
            let referenceURL = JSON.string(
                server.url(path: "/bytes/a-slow", query: ["size": "1000000", "rate": "2000"]).absoluteString)
            let ourURL = JSON.string(
                server.url(path: "/bytes/h-slow", query: ["size": "1000000", "rate": "2000"]).absoluteString)
            let referenceGID = try #require(try await rpcResult(aria2, "aria2.addUri", [[referenceURL]]).string)
            let ourGID = try #require(try await rpcResult(haul.port, "aria2.addUri", [[ourURL]]).string)
            try await waitForStatus(aria2, referenceGID, "active")
            try await waitForStatus(haul.port, ourGID, "active")
            _ = try await rpcResult(aria2, "aria2.forceRemove", [.string(referenceGID)])
            _ = try await rpcResult(haul.port, "aria2.forceRemove", [.string(ourGID)])
            try await waitForStatus(aria2, referenceGID, "removed")
            try await waitForStatus(haul.port, ourGID, "removed")
            let keys: JSON = ["status", "errorCode", "errorMessage"]
            let reference = try await rpcResult(aria2, "aria2.tellStatus", [.string(referenceGID), keys]).object
            let ours = try await rpcResult(haul.port, "aria2.tellStatus", [.string(ourGID), keys]).object
            #expect(reference?["errorCode"]?.string == "31")
            #expect(
                ours?["errorCode"]?.string == reference?["errorCode"]?.string
                    && (ours?["errorMessage"] != nil) == (reference?["errorMessage"] != nil),
                "aria2 \(reference ?? [:]), haul \(ours ?? [:])")
        }
    }

    /// aria2's getOption answers every option in force for the download: a front end reads `dir`, `split`,
    /// `max-download-limit`... of any download, not only of those it gave them to. Each value is what the download
    /// runs with; the options given show as given.
    @Test("getOption of a download answers the options in force (dir, split, max-download-limit...), as aria2 does")
    func getOptionAnswersEffectiveOptions() async throws {
        try await withBoth { aria2, haul, server in
            let url = JSON.string(server.url(path: "/bytes/plain", query: ["size": "10"]).absoluteString)
            let given: JSON = ["pause": "true", "split": "3", "max-download-limit": "100K"]
            let referenceGID = try #require(try await rpcResult(aria2, "aria2.addUri", [[url], given]).string)
            let ourGID = try #require(try await rpcResult(haul.port, "aria2.addUri", [[url], given]).string)
            let reference = try await rpcResult(aria2, "aria2.getOption", [.string(referenceGID)]).object ?? [:]
            let ours = try await rpcResult(haul.port, "aria2.getOption", [.string(ourGID)]).object ?? [:]
            let names = [
                "dir", "split", "max-connection-per-server", "min-split-size", "max-download-limit", "max-tries",
                "retry-wait", "timeout", "connect-timeout", "allow-overwrite", "auto-file-renaming", "user-agent",
                "lowest-speed-limit", "remote-time", "conditional-get", "check-certificate",
            ]
            let missing = names.filter { reference[$0] != nil && ours[$0] == nil }
            #expect(missing.isEmpty, "haul's getOption lacks \(missing); it answered \(ours.keys.sorted())")
            let settings = haul.queue.downloader.configuration
            #expect(ours["dir"]?.string == haul.daemon.rootPath)
            #expect(ours["split"] == "3" && ours["max-download-limit"] == "102400")
            #expect(ours["timeout"]?.string == String(settings.stallTimeout.components.seconds))
            #expect(ours["connect-timeout"]?.string == String(settings.connectTimeout.components.seconds))
            #expect(ours["max-tries"]?.string == String(settings.retryPolicy.maxRetries + 1))
            #expect(ours["user-agent"]?.string == settings.userAgent)
            #expect(ours["remote-time"]?.string == String(settings.usesRemoteModificationTime))
            // aria2's defaults (a file there is kept: the new one is renamed) are the daemon's too.
            #expect(ours["auto-file-renaming"] == "true" && ours["allow-overwrite"] == "false")
            // No limit per server apart from split's.
            #expect(ours["max-connection-per-server"] == "3")
        }
    }

    @Test("getGlobalOption answers the download options in force (split, max-download-limit...), as aria2 does")
    func getGlobalOptionAnswersEffectiveOptions() async throws {
        try await withBoth { aria2, haul, _ in
            let reference = try await rpcResult(aria2, "aria2.getGlobalOption").object ?? [:]
            var ours = try await rpcResult(haul.port, "aria2.getGlobalOption").object ?? [:]
            let names = [
                "split", "max-connection-per-server", "min-split-size", "max-download-limit", "max-tries", "retry-wait",
                "timeout", "connect-timeout", "allow-overwrite", "auto-file-renaming", "user-agent",
                "lowest-speed-limit",
            ]
            let missing = names.filter { reference[$0] != nil && ours[$0] == nil }
            #expect(missing.isEmpty, "haul's getGlobalOption lacks \(missing); it answered \(ours.keys.sorted())")
            let settings = haul.queue.downloader.configuration
            #expect(ours["max-download-limit"] == "0" && ours["retry-wait"] == "0")
            #expect(ours["timeout"]?.string == String(settings.stallTimeout.components.seconds))
            // A default changed shows, and a download added after it runs with it.
            #expect(try await rpcResult(haul.port, "aria2.changeGlobalOption", [["max-tries": "2"]]) == "OK")
            ours = try await rpcResult(haul.port, "aria2.getGlobalOption").object ?? [:]
            #expect(ours["max-tries"] == "2")
            let gid = try #require(
                try await rpcResult(haul.port, "aria2.addUri", [["http://127.0.0.1:1/x"], ["pause": "true"]]).string)
            let options = try await rpcResult(haul.port, "aria2.getOption", [.string(gid)]).object ?? [:]
            #expect(options["max-tries"] == "2" && options["timeout"] == ours["timeout"])
        }
    }

    /// A script that sends a call over the WebSocket and reads the next message as its answer works with aria2: the
    /// answer to addUri comes before any notification about the download it added. Twenty small downloads added one
    /// after another on one session, each starting at once: every answer comes before its download's notifications.
    @Test("over WebSocket, addUri's answer comes before the notifications of the download it added")
    func webSocketAnswerBeforeNotifications() async throws {
        try await withBoth { aria2, haul, server in
            for (port, tag) in [(aria2, "a"), (haul.port, "h")] {
                let session = try await WebSocketClient.open(port: port, headers: [("Host", "127.0.0.1:\(port)")])
                #expect(session.upgraded)
                for index in 0..<20 {
                    let url = server.url(path: "/bytes/\(tag)-ws\(index)", query: ["size": "100"]).absoluteString
                    let call: JSON = [
                        "jsonrpc": "2.0", "id": .int(Int64(index)), "method": "aria2.addUri",
                        "params": [.string("token:\(DaemonHarness.secret)"), [.string(url)]],
                    ]
                    session.send(call.encoded())
                    try await eventually("answer \(index) from \(tag)") {
                        session.messages.contains { $0.object?["id"]?.int == Int64(index) }
                    }
                }
                try await eventually("every download's start from \(tag)") {
                    session.messages.filter { $0.object?["method"] == "aria2.onDownloadStart" }.count >= 20
                }
                let messages = session.messages
                for (place, message) in messages.enumerated() {
                    guard let id = message.object?["id"]?.int,
                        let gid = message.object?["result"]?.string
                    else { continue }
                    let earlier = messages[..<place].contains {
                        $0.object?["params"]?.array?.first?.object?["gid"]?.string == gid
                    }
                    #expect(
                        !earlier,
                        "\(tag == "a" ? "aria2" : "haul"): a notification about \(gid) came before answer \(id)")
                }
            }
        }
    }

    /// AriaNg draws a download's pieces from `bitfield`; aria2 has it for every download that has started.
    @Test("tellStatus of a completed download has aria2's bitfield")
    func completedDownloadHasBitfield() async throws {
        try await withBoth { aria2, haul, server in
            for size in [1000, 3 << 19] {
                let referenceURL = JSON.string(
                    server.url(path: "/bytes/a-done\(size)", query: ["size": String(size)]).absoluteString)
                let ourURL = JSON.string(
                    server.url(path: "/bytes/h-done\(size)", query: ["size": String(size)]).absoluteString)
                let referenceGID = try #require(try await rpcResult(aria2, "aria2.addUri", [[referenceURL]]).string)
                let ourGID = try #require(try await rpcResult(haul.port, "aria2.addUri", [[ourURL]]).string)
                try await waitForStatus(aria2, referenceGID, "complete")
                try await waitForStatus(haul.port, ourGID, "complete")
                let keys: JSON = ["status", "bitfield", "numPieces"]
                let reference = try await rpcResult(aria2, "aria2.tellStatus", [.string(referenceGID), keys])
                let ours = try await rpcResult(haul.port, "aria2.tellStatus", [.string(ourGID), keys])
                #expect(reference.object?["bitfield"]?.string == (size == 1000 ? "80" : "c0"))
                #expect(ours == reference, "aria2 \(reference), haul \(ours)")
            }
            // Not yet started: no bitfield, as aria2.
            let url = JSON.string(server.url(path: "/bytes/later", query: ["size": "10"]).absoluteString)
            let waiting = try #require(
                try await rpcResult(haul.port, "aria2.addUri", [[url], ["pause": "true"]]).string)
            let status = try await rpcResult(haul.port, "aria2.tellStatus", [.string(waiting)])
            #expect(status.object?["bitfield"] == nil && status.object?["status"] == "paused")
        }
    }

    /// aria2.changeUri is aria2's method for an HTTP download's mirrors (aria2p: `client.change_uri`).
    @Test("aria2.changeUri adds and removes a waiting download's mirrors, answered as aria2 answers")
    func changeUri() async throws {
        try await withBoth { aria2, haul, server in
            let url = JSON.string(server.url(path: "/bytes/mirrored", query: ["size": "10"]).absoluteString)
            let mirror = JSON.string(server.url(path: "/bytes/mirror2", query: ["size": "10"]).absoluteString)
            let referenceGID = try #require(
                try await rpcResult(aria2, "aria2.addUri", [[url], ["pause": "true"]]).string)
            let ourGID = try #require(
                try await rpcResult(haul.port, "aria2.addUri", [[url], ["pause": "true"]]).string)
            for change: [JSON] in [[1, [], [mirror]], [1, [mirror, mirror], []], [1, ["http://nowhere/"], []]] {
                let reference = try await rpcAnswer(aria2, "aria2.changeUri", [.string(referenceGID)] + change)
                let ours = try await rpcAnswer(haul.port, "aria2.changeUri", [.string(ourGID)] + change)
                #expect(reference["result"] != nil)
                #expect(ours["result"] == reference["result"], "\(change): aria2 \(reference), haul \(ours)")
            }
            let uris = try await rpcResult(haul.port, "aria2.getUris", [.string(ourGID)])
            #expect(uris.array?.compactMap { $0.object?["uri"] } == [url])
        }
    }

    @Test("changeOption gives a waiting download another out, answered and shown as aria2 does")
    func changeWaitingOut() async throws {
        try await withBoth { aria2, haul, server in
            let url = JSON.string(server.url(path: "/bytes/named", query: ["size": "10"]).absoluteString)
            var names: [String?] = []
            for port in [aria2, haul.port] {
                let gid = try #require(try await rpcResult(port, "aria2.addUri", [[url], ["pause": "true"]]).string)
                let answer = try await rpcAnswer(port, "aria2.changeOption", [.string(gid), ["out": "renamed.bin"]])
                #expect(answer["result"] == "OK", "\(port): \(answer)")
                let options = try await rpcResult(port, "aria2.getOption", [.string(gid)])
                #expect(options.object?["out"] == "renamed.bin", "\(port)")
                #expect(try await rpcResult(port, "aria2.unpause", [.string(gid)]) == .string(gid))
                try await waitForStatus(port, gid, "complete")
                let files = try await rpcResult(port, "aria2.getFiles", [.string(gid)])
                names.append(files.array?.first?.object?["path"]?.string.map { ($0 as NSString).lastPathComponent })
            }
            #expect(names == ["renamed.bin", "renamed.bin"], "aria2, haul: \(names)")
        }
    }

    /// aria2 answers a missing or mistyped parameter with its code 1 ("The parameter at 0 is required but
    /// missing."), as every other failure of a method; clients tell aria2's failures by code 1.
    @Test("a missing parameter is answered with aria2's code 1")
    func missingParameterCode() async throws {
        try await withBoth { aria2, haul, _ in
            for (method, params) in [
                ("aria2.tellStatus", [JSON]()), ("aria2.tellStatus", [5]), ("aria2.tellWaiting", [0]),
            ] {
                let reference = try await rpcAnswer(aria2, method, params)
                let ours = try await rpcAnswer(haul.port, method, params)
                #expect(reference["error"]?.object?["code"]?.int == 1)
                #expect(
                    ours["error"]?.object?["code"]?.int == reference["error"]?.object?["code"]?.int,
                    "\(method) \(params): aria2 \(reference["error"] ?? "-"), haul \(ours["error"] ?? "-")")
            }
        }
    }
}
