import ArgumentParser
import Foundation
import Haul

/// The network in between: proxies, credentials and cookies, as curl spells them, for `haul get` and `haul worker`.
struct NetworkOptions: ParsableArguments {
    @Option(
        name: [.customShort("x"), .customLong("proxy")],
        help: ArgumentHelp(
            "Send every request through this proxy: http://, https:// (TLS to the proxy), socks5:// or socks5h:// "
                + "(the proxy resolves host names); USER:PASSWORD@ for its authentication. \"\" turns proxies off "
                + "(default: $http_proxy, $https_proxy, $all_proxy, as curl reads them).",
            valueName: "URL"))
    var proxy: String?

    @Option(
        name: .customLong("noproxy"),
        help: ArgumentHelp(
            "Hosts reached without the proxy, comma-separated: names (with their subdomains), IP addresses or "
                + "networks (10.0.0.0/8), optionally :PORT; * for all (default: $no_proxy).",
            valueName: "LIST"))
    var noProxy: String?

    @Option(
        name: [.customShort("u"), .customLong("user")],
        help: ArgumentHelp(
            "Credentials sent (HTTP Basic) to the origin of each URL, never to another one a redirect leads to.",
            valueName: "USER:PASSWORD"))
    var user: String?

    @Flag(
        name: .customLong("netrc"),
        help: "Take credentials from ~/.netrc (or $NETRC), the file must exist; the URLs' own are ignored.")
    var netrc = false

    @Option(
        name: .customLong("netrc-file"),
        help: ArgumentHelp("Like --netrc, with this file.", valueName: "FILE"))
    var netrcFile: String?

    @Flag(
        name: .customLong("netrc-optional"),
        help: "Take credentials from the netrc file if it exists, for URLs that carry none.")
    var netrcOptional = false

    @Option(
        name: [.customShort("b"), .customLong("cookie")],
        help: ArgumentHelp(
            "Send the cookies of this Netscape cookie file (curl's and wget's format) where they match.",
            valueName: "FILE"))
    var cookieFile: String?

    @Option(
        name: .customLong("cookie-jar"),
        help: ArgumentHelp(
            "Keep the cookies servers set during the run (used by later requests) and write them all to FILE at "
                + "the end (mode 0600). (-c is --continue, as in wget.)",
            valueName: "FILE"))
    var cookieJar: String?

    func validate() throws {
        if netrc && netrcOptional { throw ValidationError("--netrc and --netrc-optional cannot be combined") }
    }

    /// Sets the proxies (none with `transport`'s system stack, which takes the system's), the netrc file's
    /// credentials and the cookie jar of `configuration`, reading the files the options name.
    ///
    /// - Returns: The netrc file read, for ``credentialRule(netrc:)``.
    @discardableResult
    func apply(to configuration: inout Downloader.Configuration, transport: TransportChoice) throws(UsageFailure)
        -> Netrc?
    {
        configuration.proxy = transport.isSystemStack ? .none : try proxyConfiguration()
        let netrc = try readNetrc()
        configuration.credentials = netrc
        configuration.cookies = try loadCookies()
        return netrc
    }

    /// The proxies of the options, else of the environment.
    func proxyConfiguration(
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(UsageFailure) -> ProxyConfiguration {
        var configuration: ProxyConfiguration
        switch proxy {
        case ""?:
            return .none
        case let given?:
            do {
                configuration = .all(try Proxy(url: given))
            } catch {
                throw UsageFailure([InputProblem(origin: "--proxy", message: error.message)])
            }
        case nil:
            do {
                configuration = try .environment(environment)
            } catch {
                throw UsageFailure([InputProblem(origin: "environment", message: error.message)])
            }
        }
        if let noProxy { configuration.noProxy = NoProxyList(noProxy) }
        return configuration
    }

    /// The netrc file the options ask for, read; `nil` without one (or with `--netrc-optional` and no file).
    func readNetrc(environment: [String: String] = ProcessInfo.processInfo.environment) throws(UsageFailure)
        -> Netrc?
    {
        let origin = netrcFile != nil ? "--netrc-file" : netrcOptional ? "--netrc-optional" : "--netrc"
        guard netrc || netrcOptional || netrcFile != nil else { return nil }
        guard let file = netrcFile.map({ URL(fileURLWithPath: $0) }) ?? Netrc.defaultFile(environment: environment)
        else {
            if netrcOptional { return nil }
            throw UsageFailure([InputProblem(origin: origin, message: "no home directory to find .netrc in")])
        }
        if netrcOptional && !FileManager.default.fileExists(atPath: file.path) { return nil }
        do {
            return try Netrc(contentsOf: file)
        } catch {
            throw UsageFailure([InputProblem(origin: origin, message: error.description)])
        }
    }

    /// Whether the netrc file's credentials replace those in the URLs (`--netrc`, `--netrc-file`), as curl's
    /// required mode does, rather than only filling in for URLs without any (`--netrc-optional`).
    var netrcOverridesURLs: Bool { !netrcOptional }

    /// How each request gets its credentials: see ``CredentialRule``.
    func credentialRule(netrc: Netrc?) -> CredentialRule {
        CredentialRule(
            given: user.map(Credentials.init(userColonPassword:)), netrc: netrc, netrcOverridesURLs: netrcOverridesURLs)
    }

    /// The cookie jar of the options: the cookie file's cookies, or empty with only `--cookie-jar`; `nil` without
    /// either. A cookie file that does not exist is an error, unless it is the jar to be written.
    func loadCookies() throws(UsageFailure) -> CookieJar? {
        guard cookieFile != nil || cookieJar != nil else { return nil }
        let jar = CookieJar()
        if let cookieFile {
            let path = URL(fileURLWithPath: cookieFile).standardizedFileURL.path
            let jarPath = cookieJar.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
            if path == jarPath && !FileManager.default.fileExists(atPath: path) { return jar }
            do {
                try jar.load(contentsOf: URL(fileURLWithPath: cookieFile))
            } catch {
                throw UsageFailure([InputProblem(origin: "-b/--cookie", message: String(describing: error))])
            }
        }
        return jar
    }
}

/// Gives a request its credentials: `--user`'s, else (with `--netrc`) the netrc file's for its host, else those of
/// its URL, where a user without a password takes the password from the netrc file.
struct CredentialRule: Sendable {
    var given: Credentials?
    var netrc: Netrc?
    var netrcOverridesURLs: Bool

    func apply(to request: inout DownloadRequest) {
        guard given != nil || netrc != nil else { return }
        let host = request.url.host(percentEncoded: false) ?? ""
        if let given {
            request.credentials =
                given.password.isEmpty ? netrc?.credentials(forHost: host, user: given.user) ?? given : given
        } else if let netrc {
            let own = request.credentials
            if netrcOverridesURLs {
                request.credentials = netrc.credentials(forHost: host, user: own?.user)
            } else if own == nil || own?.password.isEmpty == true {
                request.credentials = netrc.credentials(forHost: host, user: own?.user) ?? own
            }
        }
    }
}
