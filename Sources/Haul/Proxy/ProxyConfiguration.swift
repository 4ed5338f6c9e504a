public import Foundation

/// Which proxy, if any, each request goes through: one for `http` URLs, one for `https` URLs, and the hosts that
/// are reached directly.
///
/// ```swift
/// var configuration = Downloader.Configuration()
/// configuration.proxy = try .environment()          // http_proxy, https_proxy, all_proxy, no_proxy, as curl reads them
/// configuration.proxy = .all(try Proxy(url: "socks5h://127.0.0.1:1080"), except: NoProxyList("localhost,.internal"))
/// ```
///
/// The engine picks the proxy for every request, redirects included, and hands it to the transport with the request
/// (``TransportOptions/proxy``); queue limits per host count the origin, never the proxy.
public struct ProxyConfiguration: Sendable, Hashable {
    /// The proxy for `http` URLs.
    public var http: Proxy?
    /// The proxy for `https` URLs.
    public var https: Proxy?
    /// Hosts reached without a proxy.
    public var noProxy: NoProxyList

    /// Creates a configuration.
    public init(http: Proxy? = nil, https: Proxy? = nil, noProxy: NoProxyList = NoProxyList()) {
        self.http = http
        self.https = https
        self.noProxy = noProxy
    }

    /// No proxy: every request goes straight to its server. The default of ``Downloader/Configuration``.
    public static let none = ProxyConfiguration()

    /// One proxy for every scheme, except the hosts of `noProxy`.
    public static func all(_ proxy: Proxy, except noProxy: NoProxyList = NoProxyList()) -> ProxyConfiguration {
        ProxyConfiguration(http: proxy, https: proxy, noProxy: noProxy)
    }

    /// The proxies the environment names, read as curl reads them: `http_proxy` (lower case only: a CGI program
    /// gets a client's `Proxy:` header as `HTTP_PROXY`), `https_proxy` or `HTTPS_PROXY`, then `all_proxy` or
    /// `ALL_PROXY` for a scheme without its own, and `no_proxy` or `NO_PROXY`. Empty values count as unset.
    ///
    /// - Throws: ``ProxyError`` naming the variable whose value is not a usable proxy URL.
    public static func environment(
        _ environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(ProxyError) -> ProxyConfiguration {
        func value(_ names: String...) -> (name: String, value: String)? {
            for name in names {
                if let value = environment[name]?.trimmingCharacters(in: .whitespaces), !value.isEmpty {
                    return (name, value)
                }
            }
            return nil
        }
        func proxy(_ setting: (name: String, value: String)?) throws(ProxyError) -> Proxy? {
            guard let setting else { return nil }
            do {
                return try Proxy(url: setting.value)
            } catch {
                throw ProxyError("\(setting.name): \(error.message)")
            }
        }
        let all = try proxy(value("all_proxy", "ALL_PROXY"))
        return ProxyConfiguration(
            http: try proxy(value("http_proxy")) ?? all,
            https: try proxy(value("https_proxy", "HTTPS_PROXY")) ?? all,
            noProxy: NoProxyList(value("no_proxy", "NO_PROXY")?.value ?? ""))
    }

    /// The proxy a request for `url` goes through, or `nil` to go straight to the server.
    public func proxy(for url: URL) -> Proxy? {
        let chosen: Proxy?
        switch url.scheme?.lowercased() {
        case "http": chosen = http
        case "https": chosen = https
        default: return nil
        }
        guard let chosen, let host = url.host(percentEncoded: false) else { return nil }
        let port = url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80)
        return noProxy.matches(host: host, port: port) ? nil : chosen
    }
}
