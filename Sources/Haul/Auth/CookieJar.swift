public import Foundation
import HaulOperations

#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Cookies as curl and wget keep them: received with `Set-Cookie`, sent back with `Cookie`, and read from and
/// written to a Netscape cookie file (curl's `-b FILE` and `-c FILE`, wget's `--load-cookies`/`--save-cookies`).
///
/// One jar is shared by many downloads at once; every method may be called from any thread. Matching follows
/// RFC 6265 with the Public Suffix List compiled in: a `Domain` attribute that is a public suffix (`com`, `co.uk`,
/// `github.io`) other than the host itself is refused, as curl and wget2 refuse it; one that is the host makes a
/// cookie for that host only.
public final class CookieJar: Sendable {
    private struct State {
        var cookies: [Cookie.Key: Cookie] = [:]
        var nextSequence: UInt64 = 0
        /// How many cookies each domain field has: a server's cookies are bounded per domain.
        var perDomain: [String: Int] = [:]

        /// Adds or replaces a cookie; a replacement keeps the creation time and place of the one it replaces
        /// (RFC 6265 5.3 step 11), so the `Cookie` header order does not change when a server refreshes it.
        mutating func insert(_ cookie: Cookie) {
            var cookie = cookie
            if let old = cookies[cookie.key] {
                cookie.creation = old.creation
                cookie.sequence = old.sequence
            } else {
                cookie.sequence = nextSequence
                nextSequence += 1
                perDomain[cookie.domain, default: 0] += 1
            }
            cookies[cookie.key] = cookie
        }

        mutating func remove(_ key: Cookie.Key) {
            guard let removed = cookies.removeValue(forKey: key) else { return }
            perDomain[removed.domain, default: 1] -= 1
            if perDomain[removed.domain] == 0 { perDomain[removed.domain] = nil }
        }

        /// Adds or replaces a cookie a server set, then evicts the oldest cookies beyond the bounds (RFC 6265 5.3
        /// step 12): those of its domain beyond ``CookieJar/maximumPerDomain``, then any beyond
        /// ``CookieJar/maximumStored``. A server's own host-only cookies are a domain of their own, which a flood of
        /// cookies for the parent domain from another host does not evict.
        mutating func insertBounded(_ cookie: Cookie) {
            insert(cookie)
            if perDomain[cookie.domain, default: 0] > CookieJar.maximumPerDomain,
                let oldest = cookies.values.filter({ $0.domain == cookie.domain }).min(by: { $0.sequence < $1.sequence }
                )
            {
                remove(oldest.key)
            }
            if cookies.count > CookieJar.maximumStored,
                let oldest = cookies.values.min(by: { $0.sequence < $1.sequence })
            {
                remove(oldest.key)
            }
        }

        /// Whether a Secure cookie is stored with `cookie`'s name, a domain that domain-matches its domain (or the
        /// other way round), and a path that `cookie`'s path path-matches.
        func shadowsSecure(_ cookie: Cookie) -> Bool {
            cookies.values.contains { stored in
                stored.secure && stored.name == cookie.name
                    && (Cookie.domain(stored.domain, matches: cookie.domain)
                        || Cookie.domain(cookie.domain, matches: stored.domain))
                    && Cookie.path(cookie.path, matches: stored.path)
            }
        }

        mutating func removeExpired(at now: Date) {
            let expired = cookies.compactMap { $0.value.isExpired(at: now) ? $0.key : nil }
            for key in expired { remove(key) }
        }
    }

    // I/O never happens under this lock: files are read before taking it and written from a snapshot.
    private let state = Locked(State())

    /// Creates an empty jar.
    public init() {}

    /// The number of cookies stored.
    ///
    /// Cookies that expired since the jar last looked at them are counted until the next ``load(contentsOf:now:)``,
    /// ``cookieHeader(for:now:)``, ``store(setCookie:from:now:)`` or ``write(to:now:)`` drops them.
    public var count: Int {
        state.withLock { $0.cookies.count }
    }

    /// Reads a Netscape cookie file (curl's `-b FILE` / `--cookie-jar` format, wget's `--load-cookies`) and adds
    /// its cookies to the jar, replacing stored ones with the same name, domain and path.
    ///
    /// Each line holds 7 TAB-separated fields: domain (a leading dot is allowed), include-subdomains (`TRUE` or
    /// `FALSE`), path, secure (`TRUE` or `FALSE`), expiry (seconds since 1970, `0` for a session cookie), name and
    /// value. A `#HttpOnly_` prefix on the domain marks an HttpOnly cookie; other lines starting with `#` and blank
    /// lines are skipped. As curl does, a line of 6 fields is a cookie with an empty value. Expired cookies are
    /// dropped. The file is read whole before any cookie is added, so a file that fails adds none.
    ///
    /// - Parameters:
    ///   - file: The cookie file.
    ///   - now: The time against which expiry is checked.
    /// - Throws: ``CookieFileError`` when the file cannot be read, is not UTF-8, or has a malformed line (with its
    ///   1-based number and what is wrong; never the cookie's value).
    public func load(contentsOf file: URL, now: Date = Date()) throws {
        let path = file.path(percentEncoded: false)
        let bytes = try CookieFileIO.contents(ofPath: path)
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw CookieFileError(path: path, line: nil, message: "the cookie file is not UTF-8 text")
        }
        var cookies: [Cookie] = []
        for (index, line) in Cookie.split(text[...], at: "\n").enumerated() {
            do {
                if let cookie = try Cookie.parseFileLine(line, now: now) { cookies.append(cookie) }
            } catch {
                throw CookieFileError(path: path, line: index + 1, message: error.message)
            }
        }
        state.withLock { state in
            state.removeExpired(at: now)
            for cookie in cookies { state.insert(cookie) }
        }
    }

    /// The value of the `Cookie` header for a request to `url` (`a=1; b=2`), or `nil` when no cookie applies.
    ///
    /// A cookie applies when its domain matches the host (exactly for a host-only cookie; the domain or one of its
    /// subdomains otherwise), its path path-matches the request path (RFC 6265 5.1.4), it has not expired, and,
    /// when it is Secure, `url` is `https`. Cookies with longer paths come first, then the earlier created
    /// (RFC 6265 5.4). As in curl, at most 150 cookies and 8190 bytes go: those that would not fit are left out.
    ///
    /// - Parameters:
    ///   - url: The URL the request goes to.
    ///   - now: The time against which expiry is checked.
    public func cookieHeader(for url: URL, now: Date = Date()) -> String? {
        guard let host = Cookie.host(of: url) else { return nil }
        let path = Cookie.requestPath(of: url)
        let secure = HTTPRules.isSecure(url)
        let matching = state.withLock { state in
            state.removeExpired(at: now)
            return state.cookies.values.filter { $0.applies(toHost: host, path: path, secure: secure) }
        }
        guard !matching.isEmpty else { return nil }
        let ordered = matching.sorted { first, second in
            if first.path.utf8.count != second.path.utf8.count {
                return first.path.utf8.count > second.path.utf8.count
            }
            if first.creation != second.creation { return first.creation < second.creation }
            return first.sequence < second.sequence
        }
        // Bounded as curl bounds it (CVE-2022-32205): one host that sets thousands of cookies for its domain must not
        // make every request to the domain's other hosts one that servers refuse. Longer paths go first, so the most
        // specific cookies are the ones kept.
        var header = ""
        var sent = 0
        for cookie in ordered {
            let pair = "\(cookie.name)=\(cookie.value)"
            let added = (sent == 0 ? 0 : 2) + pair.utf8.count
            guard sent < Self.maximumCookiesSent, header.utf8.count + added <= Self.maximumHeaderLength else { break }
            header += (sent == 0 ? "" : "; ") + pair
            sent += 1
        }
        return header
    }

    /// The most `Set-Cookie` fields of one response that are read (curl's `MAX_SET_COOKIE_AMOUNT`).
    static let maximumPerResponse = 50
    /// The most cookies servers keep for one domain field (Chromium's bound): the oldest go first.
    static let maximumPerDomain = 180
    /// The most cookies servers keep in the jar (Chromium's bound): the oldest go first. Cookies read from a file
    /// are the user's, all kept; one a server then sets may evict the oldest of them beyond this bound.
    static let maximumStored = 3000

    /// The most cookies one `Cookie` header carries (curl's `MAX_COOKIE_SEND_AMOUNT`).
    static let maximumCookiesSent = 150
    /// The longest `Cookie` header value sent, in bytes (curl's `MAX_COOKIE_HEADER_LEN`).
    static let maximumHeaderLength = 8190

    /// Stores the cookies of `Set-Cookie` field values received in a response from `url`, as RFC 6265 sections
    /// 5.2 and 5.3 say, and silently ignores those a user agent must refuse.
    ///
    /// `Expires` takes the RFC 1123, RFC 850, asctime and `dd-MMM-yyyy` date forms; `Max-Age` wins over it, and
    /// `Max-Age` of 0 or less, like any date in the past, deletes the stored cookie with the same name, domain and
    /// path. A `Domain` (a leading dot is ignored) must domain-match the host; a public suffix (`co.uk`, and any
    /// single label) must be the host itself, and for an IP address it must equal it. A cookie from an `http` URL
    /// that would replace or shadow a stored Secure cookie of the same name is ignored. Without a `Path` starting with
    /// `/`, the path is the directory of the request path. A Secure cookie from an `http` URL, a cookie without `=`,
    /// with an empty name, with a control character, or whose name and value exceed 4096 bytes, is refused. As in
    /// curl, only the first 50 fields of a response are read; as in Chromium, servers' cookies are kept to 180 for
    /// one domain field and 3,000 in the jar, the oldest evicted first.
    ///
    /// - Parameters:
    ///   - values: The `Set-Cookie` field values of the response, one cookie each.
    ///   - url: The URL that answered with them (after redirects, the one that sent these fields).
    ///   - now: The time Max-Age counts from and expiry is checked against.
    public func store(setCookie values: [String], from url: URL, now: Date = Date()) {
        guard let host = Cookie.host(of: url) else { return }
        let requestPath = Cookie.requestPath(of: url)
        let secure = HTTPRules.isSecure(url)
        // As curl: the first 50 of one response (a header of thousands is no site's need).
        let cookies = values.prefix(Self.maximumPerResponse).compactMap { value in
            Self.cookie(fromSetCookie: value, host: host, requestPath: requestPath, secure: secure, now: now)
        }
        state.withLock { state in
            state.removeExpired(at: now)
            for cookie in cookies {
                // A plain-text response must not replace (or delete) a Secure cookie of the same name that its cookie
                // would shadow: anyone who can answer plain http could fix an https session (RFC 6265bis 5.7).
                if !secure, state.shadowsSecure(cookie) { continue }
                if cookie.isExpired(at: now) {
                    state.remove(cookie.key)
                } else {
                    state.insertBounded(cookie)
                }
            }
        }
    }

    /// Writes every unexpired cookie to `file` in the Netscape format curl and wget read, replacing the file.
    ///
    /// Session cookies are written with expiry 0, HttpOnly ones with the `#HttpOnly_` prefix, domain cookies with a
    /// leading dot and `TRUE`, host-only ones with `FALSE`. The file is replaced atomically: the cookies go to a
    /// temporary file of mode 0600 in the same directory (they are secrets), which is then renamed over `file`.
    ///
    /// - Parameters:
    ///   - file: Where to write; its directory must exist.
    ///   - now: The time against which expiry is checked.
    /// - Throws: ``CookieFileError`` naming `file` when it cannot be written; no temporary file is left behind.
    public func write(to file: URL, now: Date = Date()) throws {
        let cookies = state.withLock { state in
            state.removeExpired(at: now)
            return Array(state.cookies.values)
        }
        // In the order they were first stored, so a file read back sends its cookies in the same order.
        var text = Cookie.fileHeader
        for cookie in cookies.sorted(by: { $0.sequence < $1.sequence }) {
            text += cookie.fileLine + "\n"
        }
        try CookieFileIO.replace(file, with: Array(text.utf8))
    }

    /// The cookie a `Set-Cookie` value makes for a response from `host`, or `nil` when it must be ignored.
    private static func cookie(
        fromSetCookie value: String, host: String, requestPath: String, secure: Bool, now: Date
    ) -> Cookie? {
        guard let parsed = Cookie.parseSetCookie(value) else { return nil }
        // A plain-text response could otherwise plant a cookie that https requests trust.
        if parsed.secure && !secure { return nil }

        var domain = host
        var hostOnly = true
        if let attribute = parsed.domain {
            if Cookie.isIPAddress(host) || PublicSuffixes.isPublicSuffix(attribute) {
                // No subdomains to share with: an IP address has none, and a public suffix (`com`, `co.uk`,
                // `github.io`) is everybody's: accepted only from that very host and then kept to it.
                guard attribute == host else { return nil }
            } else {
                guard Cookie.domain(host, matches: attribute) else { return nil }
                domain = attribute
                hostOnly = false
            }
        }
        let path = parsed.path ?? Cookie.defaultPath(of: requestPath)
        guard Cookie.isStorable(path) else { return nil }

        let expires: Date?
        if let maxAge = parsed.maxAge {
            expires = maxAge <= 0 ? .distantPast : now.addingTimeInterval(TimeInterval(maxAge))
        } else {
            expires = parsed.expires
        }
        return Cookie(
            name: parsed.name, value: parsed.value, domain: domain, hostOnly: hostOnly, path: path,
            secure: parsed.secure, httpOnly: parsed.httpOnly, expires: expires, creation: now, sequence: 0)
    }
}

/// Why a cookie file could not be read or written.
///
/// Its description is `PATH:LINE: message` (`PATH: message` when no line is concerned), and never shows a
/// cookie's value.
public struct CookieFileError: Error, Sendable, CustomStringConvertible, LocalizedError {
    /// The path of the cookie file.
    public let path: String
    /// The 1-based number of the malformed line, or `nil` when the file as a whole failed.
    public let line: Int?
    /// What is wrong.
    public let message: String

    init(path: String, line: Int?, message: String) {
        self.path = path
        self.line = line
        self.message = message
    }

    /// `PATH:LINE: message`, or `PATH: message`.
    public var description: String {
        if let line { return "\(path):\(line): \(message)" }
        return "\(path): \(message)"
    }

    /// Same as ``description``.
    public var errorDescription: String? { description }
}

/// Reading and replacing cookie files, with errors that name the file.
private enum CookieFileIO {
    static func contents(ofPath path: String) throws(CookieFileError) -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw failure(path, "cannot open the cookie file", errno) }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count == 0 { return bytes }
            if count < 0 {
                if errno == EINTR { continue }
                throw failure(path, "cannot read the cookie file", errno)
            }
            bytes += buffer[..<count]
        }
    }

    /// Replaces `file` with `bytes` (``PrivateFile``): a reader or a crash sees the old file or the new one, never a
    /// part; 0600, so the cookies are never readable by others.
    static func replace(_ file: URL, with bytes: [UInt8]) throws(CookieFileError) {
        let path = file.path(percentEncoded: false)
        do {
            try PrivateFile.replace(path, with: bytes)
        } catch {
            let what =
                switch error.step {
                case .create: "cannot create a temporary file beside it"
                case .setMode: "cannot set mode 0600"
                case .write: "cannot write the cookie file"
                case .replace: "cannot replace the cookie file"
                }
            throw failure(path, what, error.code)
        }
    }

    private static func failure(_ path: String, _ what: String, _ code: Int32) -> CookieFileError {
        CookieFileError(path: path, line: nil, message: "\(what): \(String(cString: strerror(code)))")
    }
}
