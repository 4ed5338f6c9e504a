import Foundation
import Testing

@testable import HaulCommandLine

/// The services' options (`--metrics-listen`, `--metrics-secret-file`, `--log-format`) and the JSON log line.
@Suite("haul daemon and haul worker: service options", .timeLimit(.minutes(1)))
struct ServiceOptionsParsingTests {
    let database = ["--db", "postgres://haul@127.0.0.1/haul"]

    @Test("defaults: no metrics listener for a worker, text logs for both")
    func defaults() throws {
        let worker = try parse(["worker"] + database, as: WorkerCommand.self)
        #expect(worker.monitoring.listen == nil && worker.monitoring.secretFile == nil)
        #expect(worker.logging.format == .text)
        #expect(try parse(["daemon"], as: DaemonCommand.self).logging.format == .text)
    }

    @Test("--metrics-listen on loopback, or elsewhere with a token file; --log-format json")
    func options() throws {
        for listen in ["127.0.0.1:9469", "[::1]:0", "localhost:9469"] {
            let worker = try parse(
                ["worker"] + database + ["--metrics-listen", listen, "--log-format", "json"], as: WorkerCommand.self)
            #expect(worker.monitoring.listen == listen && worker.logging.format == .json)
        }
        let remote = try parse(
            ["worker"] + database + ["--metrics-listen", "0.0.0.0:9469", "--metrics-secret-file", "token"],
            as: WorkerCommand.self)
        #expect(remote.monitoring.secretFile == "token")
        #expect(try parse(["daemon", "--log-format", "json"], as: DaemonCommand.self).logging.format == .json)
    }

    @Test(
        "refused: metrics off loopback without a token, a token without a listener, a bad address, a bad format",
        arguments: [
            (["--metrics-listen", "0.0.0.0:9469"], ["--metrics-listen", "0.0.0.0:9469", "--metrics-secret-file"]),
            (["--metrics-listen", "10.0.0.5:9469"], ["10.0.0.5:9469", "--metrics-secret-file"]),
            (["--metrics-secret-file", "token"], ["--metrics-secret-file", "--metrics-listen"]),
            (["--metrics-listen", "9469"], ["--metrics-listen", "'9469'", "HOST:PORT"]),
            (["--metrics-listen", ":9469"], ["--metrics-listen", "no host"]),
            (["--log-format", "xml"], ["--log-format", "xml"]),
        ])
    func refused(_ extra: [String], _ words: [String]) {
        expectUsageError(["worker"] + database + extra, naming: words)
    }

    @Test("a JSON log line: one object, every character a server sent kept and none able to end the line")
    func jsonQuoting() throws {
        let hostile = "name\"}\n{\"level\":\"error\"\\ \u{1B}[31m\u{7F}\u{85}\u{2028}é😀"
        let quoted = JSONLogHandler.quoted(hostile)
        #expect(!quoted.contains("\n") && !quoted.contains("\u{1B}") && !quoted.contains("\u{2028}"))
        let decoded = try JSONSerialization.jsonObject(with: Data("[\(quoted)]".utf8)) as? [String]
        #expect(decoded == [hostile])
    }
}
