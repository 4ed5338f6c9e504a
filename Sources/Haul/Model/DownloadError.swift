public import Foundation

/// Why a download failed.
///
/// A struct wrapping a private code, so cases can be added without breaking the API; match on ``code``
/// (`error.code == .httpStatus`). Every error carries the URL and says what happened and what to do.
public struct DownloadError: Error, Sendable, CustomStringConvertible, LocalizedError {
    /// What kind of failure this is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Hashable, Sendable {
            case httpStatus, tooManyRedirects, redirectLoop, redirectRefused, checksumMismatch, sizeLimitExceeded
            case sizeMismatch, destinationExists, destinationBusy, unsafeName, unsafePath, stalled, truncated, cancelled
            case transport, fileSystem, invalidRequest, invalidResponse, timedOut, tooSlow
        }
        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// The server answered with a status that is not a success (see ``DownloadError/status``).
        public static let httpStatus = Code(.httpStatus)
        /// More redirects than the limit (10 by default).
        public static let tooManyRedirects = Code(.tooManyRedirects)
        /// A redirect led back to a URL already visited.
        public static let redirectLoop = Code(.redirectLoop)
        /// A redirect to a scheme other than http/https, or without a usable `Location`.
        public static let redirectRefused = Code(.redirectRefused)
        /// The file's digest differs from the expected one.
        public static let checksumMismatch = Code(.checksumMismatch)
        /// The body is larger than the request's `maxSize`.
        public static let sizeLimitExceeded = Code(.sizeLimitExceeded)
        /// The file's size differs from the request's `expectedSize`.
        public static let sizeMismatch = Code(.sizeMismatch)
        /// The destination exists and the conflict policy is `fail`.
        public static let destinationExists = Code(.destinationExists)
        /// Another download, in this process or another, is writing the same destination (it holds the lock on
        /// the partial file); this one left it alone.
        public static let destinationBusy = Code(.destinationBusy)
        /// No safe file name could be made from the URL or `Content-Disposition`.
        public static let unsafeName = Code(.unsafeName)
        /// A symbolic link or other non-regular file sits where Haul would write; it is not followed.
        public static let unsafePath = Code(.unsafePath)
        /// No byte arrived for the stall timeout.
        public static let stalled = Code(.stalled)
        /// The download took longer than its time limit (``DownloadRequest/timeLimit``), retries and waits
        /// included; not retried.
        public static let timedOut = Code(.timedOut)
        /// The transfer stayed slower than the request's ``DownloadRequest/minimumSpeed`` for its duration; retried
        /// (and resumed) like a stall.
        public static let tooSlow = Code(.tooSlow)
        /// The connection closed before the announced `Content-Length` arrived.
        public static let truncated = Code(.truncated)
        /// The download was cancelled.
        public static let cancelled = Code(.cancelled)
        /// The transport failed (connection refused or reset, DNS, TLS…); see ``DownloadError/underlying``.
        public static let transport = Code(.transport)
        /// Reading or writing a file failed (full disk, permissions…); see ``DownloadError/underlying``.
        public static let fileSystem = Code(.fileSystem)
        /// The server's response contradicts itself or the request: a `Content-Range` that does not match the
        /// request or the body, lengths that do not add up, a malformed header.
        public static let invalidResponse = Code(.invalidResponse)
        /// The request itself is invalid (unsupported scheme, bad digest…).
        public static let invalidRequest = Code(.invalidRequest)

        /// The code's name.
        public var description: String { value.rawValue }
    }

    /// What kind of failure this is.
    public let code: Code
    /// The URL the failure is about (the redirect target, where one was involved), if any.
    public var url: URL?
    /// The HTTP status, for ``Code/httpStatus``.
    public var status: Int?
    /// The file path involved, for file-system and destination errors.
    public var path: String?
    /// Body bytes received in the last attempt.
    public var bytesReceived: Int64?
    /// The file's full size, when a response had said it before the download failed: with ``bytesReceived``, how far
    /// the download got (a queue's ``DownloadStatus/progress`` of it once it has ended).
    public var totalBytes: Int64?
    /// The error underneath, for ``Code/transport`` and ``Code/fileSystem``.
    public var underlying: (any Error)?
    /// What happened, in words.
    public let message: String
    /// Whether another attempt might succeed (a transient failure: a retryable status, a connection reset, a stall,
    /// a truncated body), as the engine judged it when it gave up: set on the error a download ends with after its
    /// retries ran out. A shared queue uses it to try the download again later, perhaps on another worker.
    public internal(set) var isTransient = false
    /// How long the server asked to wait before the next request (`Retry-After`, with a `429` or `503`), if it did.
    public internal(set) var retryAfter: Duration?

    /// Creates an error; `message` should say what happened and, where it helps, what to do.
    public init(
        _ code: Code, message: String, url: URL? = nil, status: Int? = nil, path: String? = nil,
        bytesReceived: Int64? = nil, underlying: (any Error)? = nil
    ) {
        self.code = code
        self.message = message
        self.url = url
        self.status = status
        self.path = path
        self.bytesReceived = bytesReceived
        self.underlying = underlying
    }

    /// `true` for a cancellation.
    public var isCancellation: Bool { code == .cancelled }

    /// Whether the bytes a download had received before this error are still good to resume from: the failure is
    /// about the network, the server's answer or the time it took, not about the bytes or the destination.
    var leavesResumableBytes: Bool {
        switch code {
        case .transport, .truncated, .stalled, .tooSlow, .timedOut, .httpStatus, .cancelled, .tooManyRedirects,
            .redirectLoop, .redirectRefused:
            true
        default:
            false
        }
    }

    /// The message, prefixed with the URL.
    public var description: String {
        guard let url else { return message }
        return "\(url.redactedString): \(message)"
    }

    /// Same as ``description``.
    public var errorDescription: String? { description }
}
