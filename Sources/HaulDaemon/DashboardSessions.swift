import Crypto
import Foundation
import HaulDashboardAssets
import HaulOperations

/// The browsers signed in to the dashboard: each holds a random session cookie (`HttpOnly`, `SameSite=Strict`),
/// given for the daemon's secret through the sign-in form, and a CSRF token it must send with every call. The secret
/// itself stays out of the page, its script and every URL.
///
/// Sessions live in memory: a restart signs every browser out. One unused for ``idleLimit`` ends; past ``maximum``
/// the least recently used ends.
///
/// The cookie is named after the daemon's port (`haul_session_6800`): a browser sends a host's cookies to all its
/// ports, so daemons on one machine under one name would replace, and sign out, each other's.
final class DashboardSessions: Sendable {
    /// The cookie's name, once the port is known (``useCookieName(forPort:)``).
    var cookieName: String { name.withLock { $0 } }
    private let name = Locked("haul_session")
    /// The header a signed-in page sends its CSRF token in.
    static let csrfHeader = "x-haul-csrf"
    /// How long a session lasts unused.
    static let idleLimit: Duration = .seconds(12 * 3600)
    /// The most sessions kept at once.
    static let maximum = 64

    struct Session {
        var csrf: String
        var lastUse: ContinuousClock.Instant
    }

    /// Sessions by the digest of their cookie, so that finding one takes no time that depends on how much of a
    /// guessed cookie is right.
    private let sessions = Locked<[SHA256Digest: Session]>([:])

    /// Names the cookie after the port the daemon listens on: called once it is bound, before any request is read.
    func useCookieName(forPort port: Int) {
        name.withLock { $0 = "haul_session_\(port)" }
    }

    /// A new session: the cookie's value and the CSRF token.
    func start() -> (cookie: String, csrf: String) {
        let cookie = RPCSecret.randomValue(bytes: 32)
        let csrf = RPCSecret.randomValue(bytes: 32)
        let now = ContinuousClock.now
        sessions.withLock { sessions in
            sessions = sessions.filter { now - $0.value.lastUse < Self.idleLimit }
            if sessions.count >= Self.maximum, let oldest = sessions.min(by: { $0.value.lastUse < $1.value.lastUse }) {
                sessions[oldest.key] = nil
            }
            sessions[Self.digest(cookie)] = Session(csrf: csrf, lastUse: now)
        }
        return (cookie, csrf)
    }

    /// The CSRF token of the live session a request's `Cookie` header names, or `nil`; the session counts as used.
    func csrf(cookieHeader: String?) -> String? {
        guard let cookie = cookie(in: cookieHeader) else { return nil }
        let key = Self.digest(cookie)
        let now = ContinuousClock.now
        return sessions.withLock { sessions in
            guard let session = sessions[key] else { return nil }
            guard now - session.lastUse < Self.idleLimit else {
                sessions[key] = nil
                return nil
            }
            sessions[key]?.lastUse = now
            return session.csrf
        }
    }

    /// Whether a request with `cookieHeader` and the CSRF token `csrf` comes from a signed-in page.
    func isSignedIn(cookieHeader: String?, csrf given: String?) -> Bool {
        guard let given, let csrf = csrf(cookieHeader: cookieHeader) else { return false }
        return RPCSecret(csrf)?.matches(given) ?? false
    }

    /// Ends the session `cookieHeader` names.
    func end(cookieHeader: String?) {
        guard let cookie = cookie(in: cookieHeader) else { return }
        _ = sessions.withLock { $0.removeValue(forKey: Self.digest(cookie)) }
    }

    /// The value of the session cookie in a `Cookie` header.
    func cookie(in header: String?) -> String? {
        guard let header else { return nil }
        let cookieName = self.cookieName
        for pair in header.split(separator: ";") {
            let trimmed = pair.trimmingCharacters(in: .whitespaces)
            guard let equals = trimmed.firstIndex(of: "="), trimmed[..<equals] == cookieName else { continue }
            let value = trimmed[trimmed.index(after: equals)...]
            if !value.isEmpty { return String(value) }
        }
        return nil
    }

    /// The `Set-Cookie` value that gives a browser `cookie`, or (for `nil`) takes it away.
    func setCookie(_ cookie: String?, secure: Bool) -> String {
        var value = "\(cookieName)=\(cookie ?? ""); Path=/; HttpOnly; SameSite=Strict"
        if cookie == nil { value += "; Max-Age=0" }
        if secure { value += "; Secure" }
        return value
    }

    private static func digest(_ cookie: String) -> SHA256Digest { SHA256.hash(data: Data(cookie.utf8)) }
}

/// The dashboard's files, compiled into the binary from `Sources/HaulDashboardAssets/assets`.
enum DashboardFiles {
    struct File: Sendable {
        let contentType: String
        let bytes: [UInt8]
    }

    /// Every file, by the path it is served at.
    static let byPath: [String: File] = {
        var files: [String: File] = [:]
        for index in 0..<haul_dashboard_asset_count {
            let asset = haul_dashboard_assets[index]
            files[String(cString: asset.path)] = File(
                contentType: String(cString: asset.contentType),
                bytes: Array(UnsafeBufferPointer(start: asset.bytes, count: asset.count)))
        }
        return files
    }()

    /// What a browser is told with every file: run no script and load nothing but the daemon's own (no inline
    /// script, no other origin), show it in no frame (clickjacking), guess no type, send no referrer.
    static let securityHeaders: [(String, String)] = [
        (
            "Content-Security-Policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
                + "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        ),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "DENY"),
        ("Referrer-Policy", "no-referrer"),
        ("Cache-Control", "no-cache"),
    ]
}
