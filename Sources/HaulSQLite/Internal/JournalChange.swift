import Haul

/// One change a write makes to the journal, encoded by its caller (a request's JSON is slow: never under a lock or in
/// the committer's time).
enum JournalChange: Sendable, Equatable {
    case upsert(RecordRow)
    case remove(JournalKey)

    /// The key it changes.
    var key: JournalKey {
        switch self {
        case .upsert(let row): JournalKey(url: row.url, destination: row.destination)
        case .remove(let key): key
        }
    }

    // MARK: As a pending log keeps it

    /// The change in a pending log's payload: a kind byte, then the row's fields in a fixed order; text as a
    /// 4-byte length and UTF-8 (`UInt32.max` for none), integers as a presence byte and 8 bytes.
    var payload: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(256)
        switch self {
        case .remove(let key):
            bytes.append(2)
            Self.put(key.url, into: &bytes)
            Self.put(key.destination, into: &bytes)
        case .upsert(let row):
            bytes.append(1)
            for text in [row.url, row.destination, row.path, row.state] { Self.put(text, into: &bytes) }
            for text in [row.validator, row.sha256, row.request, row.failure, row.missingRanges] {
                Self.put(text, into: &bytes)
            }
            for number in [row.totalBytes, row.size, row.modifiedNanoseconds, row.inode] {
                Self.put(number, into: &bytes)
            }
        }
        return bytes
    }

    /// The change in a pending log's payload followed by its ticket (8 bytes; see ``ChangeOrder``).
    func payload(ticket: Int64) -> [UInt8] {
        var bytes = payload
        Self.putWord(ticket, into: &bytes)
        return bytes
    }

    /// Replaces the ticket at the end of a payload ``payload(ticket:)`` made: a journal makes its payloads before it
    /// takes its lock, and their tickets under the lock, in the order of its log.
    static func stamp(_ ticket: Int64, on payload: inout [UInt8]) {
        payload.removeLast(8)
        putWord(ticket, into: &payload)
    }

    /// The change a payload holds and its ticket (`nil` in a payload written before changes had tickets); `nil`
    /// for bytes ``payload`` or ``payload(ticket:)`` does not make, a ticket out of ``ChangeOrder``'s range included.
    static func read(_ payload: [UInt8]) -> (change: JournalChange, ticket: Int64?)? {
        var reader = Reader(bytes: payload)
        let change: JournalChange
        switch reader.byte() {
        case 2:
            guard let url = reader.text(), let destination = reader.text() else { return nil }
            change = .remove(JournalKey(url: url, destination: destination))
        case 1:
            guard let url = reader.text(), let destination = reader.text(), let path = reader.text(),
                let state = reader.text()
            else { return nil }
            let (validator, sha256, request, failure, missingRanges) = (
                reader.optionalText(), reader.optionalText(), reader.optionalText(), reader.optionalText(),
                reader.optionalText()
            )
            let (totalBytes, size, modified, inode) = (
                reader.number(), reader.number(), reader.number(), reader.number()
            )
            guard let validator, let sha256, let request, let failure, let missingRanges, let totalBytes, let size,
                let modified, let inode
            else { return nil }
            change = .upsert(
                RecordRow(
                    url: url, destination: destination, path: path, state: state, sequence: 0, validator: validator,
                    totalBytes: totalBytes, size: size, sha256: sha256, modifiedNanoseconds: modified, inode: inode,
                    request: request, failure: failure, missingRanges: missingRanges))
        default:
            return nil
        }
        if reader.atEnd { return (change, nil) }
        guard let ticket = reader.word(8), reader.atEnd, ticket > 0, ticket < ChangeOrder.limit else { return nil }
        return (change, Int64(ticket))
    }

    private static func put(_ text: String?, into bytes: inout [UInt8]) {
        guard let text else { return put32(UInt32.max, into: &bytes) }
        put32(UInt32(text.utf8.count), into: &bytes)
        bytes.append(contentsOf: text.utf8)
    }

    private static func putWord(_ word: Int64, into bytes: inout [UInt8]) {
        for index in 0..<8 { bytes.append(UInt8(truncatingIfNeeded: UInt64(bitPattern: word) >> (8 * index))) }
    }

    private static func put(_ number: Int64?, into bytes: inout [UInt8]) {
        guard let number else { return bytes.append(0) }
        bytes.append(1)
        putWord(number, into: &bytes)
    }

    private static func put32(_ value: UInt32, into bytes: inout [UInt8]) {
        for index in 0..<4 { bytes.append(UInt8(truncatingIfNeeded: value >> (8 * index))) }
    }

    /// Reads a payload; every read past the end or of a malformed field answers `nil`.
    private struct Reader {
        let bytes: [UInt8]
        var offset = 0

        var atEnd: Bool { offset == bytes.count }

        mutating func byte() -> UInt8? {
            guard offset < bytes.count else { return nil }
            defer { offset += 1 }
            return bytes[offset]
        }

        mutating func word(_ size: Int) -> UInt64? {
            guard bytes.count - offset >= size else { return nil }
            defer { offset += size }
            return (0..<size).reduce(0) { $0 | UInt64(bytes[offset + $1]) << (8 * $1) }
        }

        /// Text that must be there.
        mutating func text() -> String? {
            guard case .some(.some(let text)) = optionalText() else { return nil }
            return text
        }

        /// `.some(nil)` for text marked absent; `nil` for a malformed field.
        mutating func optionalText() -> String?? {
            guard let length = word(4) else { return nil }
            if length == UInt32.max { return .some(nil) }
            guard bytes.count - offset >= Int(length) else { return nil }
            defer { offset += Int(length) }
            return String(decoding: bytes[offset..<offset + Int(length)], as: UTF8.self)
        }

        /// `.some(nil)` for a number marked absent; `nil` for a malformed field.
        mutating func number() -> Int64?? {
            switch byte() {
            case 0: return .some(nil)
            case 1: return word(8).map { Int64(bitPattern: $0) }
            default: return nil
            }
        }
    }
}

/// A change and its ticket: its place in the order of every change made to the database (``ChangeOrder``).
struct OrderedChange: Sendable {
    let change: JournalChange
    let ticket: Int64
}
