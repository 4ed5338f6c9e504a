import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Finds the entries of a list that would write one file, in memory that does not grow with the list.
///
/// Each planned path is kept as a 64-bit hash with its entry's number (16 bytes). Up to 65,536 of them are held in
/// memory; beyond that, each full buffer is sorted and written to an unnamed temporary file, and at the end the
/// file is read back one hash range (1/256 of the hashes) at a time. Equal hashes are candidates only: the caller
/// plans those entries again and compares their paths.
final class DuplicateFinder {
    private struct Record {
        var hash: UInt64
        var ordinal: UInt64
    }

    private static let bufferCapacity = 1 << 16
    private static let bucketBits = 8
    private var buffer: [Record] = []
    private var spill: Int32?
    private var spilledBytes: Int64 = 0
    /// For each hash range, where its records are in the spill file: one run per buffer written.
    private var segments: [[(offset: Int64, count: Int)]] = []

    deinit {
        if let spill { close(spill) }
    }

    /// Notes that entry number `ordinal` would write `path`.
    func add(_ path: String, ordinal: Int) throws {
        if buffer.count == Self.bufferCapacity { try flush() }
        buffer.append(Record(hash: UInt64(bitPattern: Int64(PathKey(path).hashValue)), ordinal: UInt64(ordinal)))
    }

    /// Groups of entry numbers (ascending, two or more each) whose paths hash alike.
    func candidates() throws -> [[Int]] {
        guard spill != nil else {
            buffer.sort { $0.hash < $1.hash }
            return Self.groups(in: buffer)
        }
        try flush()
        var groups: [[Int]] = []
        for bucket in segments {
            var records: [Record] = []
            for segment in bucket { records += try read(segment) }
            records.sort { $0.hash < $1.hash }
            groups += Self.groups(in: records)
        }
        return groups
    }

    private static func groups(in sorted: [Record]) -> [[Int]] {
        var groups: [[Int]] = []
        var start = 0
        while start < sorted.count {
            var end = start + 1
            while end < sorted.count, sorted[end].hash == sorted[start].hash { end += 1 }
            if end - start > 1 { groups.append(sorted[start..<end].map { Int($0.ordinal) }.sorted()) }
            start = end
        }
        return groups
    }

    /// Writes the buffer, sorted, as one run, noting where each hash range starts in it.
    private func flush() throws {
        guard !buffer.isEmpty else { return }
        let descriptor = try spill ?? InputSpool.makeTemporaryFile()
        spill = descriptor
        if segments.isEmpty { segments = Array(repeating: [], count: 1 << Self.bucketBits) }
        buffer.sort { $0.hash < $1.hash }
        var start = 0
        while start < buffer.count {
            let bucket = Int(buffer[start].hash >> UInt64(64 - Self.bucketBits))
            var end = start
            while end < buffer.count, Int(buffer[end].hash >> UInt64(64 - Self.bucketBits)) == bucket { end += 1 }
            let offset = spilledBytes + Int64(start * MemoryLayout<Record>.stride)
            segments[bucket].append((offset, end - start))
            start = end
        }
        let bytes = buffer.withUnsafeBytes { Array($0) }
        try InputSpool.writeAll(bytes[...], to: descriptor)
        spilledBytes += Int64(bytes.count)
        buffer.removeAll(keepingCapacity: true)
    }

    private func read(_ segment: (offset: Int64, count: Int)) throws -> [Record] {
        guard let spill else { return [] }
        var records = [Record](repeating: Record(hash: 0, ordinal: 0), count: segment.count)
        let size = segment.count * MemoryLayout<Record>.stride
        var done = 0
        while done < size {
            let count = records.withUnsafeMutableBytes {
                pread(spill, $0.baseAddress.map { $0 + done }, size - done, off_t(segment.offset + Int64(done)))
            }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { throw count == 0 ? POSIXError(.EIO) : InputSpool.lastError() }
            done += count
        }
        return records
    }
}
