import Foundation
import Haul
import HTTPTypes

/// What an `addUri` call asks for, checked and made into a `DownloadRequest`: its URIs, its options (the daemon's
/// defaults under the call's own), and its destination confined to the download root.
struct DownloadPlan {
    var uris: [URL]
    /// The options as given (a cumulative one's values joined by newlines), for `getOption`.
    private(set) var options: [String: String]

    /// The options as stored: without passwords, without header fields that carry secrets, and with a
    /// proxy's password hidden.
    private(set) var storedOptions: [String: String]

    /// The directory the file goes into, inside the root (``directory(_:root:)``).
    let directory: String
    private let directoryURL: URL

    /// `options` (a cumulative one's values joined by newlines) without passwords, without header fields that carry
    /// secrets, and with a proxy's password hidden: what may be stored or shown.
    static func withoutSecrets(_ options: [String: String]) -> [String: String] {
        var stored = options.filter { !Aria2Options.secret.contains($0.key) }
        if let proxy = stored["all-proxy"] { stored["all-proxy"] = URLText.redacted(proxy, mask: "...") }
        if let header = stored["header"] {
            let kept = header.split(separator: "\n").filter { !Self.isSecretHeader(String($0)) }
            stored["header"] = kept.isEmpty ? nil : kept.joined(separator: "\n")
        }
        return stored
    }

    /// `options` as written where they are read again (a session file, the kept global options): without secrets
    /// (``withoutSecrets(_:)``), and without the user names that go with the passwords left out, so that what is read
    /// back is no credential rather than half of one.
    static func withoutCredentials(_ options: [String: String]) -> [String: String] {
        var kept = withoutSecrets(options).filter { $0.key != "http-user" && $0.key != "all-proxy-user" }
        // Its user and password left out whole: a password masked as `...` would be read back as the password `...`.
        if let proxy = options["all-proxy"] { kept["all-proxy"] = withoutUserInfo(proxy) }
        return kept
    }

    /// A proxy URL as given (`[SCHEME://][USER[:PASSWORD]@]HOST[:PORT]`) without its user info.
    static func withoutUserInfo(_ proxy: String) -> String {
        let bytes = Array(proxy.utf8)
        let separator = Array("://".utf8)
        let start = bytes.indices.first { bytes[$0...].starts(with: separator) }.map { $0 + separator.count } ?? 0
        let end =
            bytes[start...].firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }
            ?? bytes.count
        guard let at = bytes[start..<end].lastIndex(of: UInt8(ascii: "@")) else { return proxy }
        return String(decoding: bytes[..<start] + bytes[(at + 1)...], as: UTF8.self)
    }

    /// Whether the download needs something ``storedOptions`` leaves out (a password, a secret header, a URI's user
    /// and password).
    var withholdsSecrets: Bool {
        storedOptions != options || uris.contains { $0.user != nil || $0.password != nil }
    }

    static func isSecretHeader(_ line: String) -> Bool {
        let name = line.split(separator: ":", maxSplits: 1).first.map(String.init) ?? ""
        return DownloadRequest.isSecretField(name.trimmingCharacters(in: .whitespaces))
    }
    var request: DownloadRequest
    var paused = false
    var gid: GID?
    /// `split`, and `max-connection-per-server` if given: what ``connections(split:perServer:uris:)`` counts the
    /// request's connections from, for these URIs or another call's (``reused(for:options:defaults:)``).
    private var split = 1
    private var perServer: Int?

    // Spelled right, so it is a valid field name.
    // swift-format-ignore: NeverForceUnwrap
    static let referer = HTTPField.Name("Referer")!

    /// The options a download takes that change what it does.
    static let supported: Set<String> = [
        "dir", "out", "split", "max-connection-per-server", "min-split-size", "max-download-limit", "header",
        "checksum", "user-agent", "referer", "lowest-speed-limit", "http-user", "http-passwd", "allow-overwrite",
        "auto-file-renaming", "pause", "gid", "max-tries", "retry-wait", "timeout", "connect-timeout", "all-proxy",
        "all-proxy-user", "all-proxy-passwd", "check-certificate", "ca-certificate", "conditional-get", "remote-time",
    ]

    /// aria2's options that ask for nothing Haul does not do already, or of nothing Haul has: a partial is always
    /// continued, space is never allocated ahead, nothing is uploaded, there is no control file to remove and no
    /// session to save on a timer (the store keeps every change), a download's checksum is always checked. Clients
    /// send them in bulk (`continue=true` in most configurations), so they are accepted and shown back.
    static let inertOptions: Set<String> = [
        "continue", "always-resume", "file-allocation", "max-upload-limit", "max-overall-upload-limit",
        "http-accept-gzip", "check-integrity", "max-file-not-found", "remove-control-file", "force-save",
        "max-download-result", "save-session-interval", "auto-save-interval", "optimize-concurrent-downloads",
        "log-level", "console-log-level", "disk-cache", "enable-mmap", "no-file-allocation-limit",
    ]

    /// Whether `name` is an option of a feature Haul does not have (BitTorrent, FTP, Metalink, DHT...), or one of
    /// ``inertOptions``: accepted and reported back, as front ends send them in bulk, and changing nothing.
    static func isInert(_ name: String) -> Bool {
        if inertOptions.contains(name) { return true }
        return [
            "bt-", "ftp-", "metalink-", "dht-", "seed-", "peer-", "enable-dht", "enable-peer-exchange", "follow-",
            "select-file", "index-out", "torrent-file", "listen-port", "on-bt-", "pause-metadata",
        ]
        .contains { name.hasPrefix($0) }
    }

    /// The plan of a download of `uris` with the `given` options over `defaults`, into `root`; the settings it
    /// changes start from `base`, the downloader's.
    init(
        uris: [String], options given: [String: [String]], defaults: [String: String], root: String,
        base: Downloader.Configuration
    ) throws(RPCError) {
        // A cumulative default (header) holds its values joined by newlines, as it is kept.
        var options = defaults.mapValues { $0.components(separatedBy: "\n") }
        options.merge(given) { _, new in new }
        for name in options.keys {
            guard Aria2Options.known.contains(name) else { throw RPCError("No such option: \(name)") }
            guard Self.supported.contains(name) || Self.isInert(name) else {
                throw RPCError("option \(name) is not supported by haul daemon")
            }
        }
        self.options = options.mapValues { $0.joined(separator: "\n") }
        storedOptions = Self.withoutSecrets(self.options)
        func last(_ name: String) -> String? { options[name]?.last }

        self.uris = try Self.urls(uris)
        directory = try Self.directory(last("dir"), root: root)
        directoryURL = URL(fileURLWithPath: directory, isDirectory: true)
        var request = DownloadRequest(
            url: self.uris[0], destination: try Self.destination(out: last("out"), in: directoryURL))
        request.mirrors = Array(self.uris.dropFirst())
        request.conflictPolicy =
            try Self.flag(last("allow-overwrite"), "allow-overwrite") == true
            ? .overwrite : try Self.flag(last("auto-file-renaming"), "auto-file-renaming") == false ? .fail : .rename
        if let split = last("split") {
            guard let count = Int(split), (1...64).contains(count) else {
                throw RPCError("split must be a number from 1 to 64, not '\(split)'")
            }
            request.maxConnections = count
        }
        if let text = last("max-connection-per-server") {
            guard let count = Int(text), (1...16).contains(count) else {
                throw RPCError("max-connection-per-server must be a number from 1 to 16, not '\(text)'")
            }
            perServer = count
        }
        split = request.maxConnections
        request.maxConnections = Self.connections(split: split, perServer: perServer, uris: self.uris)
        if let size = last("min-split-size") {
            let bytes = try Self.byteCount(size, option: "min-split-size")
            guard (1 << 20...1 << 30).contains(bytes) else {
                throw RPCError("min-split-size must be from 1M to 1024M, not '\(size)'")
            }
            request.minimumSegmentSize = bytes
        }
        if let limit = last("max-download-limit") {
            let bytes = try Self.byteCount(limit, option: "max-download-limit")
            request.maxBytesPerSecond = bytes == 0 ? nil : bytes
        }
        if let lowest = last("lowest-speed-limit") {
            let bytes = try Self.byteCount(lowest, option: "lowest-speed-limit")
            if bytes > 0 { request.minimumSpeed = MinimumSpeed(bytesPerSecond: bytes, for: .seconds(30)) }
        }
        for header in options["header"] ?? [] {
            let parts = header.split(separator: ":", maxSplits: 1)
            guard parts.count == 2, let name = HTTPField.Name(parts[0].trimmingCharacters(in: .whitespaces)) else {
                throw RPCError(
                    "header must be 'Name: value', not '\(DownloadRequest.redactedHeaderLine(header))'")
            }
            request.headerFields.append(HTTPField(name: name, value: parts[1].trimmingCharacters(in: .whitespaces)))
        }
        if let agent = last("user-agent") { request.headerFields[.userAgent] = agent }
        if let referer = last("referer"), referer != "*" {
            request.headerFields[Self.referer] = referer
        }
        if let checksum = last("checksum") {
            do {
                request.expectedDigest = try Digest(parsing: checksum)
            } catch {
                throw RPCError("checksum: \(error.message)")
            }
        }
        switch (last("http-user"), last("http-passwd")) {
        case (let user?, let password?): request.credentials = Credentials(user: user, password: password)
        case (nil, nil): break
        default: throw RPCError("http-user and http-passwd go together")
        }
        try Self.applySettings(last, base: base, to: &request)
        request.url = self.uris[0]
        paused = try Self.flag(last("pause"), "pause") ?? false
        gid = try Self.gid(last("gid"))
        self.request = request
    }

    /// The options a call of a run gives its own value of, which change none of the settings that the other options
    /// plan: the file's name, the GID, whether it starts paused. Front ends add a batch with one set of options and a
    /// name for each file, and ``reused(for:options:defaults:)`` plans the shared ones once.
    static let ownOptions: Set<String> = ["out", "gid", "pause"]

    /// Whether options `a` and `b` are the same but for ``ownOptions``.
    static func sameSettings(_ a: [String: [String]], _ b: [String: [String]]) -> Bool {
        var shared = 0
        for (name, values) in a where !ownOptions.contains(name) {
            guard b[name] == values else { return false }
            shared += 1
        }
        return shared == b.keys.count { !ownOptions.contains($0) }
    }

    /// Where the file goes in `directory`: named `out` when given, else named as the server or the URL says. `out`
    /// names a file, whatever is at its path now (the conflict policy decides on that as the file is published).
    private static func destination(out: String?, in directory: URL) throws(RPCError) -> Destination {
        guard let out, !out.isEmpty else { return .directory(directory) }
        try checkName(out, option: "out")
        return .file(directory.appendingPathComponent(out, isDirectory: false))
    }

    /// The `gid` option's GID, or `nil` when absent.
    private static func gid(_ text: String?) throws(RPCError) -> GID? {
        guard let text else { return nil }
        guard let gid = GID(hex: text) else { throw RPCError("gid must be 16 hex digits, not '\(text)'") }
        return gid
    }

    /// aria2's options in force for a download of `request` started from `base`, given or not, in the forms aria2
    /// answers them: sizes in bytes, flags `true` or `false`, times in seconds. Front ends read them from any download
    /// (AriaNg's and webui-aria2's task settings), not only from those they gave them to.
    static func inForce(_ request: DownloadRequest, base: Downloader.Configuration) -> [String: String] {
        let settings = request.configuration(over: base)
        let policy = settings.retryPolicy
        // retry-wait's fixed wait (see applySettings); a backoff that grows is aria2's 0.
        let fixedWait =
            policy.multiplier == 1 && policy.jitter == .none && policy.initialDelay == policy.maxDelay
            ? policy.initialDelay.components.seconds : 0
        return [
            "dir": Aria2Status.destination(of: request).directory,
            "split": String(request.maxConnections),
            // A download opens up to split connections whatever its sources' hosts: one server may have them all.
            "max-connection-per-server": String(request.maxConnections),
            "min-split-size": String(request.minimumSegmentSize),
            "max-download-limit": String(request.maxBytesPerSecond ?? 0),
            "lowest-speed-limit": String((request.minimumSpeed ?? settings.minimumSpeed)?.bytesPerSecond ?? 0),
            "max-tries": policy.maxRetries == .max ? "0" : String(policy.maxRetries + 1),
            "retry-wait": String(fixedWait),
            "timeout": String(settings.stallTimeout.components.seconds),
            "connect-timeout": String(settings.connectTimeout.components.seconds),
            "allow-overwrite": String(request.conflictPolicy == .overwrite),
            "auto-file-renaming": String(request.conflictPolicy == .rename),
            "user-agent": request.headerFields[.userAgent] ?? settings.userAgent,
            "remote-time": String(settings.usesRemoteModificationTime),
            "conditional-get": String(settings.revalidatesCompletedFiles),
            "check-certificate": String(settings.tls.verifiesPeer),
        ]
    }

    /// `texts` as URLs, each an http or https URI with a host.
    private static func urls(_ texts: [String]) throws(RPCError) -> [URL] {
        try texts.map { text throws(RPCError) -> URL in
            guard let url = URL(string: text), let scheme = url.scheme?.lowercased(),
                scheme == "http" || scheme == "https",
                url.host?.isEmpty == false
            else { throw RPCError("'\(URLText.redacted(text))' is not an http or https URI") }
            return url
        }
    }

    /// This plan for `uris` and `given` options over `defaults` instead: what another `addUri` plans whose options,
    /// over the same defaults, differ from this plan's in ``ownOptions`` at most (``sameSettings(_:_:)``; front ends
    /// add a batch of URIs with one set of options, which are checked and applied once). Its own options are checked
    /// and applied as the plan of the call alone would. `nil` when a URI of either carries a user or password: those
    /// become the request's credentials, which go with their own URI only.
    func reused(
        for uris: [String], options given: [String: [String]], defaults: [String: String]
    ) throws(RPCError) -> DownloadPlan? {
        let urls = try Self.urls(uris)
        guard !(self.uris + urls).contains(where: { $0.user != nil || $0.password != nil }) else { return nil }
        var plan = self
        plan.uris = urls
        plan.request.url = urls[0]
        plan.request.mirrors = Array(urls.dropFirst())
        plan.request.maxConnections = Self.connections(split: split, perServer: perServer, uris: urls)
        // As the plan's init merges them: the call's own values over the defaults (a cumulative one's joined by
        // newlines), the last of them in force.
        var own: [String: [String]] = [:]
        for name in Self.ownOptions {
            own[name] = given[name] ?? defaults[name]?.components(separatedBy: "\n")
            plan.options[name] = own[name]?.joined(separator: "\n")
            plan.storedOptions[name] = plan.options[name]
        }
        func last(_ name: String) -> String? { own[name]?.last }
        plan.request.destination = try Self.destination(out: last("out"), in: directoryURL)
        plan.paused = try Self.flag(last("pause"), "pause") ?? false
        plan.gid = try Self.gid(last("gid"))
        return plan
    }

    /// `current`, a download's request, with the settings `planned` has (a plan of its options with a change of
    /// ``Daemon/changeableWhileWaiting`` or of its mirrors): the rest, its credentials, proxy and header lines above
    /// all (which the options kept leave out when they are secrets), stay `current`'s.
    static func request(_ current: DownloadRequest, withSettingsOf planned: DownloadRequest) -> DownloadRequest {
        var request = current
        request.mirrors = planned.mirrors
        request.maxConnections = planned.maxConnections
        request.minimumSegmentSize = planned.minimumSegmentSize
        request.minimumSpeed = planned.minimumSpeed
        request.retryPolicy = planned.retryPolicy
        request.stallTimeout = planned.stallTimeout
        request.connectTimeout = planned.connectTimeout
        request.tls = planned.tls
        request.conflictPolicy = planned.conflictPolicy
        request.expectedDigest = planned.expectedDigest
        request.revalidatesCompletedFile = planned.revalidatesCompletedFile
        request.usesRemoteModificationTime = planned.usesRemoteModificationTime
        request.headerFields[.userAgent] = planned.headerFields[.userAgent]
        request.headerFields[referer] = planned.headerFields[referer]
        return request
    }

    /// The options kept of a download that plan its settings again: without those that go with a secret the kept
    /// options leave out (a user without its password would be refused), which ``request(_:withSettingsOf:)`` keeps
    /// from the download's own request.
    static func replannable(_ options: [String: String]) -> [String: [String]] {
        options.filter { !["http-user", "all-proxy", "all-proxy-user", "header"].contains($0.key) }
            .mapValues { $0.components(separatedBy: "\n") }
    }

    /// The connections a download of `uris` opens, as aria2 counts them: `split`, and with `perServer` at most that
    /// many to each server (scheme, host and port, the default port written out or not).
    static func connections(split: Int, perServer: Int?, uris: [URL]) -> Int {
        guard let perServer else { return split }
        let servers = Set(
            uris.map { url in
                let scheme = url.scheme?.lowercased() ?? ""
                return "\(scheme)://\(url.host?.lowercased() ?? ""):\(url.port ?? (scheme == "https" ? 443 : 80))"
            })
        return min(split, perServer * servers.count)
    }

    /// The options that replace the downloader's settings for this download: retries, timeouts, proxy, TLS,
    /// revalidation and the file's time.
    private static func applySettings(
        _ last: (String) -> String?, base: Downloader.Configuration, to request: inout DownloadRequest
    ) throws(RPCError) {
        if last("max-tries") != nil || last("retry-wait") != nil {
            var policy = base.retryPolicy
            if let tries = last("max-tries") {
                guard let count = Int(tries), count >= 0 else {
                    throw RPCError("max-tries must be a number of 0 (unlimited) or more, not '\(tries)'")
                }
                policy.maxRetries = count == 0 ? Int.max : count - 1
            }
            if let wait = last("retry-wait") {
                guard let seconds = Int(wait), (0...600).contains(seconds) else {
                    throw RPCError("retry-wait must be a number of seconds from 0 to 600, not '\(wait)'")
                }
                // aria2's fixed wait between tries; 0 leaves the downloader's backoff.
                if seconds > 0 {
                    policy.initialDelay = .seconds(seconds)
                    policy.maxDelay = .seconds(seconds)
                    policy.multiplier = 1
                    policy.jitter = .none
                }
            }
            request.retryPolicy = policy
        }
        if let timeout = last("timeout") { request.stallTimeout = .seconds(try seconds(timeout, option: "timeout")) }
        if let timeout = last("connect-timeout") {
            request.connectTimeout = .seconds(try seconds(timeout, option: "connect-timeout"))
        }
        if let text = last("all-proxy") {
            if text.isEmpty {
                request.proxy = ProxyConfiguration.none
            } else {
                var proxy: Proxy
                do {
                    proxy = try Proxy(url: text)
                } catch {
                    throw RPCError("all-proxy: \(error.message)")
                }
                switch (last("all-proxy-user"), last("all-proxy-passwd")) {
                case (let user?, let password?): proxy.credentials = Credentials(user: user, password: password)
                case (nil, nil): break
                default: throw RPCError("all-proxy-user and all-proxy-passwd go together")
                }
                request.proxy = .all(proxy)
            }
        } else if last("all-proxy-user") != nil || last("all-proxy-passwd") != nil {
            throw RPCError("all-proxy-user and all-proxy-passwd need all-proxy")
        }
        if last("check-certificate") != nil || last("ca-certificate") != nil {
            var tls = base.tls
            if let check = try flag(last("check-certificate"), "check-certificate") { tls.verifiesPeer = check }
            if let file = last("ca-certificate"), !file.isEmpty {
                guard FileManager.default.isReadableFile(atPath: file) else {
                    throw RPCError("ca-certificate '\(file)' cannot be read")
                }
                tls.caFile = file
            }
            request.tls = tls
        }
        request.revalidatesCompletedFile = try flag(last("conditional-get"), "conditional-get")
        request.usesRemoteModificationTime = try flag(last("remote-time"), "remote-time")
    }

    /// A whole number of seconds from 1 to 600 (aria2's range for its timeouts).
    private static func seconds(_ text: String, option: String) throws(RPCError) -> Int {
        guard let seconds = Int(text), (1...600).contains(seconds) else {
            throw RPCError("\(option) must be a number of seconds from 1 to 600, not '\(text)'")
        }
        return seconds
    }

    /// The directory `dir` names inside `root` (the root when it is absent): an absolute path under the root, or a
    /// path relative to it; never `..`, and no name starting with a dot (`.ssh`, `.config`, the daemon's `.haul`).
    static func directory(_ dir: String?, root: String) throws(RPCError) -> String {
        guard let dir, !dir.isEmpty else { return root }
        var relative = dir
        if dir == root || dir.hasPrefix(root + "/") {
            // Named under the root as it is: every name is checked below, and a symbolic link on the way is followed
            // only when it leads inside the root, as the directories are made (no path resolved for every add).
            relative = String(dir.dropFirst(root.count))
        } else if dir.hasPrefix("/") {
            let standardized = (dir as NSString).standardizingPath
            guard standardized == root || standardized.hasPrefix(root + "/") else {
                throw RPCError("dir '\(dir)' is outside the download root")
            }
            relative = String(standardized.dropFirst(root.count))
        }
        let components = relative.split(separator: "/", omittingEmptySubsequences: true)
        for component in components { try checkName(String(component), option: "dir") }
        return components.reduce(root) { $0 + "/" + $1 }
    }

    /// Refuses a file or directory name that could leave its directory or land on a hidden file.
    static func checkName(_ name: String, option: String) throws(RPCError) {
        guard !name.contains("/") || option == "dir" else { throw RPCError("\(option) '\(name)' must be a file name") }
        guard name != "..", name != "." else { throw RPCError("\(option) '\(name)' leads out of its directory") }
        guard !name.hasPrefix(".") else {
            throw RPCError("\(option) '\(name)' starts with a dot: hidden files are not written by haul daemon")
        }
        // As for a server's name: a control character, a bidi override (`invoice\u{202E}fdp.exe` lists as
        // `invoiceexe.pdf`) or an invisible one would make the file show as another.
        guard !name.unicodeScalars.contains(where: FileNaming.isUnprintable) else {
            throw RPCError(
                "\(option) contains a control, bidirectional or invisible character (a NUL, a line break, U+202E...)")
        }
    }

    /// A byte count with aria2's suffixes (`K`, `M`, `G`: 1024, 1024², 1024³).
    static func byteCount(_ text: String, option: String) throws(RPCError) -> Int64 {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        var digits = Substring(trimmed)
        var scale: Int64 = 1
        switch trimmed.last?.uppercased() {
        case "K": scale = 1 << 10
        case "M": scale = 1 << 20
        case "G": scale = 1 << 30
        default: break
        }
        if scale != 1 { digits = digits.dropLast() }
        guard let value = Int64(digits), value >= 0, value <= Int64.max / scale else {
            throw RPCError("\(option) must be a size such as 0, 512K or 10M, not '\(text)'")
        }
        return value * scale
    }

    /// `true` or `false`, or `nil` when absent.
    static func flag(_ text: String?, _ option: String) throws(RPCError) -> Bool? {
        switch text {
        case nil: nil
        case "true": true
        case "false": false
        case let other?: throw RPCError("\(option) must be true or false, not '\(other)'")
        }
    }
}
