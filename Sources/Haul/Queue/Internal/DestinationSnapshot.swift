import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Which destinations of a batch are absent when the batch is added, learnt by listing each directory once
/// instead of looking every destination up when its download starts.
///
/// Why: each look-up (`lstat`) searches the directory under the lock that the downloads publishing into it take
/// too, and a batch of small files then spends its time waiting for that lock (bench/compare, s3); listing the
/// directory once is cheap. The look-up only spares a request for a file that is there already; what keeps an existing file
/// safe is publishing, which never replaces a file unless the policy is `overwrite`. A file that appears after the
/// batch was added is therefore found when publishing, and its policy applies then (see `DownloadRun`).
///
/// Linux only: there a name is present exactly when `readdir` lists it. File systems that fold case or normalise
/// Unicode (the default on Apple platforms) would make "not listed" a wrong "absent".
package enum DestinationSnapshot {
    /// A directory with fewer destinations of the batch is not listed: a look-up each is cheaper than listing a
    /// directory that may hold many other files.
    package static let minimumPerDirectory = 64

    /// For each request, its destination path if that was absent when listed (`nil` for the rest); `nil` when no
    /// directory was listed.
    package static func absentPaths(of requests: [DownloadRequest]) -> [String?]? {
        #if os(Linux)
        guard requests.count >= minimumPerDirectory else { return nil }
        var byDirectory: [Substring: [(index: Int, path: String)]] = [:]
        for (index, request) in requests.enumerated() {
            guard let path = request.plannedPath else { continue }
            byDirectory[FileNaming.split(path: path).directory, default: []].append((index, path))
        }
        var absent = [String?](repeating: nil, count: requests.count)
        var listed = false
        for (directory, members) in byDirectory where members.count >= minimumPerDirectory {
            guard let names = names(in: String(directory)) else { continue }
            listed = true
            for member in members where !names.contains(FileNaming.split(path: member.path).name) {
                absent[member.index] = member.path
            }
        }
        return listed ? absent : nil
        #else
        return nil
        #endif
    }

    /// The destination directories of a stream of requests (``DownloadQueue/downloads(_:window:)``), each listed once,
    /// when its first request is read: a list of small files into a new directory then looks none of them up when its
    /// download starts. A directory is listed only while the names listed in all stay under ``maximumNames``; one
    /// that holds more (a rerun into a full directory) is not used, and its downloads look their files up.
    package struct Listing {
        /// The names kept at most, across directories: the listing's memory stays bounded, whatever the list.
        package static let maximumNames = 1 << 16
        #if os(Linux)
        private var directories: [String: Set<Substring>?] = [:]
        private var namesKept = 0
        #endif
        private let budget: Int

        /// A listing of at most `budget` names in all (no more than ``maximumNames``). A name read costs less than a
        /// download's own look-up of its file, but not nothing, so a caller that knows how many requests the listing
        /// serves bounds it by a few per request: a full directory listed for a handful of downloads costs more time
        /// than it saves, and memory (``maximumNames`` names take megabytes).
        package init(budget: Int = maximumNames) {
            self.budget = min(max(0, budget), Self.maximumNames)
        }

        /// The destination path of `request` if it was absent when its directory was listed.
        package mutating func absentPath(of request: DownloadRequest) -> String? {
            #if os(Linux)
            guard let path = request.plannedPath else { return nil }
            let (directory, name) = FileNaming.split(path: path)
            let key = String(directory)
            let listed: Set<Substring>?
            if let known = directories[key] {
                listed = known
            } else {
                // Past the budget no more directories are listed (nor remembered).
                guard namesKept < budget else { return nil }
                listed = names(in: key, atMost: budget - namesKept)
                directories[key] = listed
                namesKept += listed?.count ?? 0
            }
            guard let listed, !listed.contains(name) else { return nil }
            return path
            #else
            return nil
            #endif
        }
    }

    #if os(Linux)
    /// The names in `directory`: empty if it does not exist (yet), `nil` if it cannot be listed or holds more than
    /// `limit`.
    static func names(in directory: String, atMost limit: Int = .max) -> Set<Substring>? {
        guard let stream = opendir(directory) else { return errno == ENOENT ? [] : nil }
        defer { closedir(stream) }
        var names = Set<Substring>()
        errno = 0
        while let entry = readdir(stream) {
            guard names.count < limit else { return nil }
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: Int(NAME_MAX) + 1) { String(cString: $0) }
            }
            names.insert(name[...])
        }
        // A listing cut short by an error would claim that the names it missed are absent.
        return errno == 0 ? names : nil
    }
    #endif
}
