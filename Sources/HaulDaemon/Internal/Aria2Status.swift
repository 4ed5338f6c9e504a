import Foundation
import Haul

/// aria2's status objects (`tellStatus`, the lists): every number a string, `keys` choosing the members.
enum Aria2Status {
    /// aria2's piece length for HTTP downloads: what front ends divide by to draw pieces.
    static let pieceLength: Int64 = 1 << 20

    /// The members of a status object `keys` asks for (aria2: an unknown key is left out, no keys means all).
    struct Keys: OptionSet {
        let rawValue: UInt16

        static let gid = Keys(rawValue: 1 << 0)
        static let status = Keys(rawValue: 1 << 1)
        static let totalLength = Keys(rawValue: 1 << 2)
        static let completedLength = Keys(rawValue: 1 << 3)
        static let uploadLength = Keys(rawValue: 1 << 4)
        static let downloadSpeed = Keys(rawValue: 1 << 5)
        static let uploadSpeed = Keys(rawValue: 1 << 6)
        static let connections = Keys(rawValue: 1 << 7)
        static let pieceLength = Keys(rawValue: 1 << 8)
        static let numPieces = Keys(rawValue: 1 << 9)
        static let dir = Keys(rawValue: 1 << 10)
        static let files = Keys(rawValue: 1 << 11)
        static let errorCode = Keys(rawValue: 1 << 12)
        static let errorMessage = Keys(rawValue: 1 << 13)
        static let bitfield = Keys(rawValue: 1 << 14)
        static let all = Keys(rawValue: (1 << 15) - 1)

        static let names: [String: Keys] = [
            "gid": .gid, "status": .status, "totalLength": .totalLength, "completedLength": .completedLength,
            "uploadLength": .uploadLength, "downloadSpeed": .downloadSpeed, "uploadSpeed": .uploadSpeed,
            "connections": .connections, "pieceLength": .pieceLength, "numPieces": .numPieces, "dir": .dir,
            "files": .files, "errorCode": .errorCode, "errorMessage": .errorMessage, "bitfield": .bitfield,
        ]

        init(rawValue: UInt16) { self.rawValue = rawValue }

        /// The members `keys` names; all of them for none.
        init(_ keys: [String]?) {
            guard let keys, !keys.isEmpty else {
                self = .all
                return
            }
            self = keys.reduce(into: []) { $0.formUnion(Self.names[$1] ?? []) }
        }
    }

    /// The status object of `item`, from the queue's `status` while it is there, from its ending once it has ended.
    static func object(_ item: Daemon.Item, status: DownloadStatus?, keys: [String]?) -> JSON {
        var output: [UInt8] = []
        write(item, status: status, keys: Keys(keys), to: &output)
        return .encoded(EncodedJSON(output))
    }

    /// aria2's name of a download's state (`nil`: not in the queue yet, waiting). One paused while it ran is active
    /// until its run has stopped (it has no place in the waiting order yet), as aria2 shows it.
    static func name(of status: DownloadStatus?) -> String {
        switch status?.state {
        case .running?: "active"
        case .paused?: status?.position == nil ? "active" : "paused"
        case .waiting?, nil: "waiting"
        // Ended a moment ago: its outcome is on its way to the daemon, which shows it once it is stored.
        case .finished?: "active"
        }
    }

    /// A list of status objects, each item with its queue status (`nil` once it has ended).
    static func list(_ entries: some Sequence<(Daemon.Item, DownloadStatus?)>, keys: [String]?) -> JSON {
        let keys = Keys(keys)
        var output: [UInt8] = [UInt8(ascii: "[")]
        output.reserveCapacity(4096)
        for (index, (item, status)) in entries.enumerated() {
            if index > 0 { output.append(UInt8(ascii: ",")) }
            write(item, status: status, keys: keys, to: &output)
        }
        output.append(UInt8(ascii: "]"))
        return .encoded(EncodedJSON(output))
    }

    /// Appends the status object of `item` with the members `keys` asks for to `output`: written straight to bytes,
    /// as clients ask for a thousand of them every second.
    static func write(_ item: Daemon.Item, status: DownloadStatus?, keys: Keys, to output: inout [UInt8]) {
        let state: String
        let total: Int64
        let completed: Int64
        let speed: Int64
        let connections: Int
        if let ending = item.ending {
            state = ending.status
            (total, completed, speed, connections) = (ending.length, ending.completed, 0, 0)
        } else {
            state = name(of: status)
            total = status?.progress.totalBytes ?? 0
            completed = status?.progress.bytesWritten ?? 0
            speed = Int64(status?.progress.bytesPerSecond ?? 0)
            connections = status?.connections ?? 0
        }
        var members = Members(output: output)
        output = []
        if keys.contains(.gid) { members.quoted("gid", item.gid.description) }
        if keys.contains(.status) { members.quoted("status", state) }
        if keys.contains(.totalLength) { members.number("totalLength", total) }
        if keys.contains(.completedLength) { members.number("completedLength", completed) }
        if keys.contains(.uploadLength) { members.quoted("uploadLength", "0") }
        if keys.contains(.downloadSpeed) { members.number("downloadSpeed", speed) }
        if keys.contains(.uploadSpeed) { members.quoted("uploadSpeed", "0") }
        if keys.contains(.connections) { members.number("connections", Int64(connections)) }
        if keys.contains(.pieceLength) { members.number("pieceLength", pieceLength) }
        if keys.contains(.numPieces) { members.number("numPieces", (total + pieceLength - 1) / pieceLength) }
        // As aria2: only for a download that has started, of a known length.
        if keys.contains(.bitfield), total > 0, completed > 0 || state != "waiting" && state != "paused" {
            members.string("bitfield", bitfield(total: total, completed: completed))
        }
        if keys.contains(.dir) { members.string("dir", item.shownDirectory) }
        if keys.contains(.files) {
            members.name("files")
            members.output.append(contentsOf: #"[{"index":"1","path":"#.utf8)
            writePath(of: item, to: &members.output)
            members.output.append(contentsOf: #","length":"#.utf8)
            Members.quotedNumber(total, to: &members.output)
            members.output.append(contentsOf: #","completedLength":"#.utf8)
            Members.quotedNumber(completed, to: &members.output)
            members.output.append(contentsOf: #","selected":"true","uris":"#.utf8)
            writeURIs(item.uris, to: &members.output)
            members.output.append(contentsOf: "}]".utf8)
        }
        if let ending = item.ending {
            if keys.contains(.errorCode) { members.number("errorCode", Int64(ending.errorCode)) }
            // Empty too, as aria2 answers it for every stopped download.
            if keys.contains(.errorMessage) { members.string("errorMessage", ending.errorMessage) }
        }
        members.output.append(UInt8(ascii: "}"))
        output = members.output
    }

    /// aria2's `bitfield` of a file of `total` bytes with `completed` of them written: one bit per piece of
    /// ``pieceLength``, the first piece the highest bit of the first byte, in hex. Haul keeps no map of pieces: the
    /// pieces counted as loaded are those `completed` bytes fill from the start (all of them once the file is done;
    /// for a file fetched in segments the count is right, the places are not).
    static func bitfield(total: Int64, completed: Int64) -> String {
        let pieces = Int((total + pieceLength - 1) / pieceLength)
        let loaded = completed >= total ? pieces : Int(completed / pieceLength)
        let digits = Array("0123456789abcdef".utf8)
        var hex: [UInt8] = []
        hex.reserveCapacity((pieces + 7) / 8 * 2)
        for start in stride(from: 0, to: pieces, by: 8) {
            let set = min(max(loaded - start, 0), 8)
            let byte = UInt8(truncatingIfNeeded: 0xFF00 >> set)
            hex.append(digits[Int(byte >> 4)])
            hex.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: hex, as: UTF8.self)
    }

    /// An object's members as they are appended, each after a comma but the first.
    private struct Members {
        var output: [UInt8]
        var first = true

        init(output: [UInt8]) {
            self.output = output
            self.output.append(UInt8(ascii: "{"))
        }

        mutating func name(_ name: StaticString) {
            if !first { output.append(UInt8(ascii: ",")) }
            first = false
            output.append(UInt8(ascii: "\""))
            output.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
            output.append(contentsOf: "\":".utf8)
        }

        /// A member whose value needs no escaping.
        mutating func quoted(_ name: StaticString, _ value: StaticString) {
            self.name(name)
            output.append(UInt8(ascii: "\""))
            output.append(contentsOf: UnsafeBufferPointer(start: value.utf8Start, count: value.utf8CodeUnitCount))
            output.append(UInt8(ascii: "\""))
        }

        /// A member whose value needs no escaping (a GID, a status).
        mutating func quoted(_ name: StaticString, _ value: String) {
            self.name(name)
            output.append(UInt8(ascii: "\""))
            output.append(contentsOf: value.utf8)
            output.append(UInt8(ascii: "\""))
        }

        mutating func string(_ name: StaticString, _ value: String) {
            self.name(name)
            JSON.write(value, to: &output)
        }

        /// A number, as a string as aria2 sends every number.
        mutating func number(_ name: StaticString, _ value: Int64) {
            self.name(name)
            Self.quotedNumber(value, to: &output)
        }

        static func quotedNumber(_ value: Int64, to output: inout [UInt8]) {
            output.append(UInt8(ascii: "\""))
            if value < 0 { output.append(UInt8(ascii: "-")) }
            var magnitude = value.magnitude
            var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: room for 20 digits
            withUnsafeMutableBytes(of: &digits) { buffer in
                var start = buffer.count
                repeat {
                    start -= 1
                    buffer[start] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                    magnitude /= 10
                } while magnitude > 0
                output.append(contentsOf: buffer[start...])
            }
            output.append(UInt8(ascii: "\""))
        }
    }

    /// The directory and the file's path of `request` (the path empty while a name from the response is still to
    /// come).
    static func destination(of request: DownloadRequest) -> (directory: String, path: String) {
        switch request.destination {
        case .file(let url):
            // The path once, its directory cut from it: a URL's path is decoded again on each call.
            let path = url.path
            return (directory(of: path), path)
        case .directory(let url, _): return (url.path, request.plannedPath ?? "")
        }
    }

    /// The directory of the file at `path`.
    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// Appends `getUris`'s answer for `uris`: the first is used, the mirrors wait; user info is left out.
    static func writeURIs(_ uris: [String], to output: inout [UInt8]) {
        output.append(UInt8(ascii: "["))
        for (index, uri) in uris.enumerated() {
            if index > 0 { output.append(UInt8(ascii: ",")) }
            output.append(contentsOf: #"{"uri":"#.utf8)
            // Only a URI with user info has something to hide: the others are not parsed again for every list.
            JSON.write(
                uri.utf8.contains(UInt8(ascii: "@")) ? URL(string: uri)?.redactedString ?? uri : uri, to: &output)
            output.append(contentsOf: (index == 0 ? #","status":"used"}"# : #","status":"waiting"}"#).utf8)
        }
        output.append(UInt8(ascii: "]"))
    }

    /// Appends the path of `item`'s file as a JSON string, made of its directory and its file's relative path.
    static func writePath(of item: Daemon.Item, to output: inout [UInt8]) {
        let file = item.shownFile
        guard !file.isEmpty, !file.hasPrefix("/") else { return JSON.write(file, to: &output) }
        output.append(UInt8(ascii: "\""))
        if item.shownDirectory != "/" { JSON.writeContents(item.shownDirectory, to: &output) }
        output.append(UInt8(ascii: "/"))
        JSON.writeContents(file, to: &output)
        output.append(UInt8(ascii: "\""))
    }

    /// Options as answered: secrets left out.
    static func shown(_ options: [String: String]) -> [String: JSON] {
        var shown: [String: JSON] = [:]
        for (name, value) in DownloadPlan.withoutSecrets(options) {
            if name == "header" {
                shown[name] = .array(value.split(separator: "\n").map { .string(String($0)) })
            } else if sizeOptions.contains(name), let bytes = try? DownloadPlan.byteCount(value, option: name) {
                shown[name] = .string(String(bytes))  // as aria2 answers it: `100K` is 102400
            } else {
                shown[name] = .string(value)
            }
        }
        return shown
    }

    /// The options whose values are sizes or rates (`1M`, `100K`), which aria2 answers in bytes.
    static let sizeOptions: Set<String> = [
        "max-download-limit", "max-overall-download-limit", "min-split-size", "lowest-speed-limit",
    ]

    /// aria2's error code of a download a user removed (its `REMOVED`, 31: "Aborted by user").
    static let removedCode = 31

    /// aria2's exit status for how a download failed ("EXIT STATUS" in its manual).
    static func exitCode(of error: DownloadError) -> Int {
        switch error.code {
        case .httpStatus: error.status == 404 ? 3 : 22
        case .timedOut, .stalled, .tooSlow: 2
        case .checksumMismatch: 32
        case .destinationExists: 13
        case .destinationBusy: 11
        case .tooManyRedirects, .redirectLoop: 22
        case .fileSystem: 16
        case .invalidRequest: 28
        case .cancelled: 5
        default: 1
        }
    }
}
