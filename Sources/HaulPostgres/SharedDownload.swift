public import Foundation
public import Haul
import HTTPTypes

/// One download as the shared queue keeps it: a request, and the path its file takes under each worker's directory.
///
/// The request is stored without its destination (every worker writes under its own `-d DIR`) and without secrets:
/// a request that carries credentials (a user and password, or a header field `DownloadRequest.isSecretField(_:)`
/// names: `Authorization`, `Cookie`, `X-Api-Key`...) is refused, because the database would hold them for every
/// reader of the queue. Give workers their credentials instead (a netrc file, `--user`).
///
/// ```swift
/// let download = try SharedDownload(request: DownloadRequest(url: url, destination: .directory(base)), path: "a/b.iso")
/// let request = download.request(in: URL(fileURLWithPath: "/srv/data"))   // writes /srv/data/a/b.iso
/// ```
public struct SharedDownload: Sendable, Hashable {
    /// The request; its `destination` is replaced by ``request(in:)``.
    public var request: DownloadRequest
    /// The file's path under a worker's directory: relative, `/`-separated, without `.` or `..` components.
    public let path: String
    /// How many times the download is tried in all before it is failed for good (transient failures only; a
    /// permanent one fails it at once).
    public var maxAttempts: Int

    /// Creates a download of `request` at `path` under each worker's directory.
    /// - Throws: ``SharedQueueError/Code/invalidDownload`` when `path` could leave the directory or the request
    ///   carries credentials.
    public init(request: DownloadRequest, path: String, maxAttempts: Int = 4) throws(SharedQueueError) {
        if let problem = Self.problem(withPath: path) {
            throw SharedQueueError(.invalidDownload, "path '\(path)' \(problem)")
        }
        if request.credentials != nil {
            throw SharedQueueError(
                .invalidDownload,
                "'\(request.url.absoluteString)' carries a user and password, which the queue would store for every "
                    + "reader of the database: give workers their credentials (--netrc-file, --user)")
        }
        if let field = request.headerFields.first(where: { DownloadRequest.isSecretField($0.name.canonicalName) }) {
            let name = field.name.rawName
            throw SharedQueueError(
                .invalidDownload,
                "the header '\(name)' would be stored in the database in clear: give workers their credentials "
                    + "(--netrc-file, --user, --cookie) instead")
        }
        guard maxAttempts >= 1 else {
            throw SharedQueueError(.invalidDownload, "maxAttempts must be at least 1, not \(maxAttempts)")
        }
        self.request = request
        self.path = path
        self.maxAttempts = maxAttempts
    }

    /// The request, writing its file at ``path`` under `directory`.
    public func request(in directory: URL) -> DownloadRequest {
        var request = request
        request.destination = .file(directory.appendingPathComponent(path, isDirectory: false))
        return request
    }

    /// The key per-host limits count by (scheme, host and port of the URL).
    public var hostKey: String { DownloadRequest.originKey(for: request.url) }

    /// Why `path` cannot be a file's place under a directory, or `nil` when it can.
    static func problem(withPath path: String) -> String? {
        if path.isEmpty { return "is empty" }
        if path.hasPrefix("/") { return "is absolute: it must be relative to the workers' directory" }
        if path.utf8.contains(0) { return "holds a NUL byte" }
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        if parts.contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }) {
            return "has an empty, '.' or '..' component"
        }
        if parts.contains(".haul") { return "goes through '.haul', where Haul keeps its records" }
        return nil
    }
}
