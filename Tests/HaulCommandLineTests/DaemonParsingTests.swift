import Foundation
import Testing

@testable import HaulCommandLine

/// `haul daemon`'s options and every usage error.
@Suite("haul daemon: parsing", .timeLimit(.minutes(1)))
struct DaemonParsingTests {
    @Test("defaults: 127.0.0.1:6800, a secret of its own, no other origin, 4 at once")
    func defaults() throws {
        let daemon = try parse(["daemon"], as: DaemonCommand.self)
        #expect(daemon.listen == "127.0.0.1:6800" && daemon.secretFile == nil && !daemon.noSecret)
        #expect(daemon.allowedOrigins.isEmpty && daemon.concurrency.connections() == 4 && daemon.perHost == nil)
        #expect(try DaemonCommand.parseListen("127.0.0.1:6800") == ("127.0.0.1", 6800))
        #expect(try DaemonCommand.parseListen("[::1]:0") == ("::1", 0))
    }

    @Test("options: --rpc-listen, --rpc-secret-file, --rpc-allow-origin (repeatable), -j, --per-host, -d")
    func options() throws {
        let daemon = try parse(
            [
                "daemon", "-d", "dl", "--rpc-listen", "[::1]:7000", "--rpc-secret-file", "s", "--rpc-allow-origin",
                "http://127.0.0.1:8080", "--rpc-allow-origin", "https://ui.example", "-j", "2", "--per-host", "1",
            ],
            as: DaemonCommand.self)
        #expect(daemon.destination.directory == "dl" && daemon.listen == "[::1]:7000" && daemon.secretFile == "s")
        #expect(daemon.allowedOrigins == ["http://127.0.0.1:8080", "https://ui.example"])
        #expect(daemon.concurrency.connections() == 2 && daemon.perHost == 1)
        #expect(try parse(["daemon", "--rpc-no-secret"], as: DaemonCommand.self).noSecret)
    }

    @Test(
        "refused: another address than loopback, a bad HOST:PORT, no secret with a secret file, a bad origin, -u",
        arguments: [
            (["--rpc-listen", "0.0.0.0:6800"], ["--rpc-listen", "0.0.0.0:6800", "--rpc-insecure-listen"]),
            (["--rpc-listen", "192.168.1.2:6800"], ["--rpc-listen", "192.168.1.2:6800", "--rpc-certificate"]),
            (["--rpc-listen", "127.example:6800"], ["127.example:6800", "loopback"]),
            (["--rpc-certificate", "c.pem"], ["--rpc-certificate", "--rpc-private-key"]),
            (["--rpc-private-key", "k.pem"], ["--rpc-certificate", "--rpc-private-key"]),
            (
                ["--rpc-listen", "0.0.0.0:6800", "--rpc-insecure-listen", "--rpc-no-secret"],
                ["--rpc-no-secret", "0.0.0.0:6800"]
            ),
            (["--rpc-allow-host", "a b"], ["--rpc-allow-host", "a b"]),
            (["--rpc-listen", "6800"], ["--rpc-listen", "6800"]),
            (["--rpc-listen", "127.0.0.1:70000"], ["--rpc-listen", "70000"]),
            (["--rpc-no-secret", "--rpc-secret-file", "s"], ["--rpc-no-secret", "--rpc-secret-file"]),
            (["--rpc-allow-origin", "evil.example"], ["--rpc-allow-origin", "evil.example"]),
            (["--rpc-allow-origin", "http://h/path"], ["--rpc-allow-origin", "http://h/path"]),
            (["-u", "me:pw"], ["-u/--user", "http-user"]),
            (["--per-host", "0"], ["--per-host", "0"]),
        ])
    func refused(arguments: [String], words: [String]) {
        expectUsageError(["daemon"] + arguments, naming: words)
    }

    @Test("another address than loopback: with TLS, or with --rpc-insecure-listen said outright")
    func otherAddresses() throws {
        let tls = try parse(
            [
                "daemon", "--rpc-listen", "0.0.0.0:6800", "--rpc-certificate", "c.pem", "--rpc-private-key", "k.pem",
                "--rpc-allow-host", "nas.local", "--rpc-allow-host", "[fd00::2]",
            ],
            as: DaemonCommand.self)
        #expect(tls.certificate == "c.pem" && tls.privateKey == "k.pem" && !tls.insecureListen)
        #expect(tls.allowedHosts == ["nas.local", "[fd00::2]"])
        let insecure = try parse(
            ["daemon", "--rpc-listen", "192.168.1.2:6800", "--rpc-insecure-listen"], as: DaemonCommand.self)
        #expect(insecure.insecureListen && insecure.certificate == nil)
        #expect(DaemonCommand.isLoopback("127.0.0.2") && DaemonCommand.isLoopback("::1"))
        #expect(!DaemonCommand.isLoopback("0.0.0.0") && !DaemonCommand.isLoopback("::"))
    }

    @Test("a secret is never an option's value: there is no --rpc-secret")
    func noSecretFlag() {
        expectUsageError(["daemon", "--rpc-secret", "abc"], naming: ["--rpc-secret"])
    }
}
