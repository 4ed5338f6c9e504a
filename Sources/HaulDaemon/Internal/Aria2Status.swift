import Foundation
import Haul

/// aria2's status objects (`tellStatus`, the lists): every number a string, `keys` choosing the members.
enum Aria2Status {
    /// aria2's piece length for HTTP downloads: what front ends divide by to draw pieces.
    static let pieceLength: Int64 = 1 << 20

    /// The status object of `item`, from the queue's `status` while it is there, from its ending once it has ended.
    static func object(_ item: Daemon.Item, status: DownloadStatus?, keys: [String]?, root: String) -> JSON {
        var members: [String: JSON] = [:]
        let total: Int64
        let completed: Int64
        members["gid"] = .string(item.gid.description)
        if let ending = item.ending {
            members["status"] = .string(ending.status)
            total = ending.length
            completed = ending.completed
            members["errorCode"] = .string(String(ending.errorCode))
            if !ending.errorMessage.isEmpty { members["errorMessage"] = .string(ending.errorMessage) }
            members["downloadSpeed"] = "0"
            members["connections"] = "0"
        } else {
            let state: String =
                switch status?.state {
                case .running?: "active"
                case .paused?: "paused"
                case .waiting?, nil: "waiting"
                case .finished?: "complete"  // ended a moment ago: its outcome is on its way to the daemon
                }
            members["status"] = .string(state)
            total = status?.progress.totalBytes ?? 0
            completed = status?.progress.bytesWritten ?? 0
            members["downloadSpeed"] = .string(String(Int64(status?.progress.bytesPerSecond ?? 0)))
            members["connections"] = .string(String(status?.connections ?? 0))
        }
        members["totalLength"] = .string(String(total))
        members["completedLength"] = .string(String(completed))
        members["uploadLength"] = "0"
        members["uploadSpeed"] = "0"
        members["pieceLength"] = .string(String(pieceLength))
        members["numPieces"] = .string(String((total + pieceLength - 1) / pieceLength))
        members["dir"] = .string(item.shownDirectory)
        members["files"] = [
            [
                "index": "1", "path": .string(item.shownPath), "length": .string(String(total)),
                "completedLength": .string(String(completed)), "selected": "true", "uris": item.shownURIs,
            ]
        ]
        guard let keys, !keys.isEmpty else { return .object(members) }
        return .object(members.filter { keys.contains($0.key) })
    }

    /// The directory and the file's path of `request` (the path empty while a name from the response is still to
    /// come).
    static func destination(of request: DownloadRequest) -> (directory: String, path: String) {
        switch request.destination {
        case .file(let url): (url.deletingLastPathComponent().path, url.path)
        case .directory(let url, _): (url.path, request.plannedFileURL?.path ?? "")
        }
    }

    /// The directory of the file at `path`.
    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// `getUris`: the first URI is used, the mirrors wait.
    static func uris(_ uris: [URL]) -> JSON {
        .array(
            uris.enumerated().map { index, uri in
                ["uri": .string(uri.redactedString), "status": index == 0 ? "used" : "waiting"]
            })
    }

    /// Options as answered: secrets left out.
    static func shown(_ options: [String: String]) -> [String: JSON] {
        var shown: [String: JSON] = [:]
        for (name, value) in DownloadPlan.withoutSecrets(options) {
            shown[name] =
                name == "header" ? .array(value.split(separator: "\n").map { .string(String($0)) }) : .string(value)
        }
        return shown
    }

    /// aria2's exit status for how a download failed ("EXIT STATUS" in its manual).
    static func exitCode(of error: DownloadError) -> Int {
        switch error.code {
        case .httpStatus: error.status == 404 ? 3 : 22
        case .timedOut, .stalled, .tooSlow: 2
        case .checksumMismatch: 32
        case .destinationExists: 13
        case .tooManyRedirects, .redirectLoop: 22
        case .fileSystem: 16
        case .invalidRequest: 28
        case .cancelled: 5
        default: 1
        }
    }
}
