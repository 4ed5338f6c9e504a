public import Foundation
import HTTPTypes
public import Logging

/// Fetches one URL to one file, correctly under faults: streaming to a hidden partial file, resuming with
/// `Range`/`If-Range` after transient failures, following redirects by its own rules, verifying size and
/// digest, and publishing by atomic rename. Nothing unverified ever sits at the destination.
///
/// ```swift
/// let downloader = Downloader(transport: AsyncHTTPClientTransport.shared)
/// let result = try await downloader.download(DownloadRequest(url: url, destination: .directory(dir)))
/// print(result.fileURL.path, result.size, result.sha256)
/// ```
///
/// Cancelling the calling task cancels the transfer (or the backoff wait) and removes the partial file.
/// All thrown errors are ``DownloadError``.
public final class Downloader: Sendable {
    /// Engine settings; the defaults are those of ARCHITECTURE.md, "Defaults".
    public struct Configuration: Sendable {
        /// When and how often transient failures are retried.
        public var retryPolicy: RetryPolicy = .default
        /// The most redirects followed for one attempt.
        public var maxRedirects = 10
        /// How long establishing a connection (and, for `https`, the TLS handshake) may take.
        public var connectTimeout: Duration = .seconds(10)
        /// How `https` servers are verified and which client certificate is presented; every transport applies it.
        public var tls: TLSSettings = .default
        /// Which HTTP version to ask for: the transport's choice (the default), HTTP/1.1 only, or HTTP/2 where offered.
        public var httpVersion: HTTPVersionPreference = .automatic
        /// Which proxy each request goes through: none by default (``ProxyConfiguration/environment(_:)`` reads
        /// the environment as curl does). Every transport applies it; one that cannot use a kind of proxy fails
        /// the request with an error that says so.
        public var proxy: ProxyConfiguration = .none
        /// Where credentials come from for a request that carries none of its own (``DownloadRequest/credentials``),
        /// asked for every request including redirects: a ``Netrc`` file, or the caller's own provider. A download
        /// resumed from the journal gets its credentials here, as the journal keeps none.
        public var credentials: (any CredentialProvider)?
        /// The cookies sent and kept: with a jar, every response's `Set-Cookie` is stored in it and every request
        /// (redirects included) carries the cookies that match its URL (domain, path, `Secure`, expiry). `nil` (the
        /// default): no cookies but the request's own `Cookie` field.
        public var cookies: CookieJar?
        /// No byte (and no response head) for this long is a transient failure.
        public var stallTimeout: Duration = .seconds(30)
        /// Whether a published file is also synced to disk (`fsync` of file and directory).
        public var durability: Durability = .processCrash
        /// A directory downloads stay inside: a destination below it whose directories (between it and the file)
        /// include a symbolic link, or anything not a directory, is refused (``DownloadError/Code/unsafePath``), when
        /// the download starts and again just before its file is published, so that a link planted there meanwhile
        /// does not lead a file out of it. `nil` (the default): destinations are taken as given. `haul get` sets its
        /// destination directory, a shared queue worker its own.
        public var containingDirectory: URL? {
            didSet { containingPrefix = containingDirectory.map { $0.standardizedFileURL.path + "/" } }
        }
        /// ``containingDirectory``'s path and a slash, made once: the start of every path it contains.
        private(set) var containingPrefix: String?
        /// The shortest time between two progress events of one download.
        public var progressInterval: Duration = .milliseconds(100)
        /// Keep the partial file when the download is cancelled, so a later run can resume it through the
        /// ``journal`` (the `haul` command does). Only a partial that can be resumed (the server gave a strong
        /// validator) is kept, and only when there is a journal to find it again.
        public var keepsPartialOnCancel = false
        /// Keep the partial file when the download fails for good (retries used up, a time limit, a `404`), so that a
        /// later run resumes it with `Range` and `If-Range` instead of starting over (the `haul` command does unless
        /// `--no-keep-partial`). As for ``keepsPartialOnCancel``, only a partial recorded in the ``journal`` with a
        /// validator is kept (it stays hidden and readable by its owner only); one whose bytes are in doubt (a
        /// checksum or size mismatch, a server that contradicted itself) is always removed.
        public var keepsPartialOnFailure = true
        /// Revalidate a file the ``journal`` shows this downloader completed (and that is unchanged on disk) instead
        /// of skipping it: one conditional `GET` (`If-None-Match` with its strong ETag, else `If-Modified-Since` with
        /// its `Last-Modified`); `304 Not Modified` keeps the file (``DownloadResult/notModified``), a new copy
        /// replaces it atomically once complete and verified. Files recorded without a validator are fetched again.
        public var revalidatesCompletedFiles = false
        /// Give each published file the modification time of the server's `Last-Modified` (as wget does; curl's
        /// `--remote-time`). On by default; without `Last-Modified` the file keeps the time it was written.
        public var usesRemoteModificationTime = true
        /// The most body bytes per second all downloads of this downloader receive together (one token bucket
        /// they share), at least 1; `nil` (the default) for no limit. A request's own
        /// ``DownloadRequest/maxBytesPerSecond`` applies as well. The downloader starts with it;
        /// ``Downloader/setMaxBytesPerSecond(_:)`` changes it later. With less (0 is not "no limit"), every download
        /// fails as an invalid request naming it, until ``Downloader/setMaxBytesPerSecond(_:)`` sets a limit.
        public var maxBytesPerSecond: Int64?
        /// How requests are spaced: a request rate for all downloads and per host, a wait between requests to one
        /// host. Nothing is spaced by default; a `Retry-After` on a `429` or `503` always holds that host's next
        /// requests, from every download, for the time it asks.
        public var pacing = RequestPacing()
        /// The longest a download may take, retries and waits included, unless its request sets its own
        /// ``DownloadRequest/timeLimit``; `nil` (the default) for no limit.
        public var timeLimit: Duration?
        /// The slowest a transfer may be for a while unless its request sets its own
        /// ``DownloadRequest/minimumSpeed``; `nil` (the default) for no minimum.
        public var minimumSpeed: MinimumSpeed?
        /// Where downloads are remembered across runs: with one, a download finds the partial an earlier run
        /// left and resumes it, and one the journal shows was completed and is unchanged on disk is reported as
        /// skipped without a request. `nil` (the default): every run starts from nothing.
        ///
        /// A partial and a finished file belong to their destination, not to the exact URL (signed and expiring
        /// URLs change their query on every visit): a download to a file whose own URL the journal does not know
        /// resumes the partial another URL left there (with `If-Range`: a server that has another file sends it
        /// whole, and it is fetched from zero), and counts a completed, unchanged file there as done when its URL
        /// differs from that file's only in its query. A file completed for another path or host is another
        /// resource: the ``DownloadRequest/conflictPolicy`` decides. (A file named by `Content-Disposition` has its
        /// name only from the response: there the URL finds the record.)
        public var journal: (any Journal)?
        /// The clock backoff waits on; inject one in tests.
        public var backoffClock: any BackoffClock = ContinuousBackoffClock()
        /// Where retry jitter comes from: a number in 0...1.
        public var random: @Sendable () -> Double = { Double.random(in: 0...1) }
        /// Logs requests, responses, retries and redirects (silent by default).
        public var logger = Logger(label: "haul", factory: { _ in SwiftLogNoOpLogHandler() })
        /// The `User-Agent` sent unless the request sets one.
        public var userAgent = "Haul/0.1"
        /// Whether every file's SHA-256 is computed as its bytes are written, for ``DownloadResult/sha256`` and the
        /// journal. Off by default: hashing costs about as much CPU as receiving and writing the bytes together. A
        /// request with an expected digest always has that digest computed and checked (and a SHA-256 one is also
        /// its result's `sha256`).
        public var computesSHA256 = false
        /// Hooks for tests to act at exact moments.
        package var hooks = Hooks()

        /// The default configuration.
        public init() {}
    }

    /// How hard Haul works to keep a published file through a crash.
    public enum Durability: Sendable, Hashable {
        /// Survives any process kill (the page cache outlives the process): rename without `fsync`, like curl
        /// and aria2. The default.
        case processCrash
        /// Survives power loss: `fsync` of the file before the rename and of the directory after it.
        case powerLoss
    }

    /// Test hooks (package-internal).
    package struct Hooks: Sendable {
        /// Runs after the file is verified, just before it is published.
        package var beforePublish: (@Sendable () async -> Void)?
        package init() {}
    }

    /// How the bytes move.
    public let transport: any HTTPTransport
    /// The settings.
    public let configuration: Configuration

    /// Creates a downloader on `transport` (on Linux use `AsyncHTTPClientTransport` from
    /// `HaulAsyncHTTPClient`; see README for why).
    public init(transport: any HTTPTransport, configuration: Configuration = Configuration()) {
        self.transport = transport
        self.configuration = configuration
        stallWatch = StallWatch(timeout: configuration.stallTimeout)
        bandwidth = BandwidthLimit(bytesPerSecond: configuration.maxBytesPerSecond)
        pacer = RequestPacer(pacing: configuration.pacing, random: configuration.random)
        interruptibleTransport = transport as? any InterruptibleHTTPTransport
        var fields = HTTPFields()
        fields[.acceptEncoding] = "identity"
        fields[.userAgent] = configuration.userAgent
        baseFields = fields
        transportOptions = TransportOptions(
            connectTimeout: configuration.connectTimeout, tls: configuration.tls,
            httpVersion: configuration.httpVersion,
            receiveWindow: configuration.maxBytesPerSecond.map(Self.receiveWindow(forRate:)))
    }

    /// The receive window for a bandwidth limit: 1/32 of a second of it, within 16 KiB to 1 MiB. What waits unread
    /// is what the server sent beyond the limit, all at once when the transfer starts: a few downloads' windows stay
    /// within 5% of what the limit allows in 2 s. A connection moves at most a window per round trip, so one
    /// download reaches the limit over round trips up to 31 ms (more downloads share it); a link with longer ones
    /// stays under it.
    static func receiveWindow(forRate bytesPerSecond: Int64) -> Int {
        Int(min(max(bytesPerSecond / 32, 16 << 10), 1 << 20))
    }

    /// Watches this downloader's running attempts for stalls.
    let stallWatch: StallWatch
    /// The bandwidth all downloads share (``Configuration/maxBytesPerSecond``, then ``setMaxBytesPerSecond(_:)``).
    let bandwidth: BandwidthLimit

    /// Sets the most body bytes per second all this downloader's downloads receive together (at least 1), or lifts
    /// the limit (`nil`): running downloads go at the new rate from their next bytes, and a wait already begun is
    /// looked at again within a quarter of a second.
    ///
    /// - Precondition: `limit` is `nil` or at least 1.
    public func setMaxBytesPerSecond(_ limit: Int64?) {
        precondition((limit ?? 1) >= 1, "a speed limit must be at least 1 byte per second, not \(limit ?? 0)")
        bandwidth.set(limit)
    }

    /// The most body bytes per second all downloads receive together now, or `nil` for no limit.
    public var maxBytesPerSecond: Int64? { bandwidth.bytesPerSecond }
    /// Spaces requests and keeps the holds hosts asked for.
    let pacer: RequestPacer
    /// ``transport`` when its exchanges can be interrupted (asked once, not per download).
    let interruptibleTransport: (any InterruptibleHTTPTransport)?
    /// The header fields of a request that sets none and resumes nothing, made once (see `makeRequest`).
    let baseFields: HTTPFields
    /// What every request asks of the transport beside the request itself.
    let transportOptions: TransportOptions

    /// Downloads `request` and returns once the file is published (or was skipped by the conflict policy).
    ///
    /// - Parameters:
    ///   - request: what to download and where to put it.
    ///   - onEvent: called for every ``DownloadEvent``, in order, on the downloading task.
    /// - Throws: ``DownloadError``; nothing of this download is left at the destination.
    public func download(
        _ request: DownloadRequest,
        onEvent: (@Sendable (DownloadEvent) -> Void)? = nil
    ) async throws(DownloadError) -> DownloadResult {
        try await download(request, absentPath: nil, onEvent: onEvent)
    }

    /// Downloads `request`; `absentPath`, when given, is its destination path, which was found absent shortly
    /// before (see ``DownloadQueue/add(_:)-([DownloadRequest])``): it is not looked up again. `connections` grants
    /// the extra connections of a segmented download (without it, each opens at once).
    func download(
        _ request: DownloadRequest, absentPath: String?, connections: (any ConnectionBroker)? = nil,
        control: DownloadControl? = nil, onEvent: (@Sendable (DownloadEvent) -> Void)?
    ) async throws(DownloadError) -> DownloadResult {
        let run = DownloadRun(
            request: request, downloader: self, absentPath: absentPath, connections: connections, control: control,
            emit: onEvent ?? { _ in })
        do {
            let result = try await run.execute()
            onEvent?(.finished(result))
            return result
        } catch var error {
            run.cleanUp(after: error)
            if error.totalBytes == nil { error.totalBytes = run.facts.total }
            onEvent?(.failed(error))
            throw error
        }
    }

    /// The executor a task downloading `request` should prefer (see ``HTTPTransport/preferredExecutor(for:)``):
    /// none with ``Durability/powerLoss``, whose `fsync`s would hold up the transport's threads for milliseconds.
    func preferredExecutor(for request: DownloadRequest) -> (any TaskExecutor)? {
        configuration.durability == .powerLoss ? nil : transport.preferredExecutor(for: request.url)
    }

    /// Starts downloading `request` in a new task and returns a handle with its events and result.
    public func start(_ request: DownloadRequest) -> DownloadTask {
        DownloadTask(request: request, downloader: self)
    }
}
