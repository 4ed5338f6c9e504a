import Foundation
import Haul
import Testing

@testable import HaulCommandLine

/// Proxies, credentials and cookies: the same in `get` and `worker`.
@Suite("Network options", .timeLimit(.minutes(1)))
struct NetworkOptionsTests {
    @Test("by default: the environment's proxies, no credentials, no cookies", arguments: downloadingCommands)
    func defaults(command: String) throws {
        let network = try parseDownloading(command, []).network
        #expect(try network.proxyConfiguration(environment: [:]) == .none)
        let fromEnvironment = try network.proxyConfiguration(environment: ["http_proxy": "http://proxy:3128"])
        #expect(fromEnvironment.http == (try Proxy(url: "http://proxy:3128")))
        #expect(try network.readNetrc(environment: [:]) == nil)
        #expect(try network.loadCookies() == nil)
    }

    @Test("-x/--proxy and --noproxy set the engine's proxies", arguments: downloadingCommands)
    func proxy(command: String) throws {
        let network = try parseDownloading(
            command, ["-x", "socks5h://user:secret@proxy:1080", "--noproxy", "localhost,10.0.0.0/8"]
        ).network
        var configuration = Downloader.Configuration.commandLine
        try network.apply(to: &configuration, transport: .nio)
        let proxy = try Proxy(url: "socks5h://user:secret@proxy:1080")
        #expect(configuration.proxy == .all(proxy, except: NoProxyList("localhost,10.0.0.0/8")))
        let off = try parseDownloading(command, ["--proxy", ""]).network
        try off.apply(to: &configuration, transport: .nio)
        #expect(configuration.proxy == .none)
    }

    @Test("a proxy URL that is not one is reported against --proxy", arguments: downloadingCommands)
    func proxyRefused(command: String) throws {
        let network = try parseDownloading(command, ["--proxy", "ftp://proxy"]).network
        var configuration = Downloader.Configuration.commandLine
        let failure = #expect(throws: UsageFailure.self) { try network.apply(to: &configuration, transport: .nio) }
        #expect(failure?.problems.first?.origin == "--proxy")
        #expect(failure?.problems.first?.message.contains("ftp") == true)
    }

    @Test("-u/--user gives the URL's origin its credentials", arguments: downloadingCommands)
    func user(command: String) throws {
        let network = try parseDownloading(command, ["-u", "ann:secret"]).network
        #expect(network.credentialRule(netrc: nil).given == Credentials(user: "ann", password: "secret"))
        #expect(try parseDownloading(command, ["--user", "bob:pw"]).network.user == "bob:pw")
    }

    @Test(
        "--netrc-file, --netrc and --netrc-optional read the netrc file into the engine", arguments: downloadingCommands
    )
    func netrc(command: String) throws {
        try withScratchDirectory { directory in
            let file = directory.appendingPathComponent("netrc")
            try Data("machine example.org login ann password secret\n".utf8).write(to: file)
            var configuration = Downloader.Configuration.commandLine
            let network = try parseDownloading(command, ["--netrc-file", file.path]).network
            let netrc = try network.apply(to: &configuration, transport: .nio)
            #expect(netrc?.credentials(forHost: "example.org") == Credentials(user: "ann", password: "secret"))
            #expect(configuration.credentials != nil)
            #expect(network.netrcOverridesURLs)
            let required = try parseDownloading(command, ["--netrc"]).network
            #expect(try required.readNetrc(environment: ["NETRC": file.path]) != nil)
            let optional = try parseDownloading(command, ["--netrc-optional"]).network
            #expect(!optional.netrcOverridesURLs)
            #expect(try optional.readNetrc(environment: ["NETRC": file.path]) != nil)
            let absent = ["NETRC": directory.appendingPathComponent("none").path]
            #expect(try optional.readNetrc(environment: absent) == nil)
            let failure = #expect(throws: UsageFailure.self) { try required.readNetrc(environment: absent) }
            #expect(failure?.problems.first?.origin == "--netrc")
        }
    }

    @Test("a netrc file that does not exist is reported against --netrc-file", arguments: downloadingCommands)
    func netrcFileRefused(command: String) throws {
        let network = try parseDownloading(command, ["--netrc-file", "/nonexistent/netrc"]).network
        let failure = #expect(throws: UsageFailure.self) { try network.readNetrc() }
        #expect(failure?.problems.first?.origin == "--netrc-file")
        #expect(failure?.problems.first?.message.contains("/nonexistent/netrc") == true)
    }

    @Test("--netrc and --netrc-optional are refused together", arguments: downloadingCommands)
    func netrcConflict(command: String) {
        expectUsageError([command, "--netrc", "--netrc-optional"], naming: ["--netrc", "--netrc-optional"])
    }

    @Test("-b/--cookie and --cookie-jar give the engine a cookie jar", arguments: downloadingCommands)
    func cookies(command: String) throws {
        try withScratchDirectory { directory in
            let file = directory.appendingPathComponent("cookies.txt")
            try Data("example.org\tFALSE\t/\tFALSE\t0\tsession\tabc\n".utf8).write(to: file)
            var configuration = Downloader.Configuration.commandLine
            try parseDownloading(command, ["-b", file.path]).network.apply(to: &configuration, transport: .nio)
            #expect(configuration.cookies?.count == 1)
            let jarPath = directory.appendingPathComponent("jar.txt").path
            let jar = try parseDownloading(command, ["--cookie-jar", jarPath]).network
            #expect(jar.cookieJar == jarPath)
            try jar.apply(to: &configuration, transport: .nio)
            #expect(configuration.cookies?.count == 0)
            // The jar to be written may be the cookie file, not there yet.
            let same = try parseDownloading(command, ["--cookie", jarPath, "--cookie-jar", jarPath]).network
            #expect(try same.loadCookies()?.count == 0)
        }
    }

    @Test("a cookie file that does not exist is reported against -b/--cookie", arguments: downloadingCommands)
    func cookieFileRefused(command: String) throws {
        let network = try parseDownloading(command, ["--cookie", "/nonexistent/cookies.txt"]).network
        let failure = #expect(throws: UsageFailure.self) { try network.loadCookies() }
        #expect(failure?.problems.first?.origin == "-b/--cookie")
    }
}
