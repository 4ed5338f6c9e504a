public import Foundation
public import HTTPTypes

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension DownloadQueue {
    /// Fetches `url` into memory: a GET for API calls (a JSON document, say), under the same queue limits and
    /// the same retry, redirect, status and size rules as a file download.
    ///
    /// ```swift
    /// let json = try await queue.data(from: quotesURL, maxSize: 1 << 20)
    /// let quotes = try JSONDecoder().decode([Quote].self, from: json)
    /// ```
    ///
    /// The body streams through a private temporary file (removed before this returns) rather than a growing
    /// buffer, so an interrupted transfer resumes with `Range` like any download and memory holds the body once.
    ///
    /// - Parameters:
    ///   - url: what to GET.
    ///   - headerFields: extra request header fields (`Authorization` and `Cookie` never follow a redirect to
    ///     another origin).
    ///   - maxSize: The largest body accepted (32 MiB by default); a larger one fails with
    ///     ``DownloadError/Code/sizeLimitExceeded`` before it is read.
    ///   - priority: Scheduling priority among queued work.
    /// - Throws: ``DownloadError``. Cancelling the calling task cancels the request.
    public func data(
        from url: URL,
        headerFields: HTTPFields = [:],
        maxSize: Int64 = 32 << 20,
        priority: Int = 0
    ) async throws(DownloadError) -> Data {
        let directory = try Self.makePrivateDirectory(for: url)
        // Everything in it is this call's: the body, or a partial a cancelled or failed download kept
        // (`keepsPartialOnCancel`, a failure the engine keeps bytes of for a resume nobody will ask for).
        defer { try? FileManager.default.removeItem(at: directory) }
        let request = DownloadRequest(
            url: url, destination: .file(directory.appendingPathComponent("body")), headerFields: headerFields,
            maxSize: maxSize, priority: priority)
        let result = try await download(request)
        do {
            return try Data(contentsOf: result.fileURL)
        } catch {
            throw DownloadError(
                .fileSystem, message: "could not read the downloaded body back: \(error.localizedDescription)",
                url: url, path: result.fileURL.path, underlying: error)
        }
    }

    /// A fresh directory only this user can enter (mkdtemp: mode 0700, a name nobody can predict).
    private static func makePrivateDirectory(for url: URL) throws(DownloadError) -> URL {
        var template = Array((FileManager.default.temporaryDirectory.path + "/haul-data.XXXXXX").utf8CString)
        let made = template.withUnsafeMutableBufferPointer { buffer in
            buffer.baseAddress.flatMap { mkdtemp($0) }.map { String(cString: $0) }
        }
        guard let made else {
            let code = errno
            throw DownloadError(
                .fileSystem,
                message: "could not create a temporary directory in \(FileManager.default.temporaryDirectory.path): "
                    + String(cString: strerror(code)),
                url: url, underlying: POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO))
        }
        return URL(fileURLWithPath: made, isDirectory: true)
    }
}
