import Foundation
import HaulOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The directories under one base directory that downloads write into (`haul get`'s `dir=` directories, a shared
/// queue worker's paths), walked one component at a time without following symbolic links: a link planted there
/// could lead the downloads out of the base, so it is refused, as is anything there that is not a directory. Missing
/// directories are made with mode 0777 less the umask, as `mkdir -p` makes them.
///
/// Remembers the directories it found or made (up to 4,096, then starts again: a list may name a directory per file).
package final class ContainedDirectories: Sendable {
    /// What stops a walk.
    package enum Finding: Sendable, Equatable {
        /// A symbolic link where a directory should be.
        case symbolicLink
        /// A file or other non-directory where a directory should be.
        case notDirectory
        /// The directory is missing and `mkdir` failed with this `errno`.
        case cannotCreate(errno: Int32)
    }

    /// Where a walk stopped, and why.
    package struct Problem: Sendable, Equatable {
        /// The path of the component that stopped it.
        package let path: String
        package let finding: Finding
    }

    /// The base directory (not checked: its caller makes it).
    package let base: String
    private let known = Locked(Set<String>())

    /// Walks under `base`, a path without a trailing slash.
    package init(base: String) {
        self.base = base
    }

    /// Walks `components` (directory names, relative to ``base``) in order: with `making`, makes the missing ones;
    /// without, stops at the first missing one (the rest is made later). Returns what stopped it, if anything did.
    package func walk<Components: Sequence>(_ components: Components, making: Bool) -> Problem?
    where Components.Element: StringProtocol {
        var path = base
        for component in components {
            path += "/" + component
            if known.withLock({ $0.contains(path) }) { continue }
            var info = stat()
            if lstat(path, &info) != 0 {
                guard making else { return nil }
                if mkdir(path, 0o777) == 0 {
                    info.st_mode = S_IFDIR  // what is there now: the directory just made
                } else {
                    let error = errno
                    // Made meanwhile by another download, or by another process: fine if it is a directory now.
                    guard error == EEXIST, lstat(path, &info) == 0 else {
                        return Problem(path: path, finding: .cannotCreate(errno: error))
                    }
                }
            }
            switch info.st_mode & S_IFMT {
            case S_IFDIR: break
            case S_IFLNK: return Problem(path: path, finding: .symbolicLink)
            default: return Problem(path: path, finding: .notDirectory)
            }
            known.withLock { known in
                if known.count >= 4_096 { known.removeAll(keepingCapacity: true) }
                known.insert(path)
            }
        }
        return nil
    }
}
