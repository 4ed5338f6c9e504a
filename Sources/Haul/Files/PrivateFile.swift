import Foundation

#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A small file only its owner may read (a cookie jar, a session file), replaced whole.
package enum PrivateFile {
    /// The step of ``replace(_:with:)`` that failed, and the `errno` it failed with.
    package struct Failure: Error {
        package enum Step: Sendable {
            case create, setMode, write, replace
        }
        package var step: Step
        package var code: Int32
        /// `strerror`'s words for ``code``.
        package var reason: String { String(cString: strerror(code)) }
    }

    /// Creates an empty file at `path` that only its owner may read, unless something is there already: a database
    /// made owner-only before SQLite opens it (SQLite gives the `-wal` and `-shm` files it makes the database's mode).
    /// Whatever is already at `path` is left as it is.
    package static func createIfAbsent(_ path: String) {
        let descriptor = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        if descriptor >= 0 { close(descriptor) }
    }

    /// Replaces the file at `path` with `bytes` through a temporary file beside it: mode 0600 whatever the umask,
    /// written through to the disk before it is renamed over `path`, so a reader (or a crash) sees the old file or
    /// the new one, never a part. No temporary file is left behind when a step fails. On Linux the bytes are written
    /// into a file without a name (`O_TMPFILE`), named only once they are on the disk and renamed right after: a
    /// process killed while it writes leaves nothing behind (a cookie jar's copy least of all).
    package static func replace(_ path: String, with bytes: [UInt8]) throws(Failure) {
        // Beside it: `.NAME.RANDOM.tmp` in the same directory, so the rename stays on one file system.
        let nameStart = path.lastIndex(of: "/").map { path.index(after: $0) } ?? path.startIndex
        let suffix = String(UInt64.random(in: .min ... .max), radix: 16)
        let temporary = "\(path[..<nameStart]).\(path[nameStart...]).\(suffix).tmp"
        #if os(Linux)
        let directory = nameStart == path.startIndex ? "." : String(path[..<nameStart])
        if try replaceUnnamed(path, in: directory, through: temporary, with: bytes) { return }
        #endif
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw Failure(step: .create, code: errno) }
        do throws(Failure) {
            try fill(descriptor, with: bytes)
        } catch {
            close(descriptor)
            unlink(temporary)
            throw error
        }
        guard close(descriptor) == 0 else {
            let code = errno
            unlink(temporary)
            throw Failure(step: .write, code: code)
        }
        guard rename(temporary, path) == 0 else {
            let code = errno
            unlink(temporary)
            throw Failure(step: .replace, code: code)
        }
    }

    #if os(Linux)
    /// ``replace(_:with:)`` through a file without a name in `directory`, linked at `temporary` once written and
    /// renamed over `path`. `false` when the file system or the system cannot make or name one (the caller writes a
    /// named temporary file instead).
    private static func replaceUnnamed(
        _ path: String, in directory: String, through temporary: String, with bytes: [UInt8]
    ) throws(Failure) -> Bool {
        guard PartialFile.canLinkUnnamed else { return false }
        let descriptor = open(directory, __O_TMPFILE | O_WRONLY | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        try fill(descriptor, with: bytes)
        guard PartialFile.linkDescriptor(descriptor, to: temporary) == 0 else { return false }
        guard rename(temporary, path) == 0 else {
            let code = errno
            unlink(temporary)
            throw Failure(step: .replace, code: code)
        }
        return true
    }
    #endif

    private static func fill(_ descriptor: Int32, with bytes: [UInt8]) throws(Failure) {
        // open(2)'s mode is reduced by the umask; set it whole so the result is 0600 whatever the umask.
        guard fchmod(descriptor, 0o600) == 0 else { throw Failure(step: .setMode, code: errno) }
        var offset = 0
        while offset < bytes.count {
            let count = bytes[offset...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw Failure(step: .write, code: errno)
            }
            offset += count
        }
        // Without it, a crash soon after the rename could leave an empty file where the old one was.
        guard DiskSync.toDisk(descriptor) == 0 else { throw Failure(step: .write, code: errno) }
    }
}
