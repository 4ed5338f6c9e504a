import Foundation
import HTTPTypes
import Haul
import HaulTestSupport
import Testing

@testable import HaulDaemon

/// A run of `addUri` calls (a batch or `system.multicall`): the options shared by its calls are checked and applied
/// once, and each download still gets its own URIs, destination and credentials.
@Suite("Daemon: a run of addUri calls")
struct DaemonAddRunTests {
    /// A daemon over a queue that starts nothing, so that every request can be read as it was planned.
    private func withDaemon(_ body: (Daemon, URL) throws -> Void) throws {
        try withIdleDaemon { daemon in try body(daemon, URL(fileURLWithPath: daemon.rootPath)) }
    }

    /// The request each answer's download was added with (an error's: `nil`).
    private func requests(_ answers: [Result<JSON, RPCError>], of daemon: Daemon) -> [DownloadRequest?] {
        answers.map { answer in
            guard let gid = (try? answer.get())?.string.flatMap(GID.init(hex:)) else { return nil }
            return daemon.state.withLock { $0.items[gid]?.handle?.request }
        }
    }

    @Test("calls with the same options each get their own URIs and mirrors, and all of the options")
    func sameOptions() throws {
        try withDaemon { daemon, root in
            let options: JSON = ["dir": "sub", "max-download-limit": "1K", "header": ["X-A: 1"], "split": "2"]
            let answers = daemon.addUris(
                (0..<3).map { index in
                    [
                        .array([.string("http://127.0.0.1:1/f\(index)"), .string("http://127.0.0.2:1/f\(index)")]),
                        options,
                    ]
                })
            let planned = requests(answers, of: daemon)
            for (index, request) in planned.enumerated() {
                let request = try #require(request)
                #expect(request.url.absoluteString == "http://127.0.0.1:1/f\(index)")
                #expect(request.mirrors.map(\.absoluteString) == ["http://127.0.0.2:1/f\(index)"])
                #expect(request.destination == .directory(root.appendingPathComponent("sub", isDirectory: true)))
                #expect(request.maxBytesPerSecond == 1024 && request.maxConnections == 2)
                #expect(request.headerFields[values: try #require(HTTPField.Name("X-A"))] == ["1"])
            }
        }
    }

    @Test("a URI's user and password go with its own download only, in a run whatever its options")
    func credentialsStayWithTheirURI() throws {
        try withDaemon { daemon, _ in
            let planned = requests(
                daemon.addUris([
                    [["http://alice:secret-a@127.0.0.1:1/a"]], [["http://127.0.0.1:1/b"]],
                    [["http://bob:secret-b@127.0.0.1:1/c"]], [["http://127.0.0.1:1/d"]],
                    [["http://127.0.0.1:1/e"], ["http-user": "carol", "http-passwd": "secret-c"]],
                    [["http://127.0.0.1:1/f"], ["http-user": "carol", "http-passwd": "secret-c"]],
                ]),
                of: daemon)
            #expect(
                planned.map { $0?.credentials?.user } == ["alice", nil, "bob", nil, "carol", "carol"],
                "\(planned.map { $0?.url.absoluteString ?? "-" })")
            #expect(planned.allSatisfy { $0?.url.user == nil })
        }
    }

    @Test("a bad URI, or other options, in the middle of a run is that call's own: the calls around it are planned")
    func errorsAndChangesInARun() throws {
        try withDaemon { daemon, root in
            let answers = daemon.addUris([
                [["http://127.0.0.1:1/a"], ["dir": "one"]],
                [["ftp://127.0.0.1/b"], ["dir": "one"]],
                [["http://127.0.0.1:1/c"], ["dir": "one"]],
                [["http://127.0.0.1:1/d"], ["dir": "../out"]],
                [["http://127.0.0.1:1/e"], ["dir": "two", "out": "e.bin"]],
                [["http://127.0.0.1:1/f"], ["dir": "one"]],
            ])
            let errors = answers.map { answer -> String? in
                guard case .failure(let error) = answer else { return nil }
                return error.message
            }
            #expect(errors[1]?.contains("is not an http or https URI") == true)
            #expect(errors[3]?.contains("leads out of its directory") == true, "\(errors)")
            let planned = requests(answers, of: daemon)
            #expect(planned.map { $0?.url.lastPathComponent } == ["a", nil, "c", nil, "e", "f"])
            let one = Destination.directory(root.appendingPathComponent("one", isDirectory: true))
            #expect(planned[0]?.destination == one && planned[2]?.destination == one && planned[5]?.destination == one)
            #expect(planned[4]?.destination == .file(root.appendingPathComponent("two/e.bin")))
        }
    }

    /// Clients add a batch with one set of options and a name for each file (`out`), some with their own GID or
    /// paused: the shared options are planned once, and each call still gets exactly what it would alone.
    @Test("calls differing only in out, gid and pause are each planned as alone, and a bad one of those is refused")
    func ownNamesInARun() throws {
        let calls: [[JSON]] = [
            [["http://127.0.0.1:1/a"], ["dir": "sub", "split": "2", "out": "a.bin"]],
            [["http://127.0.0.1:1/b"], ["dir": "sub", "split": "2", "out": "b.bin", "pause": "true"]],
            [["http://127.0.0.1:1/c"], ["dir": "sub", "split": "2", "out": ".hidden"]],
            [["http://127.0.0.1:1/d"], ["dir": "sub", "split": "2", "gid": "00000000000000d1"]],
            [["http://127.0.0.1:1/e"], ["dir": "sub", "split": "2", "pause": "maybe", "out": "e.bin"]],
            [["http://127.0.0.1:1/f"], ["dir": "sub", "split": "2", "gid": "xyz", "out": "f.bin"]],
            [["http://127.0.0.1:1/g"], ["dir": "sub", "split": "2", "out": "g.bin", "gid": "00000000000000d2"]],
            [["http://127.0.0.1:1/h"], ["dir": "sub", "split": "2", "out": "../h"]],
            [["http://127.0.0.1:1/i"], ["dir": "sub", "split": "2", "out": "a.bin"]],
        ]
        /// Each call's error, or its request (its destination relative to the root), stored options, whether it
        /// waits paused, and its GID when the call gave one.
        func planned(_ answers: [Result<JSON, RPCError>], of daemon: Daemon) -> [Planned] {
            answers.map { answer in
                switch answer {
                case .failure(let error): return .refused(error.message)
                case .success(let gid):
                    guard let gid = gid.string.flatMap(GID.init(hex:)) else { return .refused("no GID") }
                    return daemon.state.withLock { state in
                        guard let item = state.items[gid], var request = item.handle?.request else {
                            return .refused("\(gid) not kept")
                        }
                        let relative = { (url: URL) in
                            URL(fileURLWithPath: "/ROOT" + url.path.dropFirst(daemon.rootPath.count))
                        }
                        switch request.destination {
                        case .file(let file): request.destination = .file(relative(file))
                        case .directory(let directory, let disposition):
                            request.destination = .directory(relative(directory), useContentDisposition: disposition)
                        }
                        let given = item.options["gid"] == nil ? nil : gid
                        return .added(request, item.options, item.handle?.status.state == .paused, given)
                    }
                }
            }
        }
        var alone: [Planned] = []
        try withDaemon { daemon, _ in
            for call in calls { alone += planned(daemon.addUris([call]), of: daemon) }
        }
        try withDaemon { daemon, _ in
            let inARun = planned(daemon.addUris(calls), of: daemon)
            for (index, (run, single)) in zip(inARun, alone).enumerated() {
                #expect(run == single, "call \(index)")
            }
            let refused = inARun.map { planned -> String in
                guard case .refused(let message) = planned else { return "" }
                return message
            }
            #expect(refused[2].contains("starts with a dot") && refused[7].contains("must be a file name"))
            #expect(refused[4].contains("pause must be true or false"))
            #expect(refused[5].contains("gid must be 16 hex digits"))
            #expect(refused.enumerated().allSatisfy { [2, 4, 5, 7].contains($0.offset) != $0.element.isEmpty })
        }
    }

    /// A call of ``ownNamesInARun()``, as planned.
    private enum Planned: Equatable {
        case added(DownloadRequest, [String: String], Bool, GID?)
        case refused(String)
    }
}
