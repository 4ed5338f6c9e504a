import Crypto
import Foundation
package import HaulOperations
public import Prometheus

/// `/metrics`, `/healthz` and `/readyz`, answered for any HTTP server: ``MonitoringServer`` on a listener of its own,
/// or `haul daemon`'s RPC server beside its other paths.
///
/// - `GET /healthz`: 200 while the process answers (liveness).
/// - `GET /readyz`: 200 when every readiness check passes, else 503; the body names each check and, for a failing
///   one, why (`{"ready": false, "checks": {"database": "…", "journal": "ok"}}`).
/// - `GET /metrics`: the registry in Prometheus's text format, after the `refresh` given at
///   creation ran. With a bearer token, only a request carrying `Authorization: Bearer TOKEN` (Prometheus's
///   `authorization.credentials_file`) gets it; others get 401, held back (one wrong token after another, each
///   `unauthorizedDelay`) so that the token cannot be guessed at speed.
public final class MonitoringEndpoint: Sendable {
    /// An answer to give.
    public struct Response: Sendable {
        /// The HTTP status code.
        public var status: Int
        /// Headers besides the length.
        public var headers: [(String, String)]
        /// The body.
        public var body: [UInt8]
    }

    /// One thing `/readyz` checks: `nil` when it is fine, else why not.
    public struct ReadinessCheck: Sendable {
        /// The check's name in `/readyz`'s answer (`database`, `journal`).
        public var name: String
        /// Runs the check.
        public var check: @Sendable () async -> String?

        /// A check named `name`.
        public init(_ name: String, check: @escaping @Sendable () async -> String?) {
            self.name = name
            self.check = check
        }
    }

    /// The metrics served, for a `PrometheusMetricsFactory(registry:)`.
    public let registry: PrometheusCollectorRegistry
    private let tokenDigest: SHA256.Digest?
    private let readiness: [ReadinessCheck]
    private let refresh: @Sendable () async -> Void
    /// How long a readiness check may take before it counts as failed.
    let checkTimeout: Duration
    /// How long the answer to a wrong token is held back, after those before it.
    let unauthorizedDelay: Duration
    /// The wrong tokens' answers held back one after another; a server that checks another secret too (`haul
    /// daemon`'s RPC) shares it, so that guesses spread over both wait alike.
    package let guesses = GuessThrottle()

    /// Serves `registry`; `/metrics` only to a request bearing `bearerToken` when one is given; `/readyz` runs
    /// `readiness`; `refresh` brings gauges up to date before each scrape. A wrong token's 401 is held back by
    /// `unauthorizedDelay`.
    public init(
        registry: PrometheusCollectorRegistry, bearerToken: String? = nil, readiness: [ReadinessCheck] = [],
        checkTimeout: Duration = .seconds(3), unauthorizedDelay: Duration = .seconds(1),
        refresh: @escaping @Sendable () async -> Void = {}
    ) {
        self.registry = registry
        self.unauthorizedDelay = unauthorizedDelay
        self.tokenDigest = bearerToken.map { SHA256.hash(data: Array($0.utf8)) }
        self.readiness = readiness
        self.checkTimeout = checkTimeout
        self.refresh = refresh
    }

    /// Whether `path` (without its query) is one of the three.
    public static func serves(_ path: String) -> Bool {
        ["/metrics", "/healthz", "/readyz"].contains(Self.route(path))
    }

    private static func route(_ path: String) -> Substring {
        path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
    }

    /// The answer to `method` `path` with the request's `Authorization` header, or `nil` when the path is not one
    /// of the three. A wrong token's answer comes after its hold (see ``guesses``).
    public func respond(method: String, path: String, authorization: String?) async -> Response? {
        guard let (response, hold) = await answer(method: method, path: path, authorization: authorization) else {
            return nil
        }
        if let hold {
            // Not cut short by a cancellation: the answer would then tell a wrong token at once.
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                Task.detached {
                    try? await Task.sleep(for: hold)
                    done.resume()
                }
            }
        }
        return response
    }

    /// Like ``respond(method:path:authorization:)``, but a wrong token's answer comes at once with how long to hold
    /// it back (counted among the guesses already from now): a server that holds it itself can give the connection's
    /// place to a new one meanwhile, so that guesses cannot lock a scraper with the token out.
    package func answer(
        method: String, path: String, authorization: String?
    ) async -> (response: Response, hold: Duration?)? {
        let route = Self.route(path)
        guard Self.serves(String(route)) else { return nil }
        guard method == "GET" || method == "HEAD" else {
            return (Self.text(405, "only GET and HEAD are answered here\n", headers: [("Allow", "GET, HEAD")]), nil)
        }
        switch route {
        case "/healthz":
            return (Self.json(200, #"{"status":"alive"}"#), nil)
        case "/readyz":
            return (await ready(), nil)
        default:
            guard authorized(authorization) else {
                let unauthorized = Self.text(
                    401, "Unauthorized: send the secret as Authorization: Bearer\n",
                    headers: [("WWW-Authenticate", #"Bearer realm="haul""#)])
                return (unauthorized, guesses.hold(1, each: unauthorizedDelay))
            }
            await refresh()
            let metrics = Response(
                status: 200, headers: [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")],
                body: registry.emitToBuffer())
            return (metrics, nil)
        }
    }

    private func authorized(_ header: String?) -> Bool {
        guard let tokenDigest else { return true }
        guard let header, header.count > 7, header.prefix(7).lowercased() == "bearer " else { return false }
        let given = SHA256.hash(data: Array(header.dropFirst(7).trimmingCharacters(in: .whitespaces).utf8))
        // Digests of equal length compared without an early exit: the time says nothing of the token.
        var difference: UInt8 = 0
        for (a, b) in zip(given, tokenDigest) { difference |= a ^ b }
        return difference == 0
    }

    /// Runs every check at once, each bounded by ``checkTimeout``.
    private func ready() async -> Response {
        let timeout = checkTimeout
        let results = await withTaskGroup(of: (Int, String?).self) { group in
            for (index, check) in readiness.enumerated() {
                group.addTask {
                    await withTaskGroup(of: String??.self) { race in
                        race.addTask { .some(await check.check()) }
                        race.addTask {
                            try? await Task.sleep(for: timeout)
                            return Task.isCancelled ? nil : .some("no answer within \(timeout)")
                        }
                        let first = await race.next() ?? nil
                        race.cancelAll()
                        return (index, first ?? nil)
                    }
                }
            }
            var results = [String?](repeating: nil, count: readiness.count)
            for await (index, problem) in group { results[index] = problem }
            return results
        }
        var checks: [String: String] = [:]
        for (check, problem) in zip(readiness, results) { checks[check.name] = problem ?? "ok" }
        let ready = results.allSatisfy { $0 == nil }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        struct Body: Encodable {
            var ready: Bool
            var checks: [String: String]
        }
        let body = (try? encoder.encode(Body(ready: ready, checks: checks))).map { Array($0) } ?? []
        return Response(
            status: ready ? 200 : 503, headers: [("Content-Type", "application/json"), ("Cache-Control", "no-store")],
            body: body)
    }

    private static func json(_ status: Int, _ text: String) -> Response {
        Response(
            status: status, headers: [("Content-Type", "application/json"), ("Cache-Control", "no-store")],
            body: Array(text.utf8))
    }

    static func text(_ status: Int, _ text: String, headers: [(String, String)] = []) -> Response {
        Response(
            status: status, headers: [("Content-Type", "text/plain; charset=utf-8")] + headers, body: Array(text.utf8))
    }
}
