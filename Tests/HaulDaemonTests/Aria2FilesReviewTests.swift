import Foundation
import Haul
import HaulDaemon
import HaulTestSupport
import Testing

/// A review of aria2's files as a user hands them to haul daemon: bad lines named without their secrets, a file that
/// fails adds nothing, what the session file writes back.
@Suite("aria2's files under review", .timeLimit(.minutes(2)))
struct Aria2FilesReviewTests {
    @Test("a line that is not name=value is named without the secret on it")
    func badLineKeepsItsSecret() throws {
        #expect {
            try Aria2Files.readConfiguration("dir=/x\nrpc-secret hunter2-secret\n", name: "aria2.conf")
        } throws: { error in
            let message = (error as? RPCError)?.message ?? ""
            return message.hasPrefix("aria2.conf:2:") && !message.contains("hunter2-secret")
        }
        #expect {
            try Aria2Files.readInput(
                "http://127.0.0.1:1/a\n header Authorization: Bearer tok-77\n http-passwd pw-77\n", name: "in.txt")
        } throws: { error in
            let message = (error as? RPCError)?.message ?? ""
            return message.hasPrefix("in.txt:2:") && !message.contains("tok-77") && !message.contains("pw-77")
        }
    }

    @Test("a line of megabytes (no line ends: not a list) is refused by its number, not copied into the error")
    func hugeLine() throws {
        let text = "ftp://x/" + String(repeating: "a", count: 2 << 20)
        #expect {
            try Aria2Files.readInput(text, name: "big.txt")
        } throws: { error in
            let message = (error as? RPCError)?.message ?? ""
            return message.hasPrefix("big.txt:1:") && message.utf8.count < 500
        }
        #expect {
            try Aria2Files.readConfiguration("dir=" + String(repeating: "a", count: 2 << 20), name: "aria2.conf")
        } throws: { error in
            let message = (error as? RPCError)?.message ?? ""
            return message.hasPrefix("aria2.conf:1:") && message.utf8.count < 500
        }
    }

    @Test("a file whose entry cannot be added when it is added (its dir is a file) adds nothing, naming its line")
    func failedAddAddsNothing() async throws {
        let harness = try await DaemonHarness()
        harness.queue.pause()
        try Data("x".utf8).write(to: harness.root.file("sub"))
        let text = "http://127.0.0.1:1/a\nhttp://127.0.0.1:1/b\n dir=sub\n"
        #expect {
            try harness.daemon.add(Aria2Files.readInput(text, name: "in.txt"), from: "in.txt")
        } throws: { error in
            ((error as? RPCError)?.message ?? "").contains("in.txt:2:")
        }
        // The daemon says "nothing added from in.txt": /a must not be waiting (and kept in the store) regardless.
        #expect(try await harness.call("aria2.tellWaiting", [0, 10, ["gid"]]) == [])
        harness.queue.resume()
        await harness.stop()
    }

    @Test("the session file writes a proxy without its user and password, not with a password of '...'")
    func sessionProxyWithoutCredentials() async throws {
        let harness = try await DaemonHarness()
        harness.queue.pause()
        _ = try await harness.call(
            "aria2.addUri",
            [["http://127.0.0.1:1/p"], ["pause": "true", "all-proxy": "http://proxy-user:proxy-pw@127.0.0.1:3128"]])
        let session = harness.daemon.session()
        #expect(!session.contains("proxy-pw") && !session.contains("proxy-user"), "\(session)")
        // Read back, the proxy must not carry a made-up password ("...") it would send to the proxy.
        let entries = try Aria2Files.readInput(session, name: "session")
        let proxy = try #require(entries.first?.options["all-proxy"]?.first)
        #expect(URL(string: proxy)?.password == nil && URL(string: proxy)?.user == nil, "\(proxy)")
        harness.queue.resume()
        await harness.stop()
    }
}
