import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulNIO
import Testing

@testable import HaulCommandLine

/// The transport, TLS, HTTP version and timeouts: the same in `get` and `worker`.
@Suite("Connection options", .timeLimit(.minutes(1)))
struct ConnectionOptionsTests {
    @Test(
        "by default: nio, 10 s to connect, 30 s of stall, automatic HTTP version, verified TLS",
        arguments: downloadingCommands)
    func defaults(command: String) throws {
        let parsed = try parseDownloading(command, [])
        #expect(parsed.connection.transport == .nio)
        let configuration = try configuration(command, [])
        #expect(configuration.connectTimeout == .seconds(10))
        #expect(configuration.stallTimeout == .seconds(30))
        #expect(configuration.httpVersion == .automatic)
        let tls = try parsed.connection.tlsSettings(checkingFiles: false)
        #expect(tls.verifiesPeer)
        #expect(tls.clientCertificateFile == nil && tls.clientKeyFile == nil)
    }

    @Test("--connect-timeout and --stall-timeout, in seconds", arguments: downloadingCommands)
    func timeouts(command: String) throws {
        let configuration = try configuration(command, ["--connect-timeout", "2.5", "--stall-timeout", "0.25"])
        #expect(configuration.connectTimeout == .milliseconds(2500))
        #expect(configuration.stallTimeout == .milliseconds(250))
    }

    @Test(
        "a timeout that is not above 0, over a day or not a number is refused, naming it and the value",
        arguments: downloadingCommands, ["--connect-timeout", "--stall-timeout"])
    func timeoutsRefused(command: String, option: String) {
        for value in ["0", "86401", "nan"] {
            expectUsageError([command, option, value], naming: [option, value])
        }
        expectUsageError([command, option, "soon"], naming: [option, "soon"])
        expectUsageError([command, "\(option)=-1"], naming: [option, "-1"])
    }

    @Test("--transport", arguments: downloadingCommands)
    func transport(command: String) async throws {
        let parsed = try parseDownloading(command, ["--transport", "async-http-client"])
        #expect(parsed.connection.transport == .asyncHTTPClient)
        let engine = parsed.connection.makeEngine(configuration: .commandLine, maxConcurrent: 2)
        #expect(engine.ownedTransport != nil)
        try await engine.ownedTransport?.shutdown()
        let nio = try parseDownloading(command, []).connection.makeEngine(configuration: .commandLine, maxConcurrent: 2)
        #expect(nio.transport is NIOTransport && nio.ownedTransport == nil)
    }

    @Test("--transport with another name is refused, naming it", arguments: downloadingCommands)
    func transportRefused(command: String) {
        expectUsageError([command, "--transport", "curl"], naming: ["--transport", "curl"])
    }

    @Test("--http1.1 and --http2; --http2 on nio starts AsyncHTTPClient beside it", arguments: downloadingCommands)
    func httpVersion(command: String) async throws {
        #expect(try configuration(command, ["--http1.1"]).httpVersion == .http1_1)
        var configuration = try configuration(command, ["--http2"])
        #expect(configuration.httpVersion == .http2)
        configuration.tls = .default
        let engine = try parseDownloading(command, ["--http2"]).connection.makeEngine(
            configuration: configuration, maxConcurrent: 1)
        #expect(engine.transport is NIOTransport && engine.ownedTransport != nil)
        try await engine.ownedTransport?.shutdown()
    }

    @Test("--http1.1 and --http2 are refused together", arguments: downloadingCommands)
    func httpVersionConflict(command: String) {
        expectUsageError([command, "--http1.1", "--http2"], naming: ["--http1.1", "--http2"])
    }

    @Test("--cacert, --capath, -k, --cert and --key set the TLS settings", arguments: downloadingCommands)
    func tls(command: String) throws {
        let parsed = try parseDownloading(
            command, ["--cacert", "ca.pem", "--capath", "certs", "-k", "--cert", "me.pem", "--key", "me.key"])
        let tls = try parsed.connection.tlsSettings(checkingFiles: false)
        #expect(tls.caFile == "ca.pem" && tls.caDirectory == "certs")
        #expect(!tls.verifiesPeer)
        #expect(tls.clientCertificateFile == "me.pem" && tls.clientKeyFile == "me.key")
        let insecure = try parseDownloading(command, ["--insecure"])
        #expect(try !insecure.connection.tlsSettings(checkingFiles: false).verifiesPeer)
    }

    @Test("--key without --cert is refused", arguments: downloadingCommands)
    func keyWithoutCertificate(command: String) {
        expectUsageError([command, "--key", "me.key"], naming: ["--key", "--cert"])
    }

    @Test("a CA file that cannot be read is reported against --cacert, with its path", arguments: downloadingCommands)
    func missingCAFile(command: String) throws {
        let parsed = try parseDownloading(command, ["--cacert", "/nonexistent/ca.pem"])
        let failure = #expect(throws: UsageFailure.self) { try parsed.connection.tlsSettings(checkingFiles: true) }
        #expect(failure?.problems.first?.origin == "--cacert")
        #expect(failure?.problems.first?.message.contains("/nonexistent/ca.pem") == true)
    }
}
