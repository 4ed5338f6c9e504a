import Foundation
import HaulOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Makes the directories a download's path needs under the worker's directory, one component at a time and without
/// following symbolic links: a link planted there could lead a download out of the directory. Remembers the
/// directories it made or found (up to 4,096, then starts again: a queue may name a directory per file).
final class ParentDirectories: Sendable {
    let base: String
    private let known = Locked(Set<String>())

    init(base: URL) {
        self.base = base.path
    }

    /// Makes the directories of `path` (relative, checked by ``SharedDownload``), or says why it cannot.
    func make(for path: String) -> String? {
        let parts = path.split(separator: "/").dropLast()
        guard !parts.isEmpty else { return nil }
        var current = base
        for part in parts {
            current += "/" + part
            if known.withLock({ $0.contains(current) }) { continue }
            var info = stat()
            if lstat(current, &info) == 0 {
                guard info.st_mode & S_IFMT == S_IFDIR else {
                    return "'\(current)' is not a directory (a symbolic link or a file there is not followed)"
                }
            } else if mkdir(current, 0o755) != 0, errno != EEXIST {
                return "cannot make the directory '\(current)': \(String(cString: strerror(errno)))"
            } else if lstat(current, &info) != 0 || info.st_mode & S_IFMT != S_IFDIR {
                return "'\(current)' is not a directory (a symbolic link or a file there is not followed)"
            }
            known.withLock { known in
                if known.count >= 4_096 { known.removeAll() }
                known.insert(current)
            }
        }
        return nil
    }
}
