import Foundation
import HaulTestServer
import Testing

@testable import HaulCommandLine

/// `haul serve` and `haul demo`.
@Suite("haul serve and haul demo: parsing", .timeLimit(.minutes(1)))
struct ServeAndDemoParsingTests {
    @Test("serve: by default port 8080 on loopback, plain HTTP, generated content only")
    func serveDefaults() throws {
        let serve = try parse(["serve"], as: ServeCommand.self)
        #expect(serve.directory == nil && serve.port == 8080 && serve.host == nil)
        #expect(!serve.tls && serve.caFile == nil && serve.certificate == .valid)
    }

    @Test("serve: DIR, --port, --host, --tls, --ca-file and --tls-certificate")
    func serveOptions() throws {
        let serve = try parse(
            [
                "serve", "files", "--port", "0", "--host", "::1", "--tls", "--ca-file", "ca.pem", "--tls-certificate",
                "expired",
            ],
            as: ServeCommand.self)
        #expect(serve.directory == "files" && serve.port == 0 && serve.host == "::1")
        #expect(serve.tls && serve.caFile == "ca.pem" && serve.certificate == .expired)
        for kind in TestServer.CertificateKind.allCases {
            #expect(
                try parse(["serve", "--tls", "--tls-certificate", kind.rawValue], as: ServeCommand.self).certificate
                    == kind)
        }
    }

    @Test(
        "serve: --ca-file and --tls-certificate without --tls, and values not of their kind, are refused",
        arguments: [
            (["--ca-file", "ca.pem"], ["--ca-file", "--tls"]),
            (["--tls-certificate", "expired"], ["--tls-certificate", "--tls"]),
            (["--tls", "--tls-certificate", "forged"], ["--tls-certificate", "forged"]),
            (["--port", "http"], ["--port", "http"]),
        ])
    func serveRefused(arguments: [String], words: [String]) {
        expectUsageError(["serve"] + arguments, naming: words)
    }

    @Test("demo: a fresh temporary directory, or -d/--dir")
    func demo() throws {
        #expect(try parse(["demo"], as: DemoCommand.self).directory == nil)
        #expect(try parse(["demo", "-d", "here"], as: DemoCommand.self).directory == "here")
        #expect(try parse(["demo", "--dir", "there"], as: DemoCommand.self).directory == "there")
        expectUsageError(["demo", "-d"], naming: ["Missing value", "-d"])
        expectUsageError(["demo", "https://example.org"], naming: ["https://example.org"])
    }

    @Test("an unknown command is refused, naming it")
    func unknownCommand() {
        expectUsageError(["fetch"], naming: ["fetch"])
    }
}
