#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A regular file inside the served root, opened for reading.
struct ServedFile {
    var descriptor: CInt
    var size: Int
    var modifiedSecondsSince1970: Int
    var inode: UInt64
}

/// Maps a URL path below the root to a file, never leaving the root, and never to a name starting with a dot (nor to
/// one inside such a directory): what a directory holds under those (`.haul`, `.git`, `.ssh`, `.env`) is its owner's
/// state, not what it publishes.
struct FileResolver: Sendable {
    enum Outcome {
        case found(ServedFile)
        case notFound
        case forbidden
    }

    /// The root, resolved through symlinks once, without a trailing slash.
    let root: String

    init?(rootPath: String) {
        guard let resolved = realpath(rootPath, nil) else { return nil }
        root = String(cString: resolved)
        free(resolved)
    }

    /// `relativePath` is the percent-decoded path after the mount point.
    func resolve(relativePath: String) -> Outcome {
        // Reject traversal syntactically first, then check the real path, so a symlink inside the root
        // pointing outside it is refused as well.
        if relativePath.utf8.contains(0) || relativePath.contains("\\") { return .forbidden }
        let segments = relativePath.split(separator: "/", omittingEmptySubsequences: true)
        if segments.contains(where: { $0 == ".." || $0 == "." }) { return .forbidden }
        if segments.isEmpty || segments.contains(where: { $0.hasPrefix(".") }) { return .notFound }
        let candidate = root + "/" + segments.joined(separator: "/")
        guard let resolvedPointer = realpath(candidate, nil) else { return .notFound }
        let resolved = String(cString: resolvedPointer)
        free(resolvedPointer)
        guard resolved.hasPrefix(root + "/") else { return .forbidden }
        // A link with a plain name may lead to a dot name inside the root.
        if resolved.dropFirst(root.count).split(separator: "/").contains(where: { $0.hasPrefix(".") }) {
            return .notFound
        }
        // Opening a local file blocks only briefly; fine for a test server, and sendfile does the rest.
        // O_NONBLOCK: opening a named pipe blocks until a writer comes, which would hold the event loop (and every
        // connection on it) for good; the fstat below then refuses it. A regular file reads the same either way.
        let descriptor = open(resolved, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard descriptor >= 0 else { return .notFound }
        var info = stat()
        guard fstat(descriptor, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            close(descriptor)
            return .notFound
        }
        return .found(
            ServedFile(
                descriptor: descriptor,
                size: Int(info.st_size),
                modifiedSecondsSince1970: Self.modifiedSeconds(info),
                inode: UInt64(info.st_ino)
            )
        )
    }

    /// The modification time in whole seconds: Linux's `stat` names it `st_mtim`, Darwin's `st_mtimespec`
    /// (`<sys/stat.h>`, without `_POSIX_C_SOURCE`).
    private static func modifiedSeconds(_ info: stat) -> Int {
        #if canImport(Darwin)
        Int(info.st_mtimespec.tv_sec)
        #else
        Int(info.st_mtim.tv_sec)
        #endif
    }
}
