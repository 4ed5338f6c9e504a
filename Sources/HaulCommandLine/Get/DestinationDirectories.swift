import Foundation
import Haul
import HaulOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The destination directory and the `dir=` directories under it. A `dir=` path is walked one component at a time
/// without following symbolic links: a link there could lead the downloads out of the destination, so it is
/// refused, as is anything there that is not a directory. Checked when the input is checked (nothing is made
/// then), made when its first download is read to run.
final class DestinationDirectories: Sendable {
    let base: String
    /// Directories already checked or made: a list names the same few again and again. Emptied when it grows past
    /// 4,096, so a list naming a directory per line is not kept whole.
    private let known = Locked(Set<String>())

    init(base: URL) {
        self.base = base.standardizedFileURL.path
    }

    /// Creates the destination directory.
    func createBase() throws(UsageFailure) {
        do {
            try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        } catch {
            throw UsageFailure([
                InputProblem(origin: "-d/--dir", message: "cannot create '\(base)': \(GetCommand.reason(error))")
            ])
        }
    }

    /// The directory `request` writes into.
    static func directory(of request: DownloadRequest) -> String {
        switch request.destination {
        case .file(let file): file.deletingLastPathComponent().standardizedFileURL.path
        case .directory(let directory, _): directory.standardizedFileURL.path
        }
    }

    /// What is wrong with the directory of `request` as things are (a missing directory is fine: it will be made).
    func check(_ request: DownloadRequest) -> InputProblem? {
        walk(Self.directory(of: request), making: false)
    }

    /// Makes the directory of `request` and the missing ones above it, under the destination.
    func make(_ request: DownloadRequest) -> InputProblem? {
        walk(Self.directory(of: request), making: true)
    }

    private func walk(_ directory: String, making: Bool) -> InputProblem? {
        guard directory != base, !known.withLock({ $0.contains(directory) }) else { return nil }
        var path = base
        let relative = directory.hasPrefix(base + "/") ? directory.dropFirst(base.count + 1) : ""
        for component in relative.split(separator: "/") {
            path += "/" + component
            if known.withLock({ $0.contains(path) }) { continue }
            switch Self.inspect(path, making: making) {
            case .missing: return nil  // checking only: the rest is made later
            case .problem(let problem):
                return InputProblem(origin: "dir=\(relative)", message: "'\(path)' \(problem)")
            case .directory:
                known.withLock { known in
                    if known.count >= 4096 { known.removeAll(keepingCapacity: true) }
                    known.insert(path)
                }
            }
        }
        return nil
    }

    private enum Finding {
        case directory, missing
        case problem(String)
    }

    /// What is at `path`; with `making`, a missing directory is made.
    private static func inspect(_ path: String, making: Bool) -> Finding {
        var info = stat()
        if lstat(path, &info) == 0 {
            switch info.st_mode & S_IFMT {
            case S_IFDIR: return .directory
            case S_IFLNK:
                return .problem("is a symbolic link; Haul does not follow links out of the destination directory")
            default: return .problem("exists and is not a directory")
            }
        }
        guard making else { return .missing }
        if mkdir(path, 0o777) == 0 || errno == EEXIST && lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR {
            return .directory
        }
        return .problem("cannot be created: \(String(cString: strerror(errno)))")
    }
}
