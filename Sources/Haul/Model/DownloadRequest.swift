public import Foundation
public import HTTPTypes

/// One file to fetch: where from, where to, and what it must look like to be accepted.
///
/// ```swift
/// var request = DownloadRequest(url: url, destination: .directory(downloads))
/// request.expectedDigest = try Digest(algorithm: .sha256, hex: "9f86d0...")
/// request.maxSize = 100 << 20
/// let result = try await downloader.download(request)
/// ```
public struct DownloadRequest: Sendable, Hashable, Codable {
    /// The URL to fetch (`http` or `https`), without user info: a URL given with a user and password
    /// (`https://user:secret@host/file`) keeps neither; they become ``credentials``, so that the password is never
    /// shown in events, messages or logs, nor stored in a journal.
    public var url: URL {
        get { storedURL }
        set {
            let (url, credentials) = Self.splittingUserInfo(newValue)
            storedURL = url
            if let credentials { self.credentials = credentials }
        }
    }
    private var storedURL: URL
    /// The user and password sent (HTTP Basic, before any `401`) to the origin of ``url``, and to no other: a
    /// redirect to another scheme, host or port drops them for the rest of its hops. Never encoded: a journal keeps no credentials, and a
    /// download resumed from one gets them from the downloader's ``Downloader/Configuration/credentials``.
    public var credentials: Credentials?
    /// Where the file goes.
    public var destination: Destination
    /// Extra request header fields. `Authorization`, `Cookie` and `Proxy-Authorization` are dropped when a
    /// redirect leads to another origin, and never encoded (a journal keeps no secret).
    public var headerFields: HTTPFields
    /// The digest the file must have; checked before the file is published.
    public var expectedDigest: Digest?
    /// The exact size the file must have.
    public var expectedSize: Int64?
    /// The largest body accepted; checked against `Content-Length` before anything is written and against the
    /// running count while writing.
    public var maxSize: Int64?
    /// What to do when the destination file already exists.
    public var conflictPolicy: ConflictPolicy
    /// Scheduling priority among queued downloads (higher first; used by `DownloadQueue`).
    public var priority: Int
    /// The most body bytes per second this download receives, at least 1 (a download with less fails as an invalid
    /// request); `nil` (the default) for no limit of its own. The downloader's
    /// ``Downloader/Configuration/maxBytesPerSecond``, shared by all its downloads, applies as well.
    public var maxBytesPerSecond: Int64? {
        get { rare.maxBytesPerSecond }
        set { rare.maxBytesPerSecond = newValue }
    }
    /// The longest the whole download may take, retries, backoff and waits included; past it the download fails
    /// with ``DownloadError/Code/timedOut`` (not retried; a partial is kept for a later run like any failure's).
    /// `nil` (the default): the downloader's ``Downloader/Configuration/timeLimit``.
    public var timeLimit: Duration? {
        get { rare.timeLimit }
        set { rare.timeLimit = newValue }
    }
    /// A transfer slower than this for its duration fails with ``DownloadError/Code/tooSlow``, a transient failure
    /// that is retried and resumed. `nil` (the default): the downloader's ``Downloader/Configuration/minimumSpeed``.
    public var minimumSpeed: MinimumSpeed? {
        get { rare.minimumSpeed }
        set { rare.minimumSpeed = newValue }
    }
    /// Continue a file that is already at the destination and that Haul did not write (another tool left it
    /// half done): the request asks for the rest with `Range` from the file's size, and the whole file is published
    /// in its place once complete. No validator can prove that those bytes are the start of the server's file:
    /// use it only for files known to be partial copies of this URL. A server that does not answer with the rest
    /// (no range support) leaves the file to the ``conflictPolicy``; one that says the file is complete leaves it
    /// as it is (a skipped result).
    public var continuesExistingFile: Bool {
        get { rare.continuesExistingFile }
        set { rare.continuesExistingFile = newValue }
    }
    /// Other URLs that serve the same file (mirrors), tried besides ``url``: the file's segments are spread over all
    /// of them (``maxConnections``), and a source that fails or is much slower than the others is dropped for the
    /// rest of the file, its segments moving to the others. Every source must serve the same size, or the download
    /// fails naming them. A mirror's user info is not kept (credentials for it come from the downloader's
    /// ``Downloader/Configuration/credentials``). Empty (the default): ``url`` alone.
    public var mirrors: [URL] {
        get { rare.mirrors }
        set { rare.mirrors = newValue.map { Self.splittingUserInfo($0).0 } }
    }
    /// The most connections this one file is fetched over at once (aria2's `--split`): a file whose size is known,
    /// whose server accepts `Range` and gives a validator, and that is at least twice ``minimumSegmentSize``, is cut
    /// into segments written in place into the one partial file; a connection that finishes its segment takes half
    /// of the largest one left. Each connection counts against a ``DownloadQueue``'s limits like a download, and
    /// waits for a free slot like one. 1 (the default): one connection, one stream.
    public var maxConnections: Int {
        get { rare.maxConnections }
        set { rare.maxConnections = max(1, newValue) }
    }
    /// The smallest segment a new connection is opened for (aria2's `--min-split-size`): a file is split only where
    /// both halves are at least this large. Default 20 MiB.
    public var minimumSegmentSize: Int64 {
        get { rare.minimumSegmentSize }
        set { rare.minimumSegmentSize = max(1, newValue) }
    }
    /// How this download retries, in place of the downloader's ``Downloader/Configuration/retryPolicy`` (aria2's
    /// per-download `max-tries` and `retry-wait`). `nil` (the default): the downloader's.
    public var retryPolicy: RetryPolicy? {
        get { rare.retryPolicy }
        set { rare.retryPolicy = newValue }
    }
    /// How long connecting for this download may take, in place of the downloader's
    /// ``Downloader/Configuration/connectTimeout``, passed to the transport with the request: `NIOTransport` applies
    /// it; `AsyncHTTPClientTransport` keeps the one its client was made with. `nil` (the default): the downloader's.
    public var connectTimeout: Duration? {
        get { rare.connectTimeout }
        set { rare.connectTimeout = newValue }
    }
    /// How long this download's transfer may go without a byte, in place of the downloader's
    /// ``Downloader/Configuration/stallTimeout`` (at least a second: stalls are looked for four times a second).
    /// `nil` (the default): the downloader's.
    public var stallTimeout: Duration? {
        get { rare.stallTimeout }
        set { rare.stallTimeout = newValue }
    }
    /// How this download's `https` servers are verified, in place of the downloader's
    /// ``Downloader/Configuration/tls``. `nil` (the default): the downloader's.
    public var tls: TLSSettings? {
        get { rare.tls }
        set { rare.tls = newValue }
    }
    /// The proxies this download goes through, in place of the downloader's ``Downloader/Configuration/proxy``
    /// (``ProxyConfiguration/none`` for none). `nil` (the default): the downloader's.
    public var proxy: ProxyConfiguration? {
        get { rare.proxy }
        set { rare.proxy = newValue }
    }
    /// Whether a file this download completed earlier is asked for again with its validator, in place of the
    /// downloader's ``Downloader/Configuration/revalidatesCompletedFiles``. `nil` (the default): the downloader's.
    public var revalidatesCompletedFile: Bool? {
        get { rare.revalidatesCompletedFile }
        set { rare.revalidatesCompletedFile = newValue }
    }
    /// Whether the file gets the server's `Last-Modified` as its modification time, in place of the downloader's
    /// ``Downloader/Configuration/usesRemoteModificationTime``. `nil` (the default): the downloader's.
    public var usesRemoteModificationTime: Bool? {
        get { rare.usesRemoteModificationTime }
        set { rare.usesRemoteModificationTime = newValue }
    }

    /// The default ``minimumSegmentSize``: aria2's.
    public static let defaultMinimumSegmentSize: Int64 = 20 << 20

    /// The fields most requests leave unset, on the heap when set: a queue holds every request it was given (a
    /// million of them in a large batch), and these would make each a third larger.
    private struct RareFields: Hashable, Sendable {
        var maxBytesPerSecond: Int64?
        var timeLimit: Duration?
        var minimumSpeed: MinimumSpeed?
        var continuesExistingFile = false
        var mirrors: [URL] = []
        var maxConnections = 1
        var minimumSegmentSize = DownloadRequest.defaultMinimumSegmentSize
        var retryPolicy: RetryPolicy?
        var connectTimeout: Duration?
        var stallTimeout: Duration?
        var tls: TLSSettings?
        var proxy: ProxyConfiguration?
        var revalidatesCompletedFile: Bool?
        var usesRemoteModificationTime: Bool?

        /// Whether any of the downloader's settings is replaced.
        var overridesSettings: Bool {
            retryPolicy != nil || connectTimeout != nil || stallTimeout != nil || tls != nil || proxy != nil
                || revalidatesCompletedFile != nil || usesRemoteModificationTime != nil
        }
    }

    /// Applies the downloader settings this request replaces with its own to `configuration` and `options` (the
    /// downloader's, as a run of it uses them).
    func overriding(_ configuration: inout Downloader.Configuration, _ options: inout TransportOptions) {
        guard case .fields(let fields)? = boxedRare, fields.overridesSettings else { return }
        if let policy = fields.retryPolicy { configuration.retryPolicy = policy }
        if let timeout = fields.connectTimeout {
            configuration.connectTimeout = timeout
            options.connectTimeout = timeout
        }
        if let timeout = fields.stallTimeout { configuration.stallTimeout = timeout }
        if let tls = fields.tls {
            configuration.tls = tls
            options.tls = tls
        }
        if let proxy = fields.proxy { configuration.proxy = proxy }
        if let revalidates = fields.revalidatesCompletedFile { configuration.revalidatesCompletedFiles = revalidates }
        if let uses = fields.usesRemoteModificationTime { configuration.usesRemoteModificationTime = uses }
    }

    /// `base` with the settings this request replaces with its own: the settings a run of it uses.
    package func configuration(over base: Downloader.Configuration) -> Downloader.Configuration {
        var configuration = base
        var options = TransportOptions()
        overriding(&configuration, &options)
        return configuration
    }

    private enum Boxed: Hashable, Sendable {
        indirect case fields(RareFields)
    }

    private var boxedRare: Boxed?

    private var rare: RareFields {
        get {
            guard case .fields(let fields)? = boxedRare else { return RareFields() }
            return fields
        }
        set { boxedRare = newValue == RareFields() ? nil : .fields(newValue) }
    }

    /// Creates a request with no checks beyond the HTTP status, failing if the destination exists.
    public init(
        url: URL,
        destination: Destination,
        headerFields: HTTPFields = [:],
        expectedDigest: Digest? = nil,
        expectedSize: Int64? = nil,
        maxSize: Int64? = nil,
        conflictPolicy: ConflictPolicy = .fail,
        priority: Int = 0
    ) {
        (storedURL, credentials) = Self.splittingUserInfo(url)
        self.destination = destination
        self.headerFields = headerFields
        self.expectedDigest = expectedDigest
        self.expectedSize = expectedSize
        self.maxSize = maxSize
        self.conflictPolicy = conflictPolicy
        self.priority = priority
    }
}

extension DownloadRequest {
    private enum CodingKeys: String, CodingKey {
        case storedURL = "url"
        case destination, headerFields, expectedDigest, expectedSize, maxSize, conflictPolicy, priority
        case maxBytesPerSecond, timeLimit, minimumSpeed, continuesExistingFile, mirrors, maxConnections
        case minimumSegmentSize
    }

    /// Decodes a request that ``encode(to:)`` encoded (credentials and secret fields are absent). The fields added
    /// after the first journals were written may be missing.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        storedURL = try container.decode(URL.self, forKey: .storedURL)
        destination = try container.decode(Destination.self, forKey: .destination)
        headerFields = try container.decode(HTTPFields.self, forKey: .headerFields)
        expectedDigest = try container.decodeIfPresent(Digest.self, forKey: .expectedDigest)
        expectedSize = try container.decodeIfPresent(Int64.self, forKey: .expectedSize)
        maxSize = try container.decodeIfPresent(Int64.self, forKey: .maxSize)
        conflictPolicy = try container.decode(ConflictPolicy.self, forKey: .conflictPolicy)
        priority = try container.decode(Int.self, forKey: .priority)
        maxBytesPerSecond = try container.decodeIfPresent(Int64.self, forKey: .maxBytesPerSecond)
        timeLimit = try container.decodeIfPresent(Duration.self, forKey: .timeLimit)
        minimumSpeed = try container.decodeIfPresent(MinimumSpeed.self, forKey: .minimumSpeed)
        continuesExistingFile = try container.decodeIfPresent(Bool.self, forKey: .continuesExistingFile) ?? false
        mirrors = try container.decodeIfPresent([URL].self, forKey: .mirrors) ?? []
        maxConnections = try container.decodeIfPresent(Int.self, forKey: .maxConnections) ?? 1
        minimumSegmentSize =
            try container.decodeIfPresent(Int64.self, forKey: .minimumSegmentSize) ?? Self.defaultMinimumSegmentSize
    }

    /// Encodes the request without its secrets: ``credentials`` and the header fields ``isSecretField(_:)`` names
    /// (`Authorization`, `Cookie`, `X-Api-Key`...) stay out of whatever keeps it (a journal's file). Neither are the
    /// downloader settings it replaces (``retryPolicy``, ``connectTimeout``, ``stallTimeout``, ``tls``, ``proxy``,
    /// ``revalidatesCompletedFile``, ``usesRemoteModificationTime``): a proxy's password is a secret too, and a
    /// request decoded from a journal runs with its downloader's settings. A request decoded again has
    /// none of them; a download resumed from a journal gets its credentials from the downloader's credential
    /// provider, and its cookies from its cookie jar.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        var fields = headerFields
        for field in headerFields where Self.isSecretField(field.name.canonicalName) { fields[field.name] = nil }
        try container.encode(storedURL, forKey: .storedURL)
        try container.encode(destination, forKey: .destination)
        try container.encode(fields, forKey: .headerFields)
        try container.encodeIfPresent(expectedDigest, forKey: .expectedDigest)
        try container.encodeIfPresent(expectedSize, forKey: .expectedSize)
        try container.encodeIfPresent(maxSize, forKey: .maxSize)
        try container.encode(conflictPolicy, forKey: .conflictPolicy)
        try container.encode(priority, forKey: .priority)
        try container.encodeIfPresent(maxBytesPerSecond, forKey: .maxBytesPerSecond)
        try container.encodeIfPresent(timeLimit, forKey: .timeLimit)
        try container.encodeIfPresent(minimumSpeed, forKey: .minimumSpeed)
        if continuesExistingFile { try container.encode(true, forKey: .continuesExistingFile) }
        if !mirrors.isEmpty { try container.encode(mirrors, forKey: .mirrors) }
        if maxConnections != 1 { try container.encode(maxConnections, forKey: .maxConnections) }
        if minimumSegmentSize != Self.defaultMinimumSegmentSize {
            try container.encode(minimumSegmentSize, forKey: .minimumSegmentSize)
        }
    }

    /// Whether a header field of this name carries a secret, which Haul never writes to a file nor shows: the
    /// credential fields (`Authorization`, `Proxy-Authorization`, `Cookie`), and any field whose name says it holds a
    /// key, token, secret, password, signature, session or credential (`X-Api-Key`, `PRIVATE-TOKEN`, `X-Auth-Token`,
    /// `X-Amz-Security-Token`...), since no list of names can be complete. Case does not matter.
    public static func isSecretField(_ name: some StringProtocol) -> Bool {
        let lowered = name.lowercased()
        return secretFieldWords.contains { lowered.contains($0) }
    }

    /// A header line given by a user (`Name: value`, or something that is not one) as an error shows it: for a field
    /// that carries a secret (``isSecretField(_:)``), its name and `...`, whatever follows the name (a colon or not);
    /// any other line as given.
    package static func redactedHeaderLine(_ line: String) -> String {
        let name = line.drop { $0.isWhitespace }.prefix { $0 != ":" && !$0.isWhitespace }
        return isSecretField(name) ? "\(name): ..." : line
    }

    private static let secretFieldWords = [
        "auth", "cookie", "key", "token", "secret", "passw", "signature", "session", "credential",
    ]

    /// `url` without its user info, and the credentials it carried.
    private static func splittingUserInfo(_ url: URL) -> (URL, Credentials?) {
        guard let credentials = Credentials(userInfoOf: url),
            var components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        else { return (url, nil) }
        components.percentEncodedUser = nil
        components.percentEncodedPassword = nil
        return (components.url ?? url, credentials)
    }

    /// The file the download will be published at, as far as it is known before any response: `nil` when the
    /// name is left to `Content-Disposition` or the URL yields no safe name. (The `rename` conflict policy may
    /// still pick `name (1).ext`.) Use it to find two requests that would write one file.
    public var plannedFileURL: URL? {
        switch destination {
        case .file(let file): file
        case .directory(_, useContentDisposition: true): nil
        case .directory(let directory, useContentDisposition: false):
            FileNaming.name(for: url).map { directory.appendingPathComponent($0, isDirectory: false) }
        }
    }

    /// ``plannedFileURL`` as the path the engine writes, made without building a URL.
    package var plannedPath: String? {
        switch destination {
        case .file(let file): file.path
        case .directory(_, useContentDisposition: true): nil
        case .directory(let directory, useContentDisposition: false):
            FileNaming.name(for: url).map { FileNaming.path($0, in: directory.path) }
        }
    }

    /// The file name the URL alone gives (its last path component, percent-decoded and made safe; `index.html`
    /// for a path ending in `/`), or `nil` when nothing safe is left of it.
    public static func fileName(for url: URL) -> String? { FileNaming.name(for: url) }
}

/// The slowest a transfer may be for a while (curl's `--speed-limit` and `--speed-time`): below
/// ``bytesPerSecond`` on average for ``duration``, it is given up as ``DownloadError/Code/tooSlow`` (transient: retried
/// and resumed). A server that sends one byte now and then, just often enough never to stall, is stopped by it.
public struct MinimumSpeed: Sendable, Hashable, Codable {
    /// The lowest acceptable average, in body bytes per second.
    public var bytesPerSecond: Int64
    /// How long the transfer may stay below it.
    public var duration: Duration

    /// Creates a minimum speed: below `bytesPerSecond` for `duration` is too slow.
    public init(bytesPerSecond: Int64, for duration: Duration) {
        self.bytesPerSecond = bytesPerSecond
        self.duration = duration
    }
}

/// Where a download is written.
public enum Destination: Sendable, Hashable, Codable {
    /// Exactly this file path.
    case file(URL)
    /// A file in this directory, named from the URL's last path component (percent-decoded, made safe;
    /// `index.html` when the path ends in `/`), or from the server's `Content-Disposition` when
    /// `useContentDisposition` is set and the header carries a usable name. A name can never leave the
    /// directory: separators, `..`, NUL, control characters and leading dots are removed.
    case directory(URL, useContentDisposition: Bool = false)
}

/// What to do when a file already exists at the destination.
///
/// A file that exists when the download starts (for a batch given to ``DownloadQueue``, when the batch is added) is
/// handled before any request; one that appears later is found when the download publishes, and the policy applies
/// then: nothing but ``overwrite`` ever replaces it.
public enum ConflictPolicy: String, Sendable, Hashable, CaseIterable, Codable {
    /// Fail with ``DownloadError/Code/destinationExists``, leaving the existing file untouched (the default).
    case fail
    /// Do not download; report the existing file as the result (marked ``DownloadResult/skipped``).
    case skip
    /// Replace the existing file atomically once the new one is complete and verified.
    case overwrite
    /// Keep the existing file and publish the new one as `name (1).ext`, `name (2).ext`, … (the first free
    /// name; the suffix goes before the last extension, as browsers do).
    case rename
}

/// An expected digest of a file's bytes.
public struct Digest: Sendable, Hashable, CustomStringConvertible {
    /// A digest algorithm.
    public enum Algorithm: String, Sendable, Hashable, CaseIterable {
        /// SHA-256 (32 bytes).
        case sha256 = "sha-256"
        /// SHA-384 (48 bytes).
        case sha384 = "sha-384"
        /// SHA-512 (64 bytes).
        case sha512 = "sha-512"

        var byteCount: Int {
            switch self {
            case .sha256: 32
            case .sha384: 48
            case .sha512: 64
            }
        }
    }

    /// The algorithm.
    public let algorithm: Algorithm
    /// The digest bytes.
    public let bytes: [UInt8]

    /// Creates a digest from its hexadecimal form.
    /// - Throws: ``DownloadError`` with code ``DownloadError/Code/invalidRequest`` if `hex` is not a valid
    ///   digest of that algorithm.
    public init(algorithm: Algorithm, hex: String) throws(DownloadError) {
        guard let bytes = [UInt8](hex: hex), bytes.count == algorithm.byteCount else {
            throw DownloadError(
                .invalidRequest,
                message:
                    "'\(hex)' is not a \(algorithm.rawValue) digest: expected \(algorithm.byteCount * 2) hex digits")
        }
        self.algorithm = algorithm
        self.bytes = bytes
    }

    /// Parses `ALGO=HEX` (e.g. `sha-256=9f86d0…`; `sha256` is accepted too).
    public init(parsing text: String) throws(DownloadError) {
        let parts = text.split(separator: "=", maxSplits: 1).map(String.init)
        let name = parts.first?.lowercased().replacingOccurrences(of: "-", with: "") ?? ""
        guard parts.count == 2,
            let algorithm = Algorithm.allCases.first(where: {
                $0.rawValue.replacingOccurrences(of: "-", with: "") == name
            })
        else {
            throw DownloadError(
                .invalidRequest,
                message: "'\(text)' is not ALGO=HEX with ALGO one of sha-256, sha-384, sha-512")
        }
        try self.init(algorithm: algorithm, hex: parts[1])
    }

    /// The digest in hexadecimal.
    public var hex: String { bytes.hexString }

    /// `ALGO=HEX`.
    public var description: String { "\(algorithm.rawValue)=\(hex)" }
}

/// Encoded as its `ALGO=HEX` text, so a decoded digest passes the same checks as a parsed one.
extension Digest: Codable {
    /// Decodes `ALGO=HEX`; fails on text ``init(parsing:)`` refuses.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        do {
            try self.init(parsing: text)
        } catch {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: error.message)
        }
    }

    /// Encodes `ALGO=HEX`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

extension [UInt8] {
    init?(hex: String) {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = digits[index].hexValue, let low = digits[index + 1].hexValue else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        self = bytes
    }

    /// Lower-case hex, written straight into the string's storage (once per download: one allocation, not three).
    var hexString: String {
        String(unsafeUninitializedCapacity: count * 2) { buffer in
            func digit(_ nibble: UInt8) -> UInt8 {
                nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") - 10 + nibble
            }
            var index = 0
            for byte in self {
                buffer[index] = digit(byte >> 4)
                buffer[index + 1] = digit(byte & 0x0f)
                index += 2
            }
            return index
        }
    }
}

extension UInt8 {
    fileprivate var hexValue: UInt8? {
        switch self {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): self - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): self - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): self - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

extension DownloadRequest {
    /// The key per-host limits count by: the URL's origin (scheme, host, port), as ``DownloadQueue`` counts them.
    package static func originKey(for url: URL) -> String { DownloadQueue.originKey(for: url) }
}
