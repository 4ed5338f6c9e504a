import Foundation
import HTTPTypes
import Haul
import HaulTestServer
import HaulTestSupport
import Testing

@testable import HaulDaemon

/// getOption's options in force, max-connection-per-server, changeUri and the status of a failed download, as a
/// hostile client tries them: each test states a promise and fails on the code before it was kept.
@Suite("haul daemon: options in force, connections per server, changeUri", .serialized, .timeLimit(.minutes(2)))
struct DaemonOptionsInForceTests {
    private func request(_ answer: Result<JSON, RPCError>, of daemon: Daemon) -> DownloadRequest? {
        guard let gid = (try? answer.get())?.string.flatMap(GID.init(hex:)) else { return nil }
        return daemon.state.withLock { $0.items[gid]?.handle?.request }
    }

    /// max-connection-per-server caps split by the number of servers of the download's own URIs, also in a run of
    /// addUri calls (a batch, system.multicall) with the same options, where the plan of the first call is reused for
    /// the next (DownloadPlan.reused(for:options:defaults:)).
    @Test("in a run of addUri calls, each download's connections are capped by its own servers")
    func connectionCapInARun() throws {
        try withIdleDaemon { daemon in
            let options: JSON = ["split": "4", "max-connection-per-server": "1"]
            let answers = daemon.addUris([
                // Two servers: two connections.
                [["http://127.0.0.1:1/a", "http://127.0.0.2:1/a"], options],
                // One server: one connection, as when added alone.
                [["http://127.0.0.1:1/b"], options],
            ])
            let alone = try #require(request(daemon.addUris([[["http://127.0.0.1:1/c"], options]])[0], of: daemon))
            #expect(alone.maxConnections == 1)
            let planned = answers.map { request($0, of: daemon)?.maxConnections }
            #expect(planned == [2, 1], "one server's download opens \(planned[1] ?? 0) connections to it")
        }
    }

    /// `http://h/x` and `http://h:80/x` are one server.
    @Test("a URI with its default port written out is the same server for max-connection-per-server")
    func defaultPortIsTheSameServer() throws {
        try withIdleDaemon { daemon in
            let answer = daemon.addUris([
                [["http://127.0.0.1/a", "http://127.0.0.1:80/a"], ["split": "4", "max-connection-per-server": "1"]]
            ])[0]
            let planned = try #require(request(answer, of: daemon))
            #expect(planned.maxConnections == 1)
        }
    }

    /// changeUri's delUris match a URI as given or as shown: getUris shows a mirror with a password as `user:***@`,
    /// and a front end removes the mirror it was shown.
    @Test("changeUri removes a mirror given by the form getUris shows it in")
    func changeUriRemovesShownMirror() throws {
        try withIdleDaemon { daemon in
            let gid = try #require(
                try daemon.call("aria2.addUri", [["http://127.0.0.1:1/f"], ["pause": "true"]]).string)
            #expect(
                try daemon.call("aria2.changeUri", [.string(gid), 1, [], ["http://u:pw@127.0.0.2:1/f"]]) == [0, 1])
            let shown = try daemon.call("aria2.getUris", [.string(gid)]).array?.compactMap {
                $0.object?["uri"]?.string
            }
            let mirror = try #require(shown?.last)
            #expect(!mirror.contains("pw"))
            #expect(try daemon.call("aria2.changeUri", [.string(gid), 1, [.string(mirror)], []]) == [1, 0])
        }
    }

    /// aria2 answers a size option in bytes (`100K` is `102400`), while the download waits or runs and once it has
    /// ended alike.
    @Test("getOption of a completed download shows its max-download-limit, as aria2 does")
    func completedDownloadKeepsItsLimit() async throws {
        try await withBoth { aria2, haul, server in
            let url = JSON.string(server.url(path: "/bytes/limited", query: ["size": "10"]).absoluteString)
            let given: JSON = ["max-download-limit": "100K"]
            let referenceGID = try #require(try await rpcResult(aria2, "aria2.addUri", [[url], given]).string)
            let ourGID = try #require(try await rpcResult(haul.port, "aria2.addUri", [[url], given]).string)
            try await waitForStatus(aria2, referenceGID, "complete")
            try await waitForStatus(haul.port, ourGID, "complete")
            let reference = try await rpcResult(aria2, "aria2.getOption", [.string(referenceGID)]).object
            let ours = try await rpcResult(haul.port, "aria2.getOption", [.string(ourGID)]).object
            #expect(reference?["max-download-limit"] == "102400")
            #expect(ours?["max-download-limit"] == reference?["max-download-limit"])
        }
    }

    /// A download given secrets (a password, a cookie, a proxy's password), which the options kept leave out, changes
    /// its settings and mirrors while it waits, and keeps those secrets.
    @Test("changeOption and changeUri on a download with secrets keep its credentials, cookie and proxy")
    func changesKeepSecrets() throws {
        try withIdleDaemon { daemon in
            let options: JSON = [
                "pause": "true", "http-user": "u", "http-passwd": "pw-1", "header": ["Cookie: c=secret-2"],
                "all-proxy": "http://127.0.0.1:3", "all-proxy-user": "p", "all-proxy-passwd": "pw-3",
            ]
            let uris: JSON = ["http://127.0.0.1:1/s"]
            let gid = try #require(try daemon.call("aria2.addUri", [uris, options]).string)
            #expect(try daemon.call("aria2.changeOption", [.string(gid), ["split": "2", "timeout": "9"]]) == "OK")
            #expect(try daemon.call("aria2.changeUri", [.string(gid), 1, [], ["http://127.0.0.2:1/s"]]) == [0, 1])
            let request = try #require(
                daemon.state.withLock { state in GID(hex: gid).flatMap { state.items[$0]?.handle?.status.request } })
            #expect(request.maxConnections == 2 && request.stallTimeout == .seconds(9))
            #expect(request.mirrors.map(\.absoluteString) == ["http://127.0.0.2:1/s"])
            #expect(request.credentials == Credentials(user: "u", password: "pw-1"))
            #expect(request.headerFields[.cookie] == "c=secret-2")
            #expect(request.proxy?.http?.credentials == Credentials(user: "p", password: "pw-3"))
            let shown = "\(try daemon.call("aria2.getOption", [.string(gid)]))"
            #expect(!shown.contains("pw-1") && !shown.contains("secret-2") && !shown.contains("pw-3"))
        }
    }

    /// aria2 keeps the length and bitfield of a download that failed part way (its pieces done), and so does Haul.
    @Test("tellStatus of a download that failed part way has aria2's bitfield")
    func failedDownloadBitfield() async throws {
        try await withBoth { aria2, haul, server in
            let query = ["size": String(3 << 20), "cutAfter": String(3 << 19)]
            let referenceURL = JSON.string(server.url(path: "/bytes/a-cut", query: query).absoluteString)
            let ourURL = JSON.string(server.url(path: "/bytes/h-cut", query: query).absoluteString)
            let given: JSON = ["max-tries": "1"]
            let referenceGID = try #require(
                try await rpcResult(aria2, "aria2.addUri", [[referenceURL], given]).string)
            let ourGID = try #require(try await rpcResult(haul.port, "aria2.addUri", [[ourURL], given]).string)
            try await waitForStatus(aria2, referenceGID, "error")
            try await waitForStatus(haul.port, ourGID, "error")
            let keys: JSON = ["status", "totalLength", "bitfield"]
            let reference = try await rpcResult(aria2, "aria2.tellStatus", [.string(referenceGID), keys]).object
            let ours = try await rpcResult(haul.port, "aria2.tellStatus", [.string(ourGID), keys]).object
            #expect(reference?["bitfield"] != nil)
            #expect(ours?["totalLength"] == reference?["totalLength"])
            #expect(
                ours?["bitfield"] == reference?["bitfield"],
                "aria2 \(reference ?? [:]), haul \(ours ?? [:])")
        }
    }

    /// aria2 refuses a negative position ("Position must be greater than or equal to 0.").
    @Test("changeUri with a negative position is refused, as aria2 refuses it")
    func changeUriNegativePosition() async throws {
        try await withBoth { aria2, haul, server in
            let url = JSON.string(server.url(path: "/bytes/pos", query: ["size": "10"]).absoluteString)
            let referenceGID = try #require(
                try await rpcResult(aria2, "aria2.addUri", [[url], ["pause": "true"]]).string)
            let ourGID = try #require(
                try await rpcResult(haul.port, "aria2.addUri", [[url], ["pause": "true"]]).string)
            let change: [JSON] = [1, [], [], -1]
            let reference = try await rpcAnswer(aria2, "aria2.changeUri", [.string(referenceGID)] + change)
            let ours = try await rpcAnswer(haul.port, "aria2.changeUri", [.string(ourGID)] + change)
            #expect(reference["error"] != nil)
            #expect(ours["error"] != nil, "aria2 \(reference), haul \(ours)")
        }
    }
}
