import Atomics
import Foundation
import Haul

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A file beside the database that holds one batch of changes written and not committed yet
/// (`NAME-pending.<pid>.<n>.<0|1>`): what makes a write survive the process being killed the moment it returns,
/// for the few milliseconds before the batch is committed. A journal has two, one taking changes while the other's
/// batch is committed; a log whose batch is committed is restarted for the next one.
///
/// Frames: length and checksum (8 bytes: the payload's length, and above it a checksum of batch and payload), batch
/// number (8 bytes), payload, padded to 8 bytes. A frame is written payload first, then its batch number, then its
/// length, each word with one aligned store, so a process killed during an append leaves a frame whose length is
/// zero, which ends the log; a frame whose bytes were changed afterwards (a damaged disk after a power loss) fails its
/// checksum, and ends the log too, reported. Logs of an earlier version (their own magic) have no checksum. The header (magic, batch number) says which batch the
/// log holds: restarting it is one store of a new batch number, and frames left from an earlier batch end the log
/// as a torn one does.
///
/// On Linux the frames are copied into a shared mapping of space reserved with `fallocate` and made writable ahead
/// (a full disk is then an error of the reservation, and the append falls back to `pwrite`), so an append is a copy:
/// on ext4 a `write(2)` also changes the inode's times, a journal handle per change. Elsewhere an append is two
/// `pwrite`s: the frame with a zero length, then its length.
///
/// Ownership: the journal that makes a log holds an exclusive `flock` on it while it is open. A log nobody holds was
/// left by a killed process: the next journal to open the database commits its batch and deletes it.
final class PendingLog: @unchecked Sendable {  // appends and restarts are serialized by the journal's lock
    let path: String
    private let descriptor: Int32
    /// The batch the log holds (the header's), and the bytes of its frames after the header.
    private(set) var batch: UInt64 = 0
    private var length = PendingLog.headerSize
    private var mapping: UnsafeMutableRawPointer?
    private var reserved = 0

    private static let magic: UInt64 = 0x3244_4E45_5048_4148  // "HAHPEND2", little-endian
    /// The magic of the logs the version before wrote, whose frames have no checksum.
    private static let uncheckedMagic: UInt64 = 0x4C44_4E45_5048_4148  // "HAHPENDL"
    static let headerSize = 16
    /// Space reserved and made writable at once, and added at a time: a batch of a few hundred changes.
    private static let reservation = 1 << 17
    /// Address space mapped for a log; a batch larger than this is appended with `pwrite`.
    private static let window = 1 << 30

    /// The prefix of the logs beside the database at `databasePath`.
    static func prefix(of databasePath: String) -> String { databasePath + "-pending." }

    /// Creates and locks a log beside `databasePath` named `NAME-pending.<instance>.<side>`, holding batch `batch`.
    init(databasePath: String, instance: String, side: Int, batch: UInt64) throws {
        // Created and locked under a name that holds no changes, then renamed: a journal opening at this moment
        // must never find a named log unlocked and take it for a dead one. A journal opening now may lock the unnamed
        // one for a moment (``others(besides:)``: it deletes only one left for more than a minute), so the lock is
        // waited for; nothing else takes it.
        let hidden = "\(databasePath)-newpending.\(instance).\(side)"
        path = Self.prefix(of: databasePath) + "\(instance).\(side)"
        let descriptor = open(hidden, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw Self.error("cannot create the journal's log '\(hidden)'") }
        var locked = flock(descriptor, LOCK_EX)
        while locked != 0 && errno == EINTR { locked = flock(descriptor, LOCK_EX) }
        guard locked == 0, rename(hidden, path) == 0 else {
            let error = Self.error("cannot lock the journal's log '\(hidden)'")
            close(descriptor)
            unlink(hidden)
            throw error
        }
        self.descriptor = descriptor
        #if os(Linux)
        if reserve(Self.reservation), let mapping {
            // The pages appends will write, made writable now rather than by a fault on a download's thread
            // (MADV_POPULATE_WRITE, Linux 5.14; older kernels refuse it, harmlessly).
            _ = madvise(mapping, reserved, 23)
        }
        #endif
        restart(batch: batch)
    }

    deinit {
        if let mapping { munmap(mapping, Self.window) }
        close(descriptor)
    }

    /// Starts batch `batch`: the frames of the one before no longer count.
    func restart(batch: UInt64) {
        self.batch = batch
        length = Self.headerSize
        var header = [UInt8]()
        Self.put(Self.magic, into: &header)
        Self.put(batch, into: &header)
        write(header, at: 0)
    }

    /// Appends one frame per payload.
    func append(_ payloads: [[UInt8]]) throws {
        for payload in payloads {
            let padded = (payload.count + 7) & ~7
            let needed = length + 16 + padded
            #if os(Linux)
            if reserve(needed), let mapping {
                let frame = mapping + length
                frame.storeBytes(of: 0, as: UInt64.self)
                payload.withUnsafeBytes { bytes in
                    if let start = bytes.baseAddress { (frame + 16).copyMemory(from: start, byteCount: bytes.count) }
                }
                Self.publish(batch, at: frame + 8)
                Self.publish(Self.lengthWord(payload, batch: batch), at: frame)
                length = needed
                continue
            }
            #endif
            var bytes = [UInt8](repeating: 0, count: 8)
            Self.put(batch, into: &bytes)
            bytes += payload
            bytes += repeatElement(0, count: padded - payload.count)
            var size: [UInt8] = []
            Self.put(Self.lengthWord(payload, batch: batch), into: &size)
            guard write(bytes, at: length), write(size, at: length) else {
                throw Self.error("cannot append to the journal's log '\(path)'")
            }
            length = needed
        }
    }

    /// A frame's first word: the payload's length, and above it the checksum of `batch` and the payload.
    static func lengthWord(_ payload: [UInt8], batch: UInt64) -> UInt64 {
        UInt64(payload.count) | UInt64(checksum(payload[...], batch: batch)) << 32
    }

    /// A 32-bit checksum of `batch` and `payload`, eight bytes at a time (a multiply and a shift per word, each a
    /// bijection, so any change to a word changes what follows): it finds damage, it is no defence against forgery.
    static func checksum(_ payload: ArraySlice<UInt8>, batch: UInt64) -> UInt32 {
        var hash = 0x9E37_79B9_7F4A_7C15 ^ batch ^ UInt64(payload.count) &* 0xD6E8_FEB8_6659_FD93
        var index = payload.startIndex
        while index < payload.endIndex {
            var word: UInt64 = 0
            for shift in 0..<min(8, payload.endIndex - index) {
                word |= UInt64(payload[index + shift]) << (8 * shift)
            }
            hash = (hash ^ word) &* 0xBF58_476D_1CE4_E5B9
            hash ^= hash >> 31
            index += 8
        }
        return UInt32(truncatingIfNeeded: hash ^ hash >> 32)
    }

    /// Deletes the log (its batch is committed, and the journal is closing).
    func remove() {
        unlink(path)
    }

    /// A word stored so that the compiler keeps it after the stores before it (a kill sees memory as stored).
    private static func publish(_ value: UInt64, at address: UnsafeMutableRawPointer) {
        UnsafeAtomic<UInt64>(at: address.assumingMemoryBound(to: UInt64.AtomicRepresentation.self))
            .store(value, ordering: .releasing)
    }

    @discardableResult
    private func write(_ bytes: [UInt8], at offset: Int) -> Bool {
        #if os(Linux)
        if offset + bytes.count <= reserved, let mapping {
            bytes.withUnsafeBytes { buffer in
                if let start = buffer.baseAddress {
                    (mapping + offset).copyMemory(from: start, byteCount: buffer.count)
                }
            }
            return true
        }
        #endif
        return bytes.withUnsafeBytes { buffer in
            guard let start = buffer.baseAddress else { return true }
            var done = 0
            while done < buffer.count {
                let written = pwrite(descriptor, start + done, buffer.count - done, off_t(offset + done))
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { return false }
                done += written
            }
            return true
        }
    }

    #if os(Linux)
    /// Makes sure the first `needed` bytes are allocated and mapped; `false` (the append by `pwrite`) when they
    /// cannot be.
    private func reserve(_ needed: Int) -> Bool {
        guard needed > reserved else { return true }
        guard needed <= Self.window else { return false }
        let size = min(Self.window, (needed + Self.reservation - 1) / Self.reservation * Self.reservation)
        guard posix_fallocate(descriptor, off_t(reserved), off_t(size - reserved)) == 0 else { return false }
        if mapping == nil {
            let mapped = mmap(nil, Self.window, PROT_READ | PROT_WRITE, MAP_SHARED, descriptor, 0)
            guard let mapped, mapped != MAP_FAILED else { return false }
            mapping = mapped
        }
        reserved = size
        return true
    }
    #endif

    // MARK: Reading a dead log

    /// A file named like a log that a journal opening leaves alone, and why.
    struct Refused: Error, CustomStringConvertible {
        let description: String
    }

    /// Another journal's log: its batch number and payloads.
    struct Left {
        let path: String
        let instance: String
        let batch: UInt64
        let payloads: [[UInt8]]
        /// Whether a frame failed its checksum: the payloads are those before it.
        let damaged: Bool
        /// Held locked until the caller has committed and deleted the log (-1 for a live journal's log).
        let descriptor: Int32
    }

    /// The logs of other journals beside `databasePath`, each list in the order written. `left`: those nobody holds
    /// (their journals were killed), each locked for the caller, which commits their batches and deletes them (closing
    /// the descriptors); unnamed logs of journals killed while making them go. `held`: those live journals hold, read
    /// as they are now (never locked or deleted). `refused`: what is named like a log and is not one this journal may
    /// read (not a regular file, another user's, larger than a log can be), left alone, each with why.
    static func others(besides databasePath: String) -> (left: [Left], held: [Left], refused: [String]) {
        let name = (databasePath as NSString).lastPathComponent
        var (left, held, refused): ([Left], [Left], [String]) = ([], [], [])
        for (entry, path, named) in names(besides: databasePath) {
            // Without waiting for a writer (a FIFO named like a log), and never through a link.
            let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
            guard descriptor >= 0 else {
                // Its journal closed meanwhile; a link is not a log.
                if errno == ELOOP { refused.append("'\(path)' is a symbolic link, not a journal's log: left alone") }
                continue
            }
            var info = stat()
            if let problem = fstat(descriptor, &info) == 0 ? Self.problem(with: info) : "cannot be read" {
                refused.append("'\(path)' \(problem): left alone")
                close(descriptor)
                continue
            }
            guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
                // A live journal's.
                if named, let log = read(descriptor) {
                    held.append(
                        Left(
                            path: path, instance: instance(of: entry, name), batch: log.batch, payloads: log.payloads,
                            damaged: log.damaged, descriptor: -1))
                }
                close(descriptor)
                continue
            }
            // Deleted by another journal that committed it while this one was opening it.
            guard fstat(descriptor, &info) == 0, info.st_nlink > 0 else {
                close(descriptor)
                continue
            }
            guard named, let log = read(descriptor) else {
                // An unnamed log holds no change. It is locked a moment after it is made: only one older than a
                // minute is a killed journal's.
                #if canImport(Darwin)
                let modified = info.st_mtimespec.tv_sec
                #else
                let modified = info.st_mtim.tv_sec
                #endif
                if named || time(nil) - modified > 60 { unlink(path) }
                close(descriptor)
                continue
            }
            left.append(
                Left(
                    path: path, instance: instance(of: entry, name), batch: log.batch, payloads: log.payloads,
                    damaged: log.damaged, descriptor: descriptor))
        }
        let written = { (a: Left, b: Left) in (a.instance, a.batch) < (b.instance, b.batch) }
        return (left.sorted(by: written), held.sorted(by: written), refused)
    }

    /// Why a file named like a log is not one to read: a log is a regular file of this user's, no larger than the
    /// space one is given.
    private static func problem(with info: stat) -> String? {
        if info.st_mode & S_IFMT != S_IFREG { return "is not a regular file" }
        if info.st_uid != geteuid() { return "belongs to another user (uid \(info.st_uid))" }
        if info.st_size > off_t(window + headerSize) {
            return "is larger than a journal's log can be (\(info.st_size) bytes)"
        }
        return nil
    }

    /// Whether a journal other than `instance` has a log (named, or being made) beside `databasePath`: a name read
    /// from the directory, nothing opened.
    static func othersExist(besides databasePath: String, instance: String?) -> Bool {
        let name = (databasePath as NSString).lastPathComponent
        let own = instance.map { [name + "-pending." + $0 + ".", name + "-newpending." + $0 + "."] } ?? []
        return names(besides: databasePath).contains { log in !own.contains { log.entry.hasPrefix($0) } }
    }

    /// The files beside `databasePath` named like logs: each name, its path, and whether it is a log's name
    /// (`NAME-pending.*`) rather than one being made (`NAME-newpending.*`).
    private static func names(besides databasePath: String) -> [(entry: String, path: String, named: Bool)] {
        let directory = (databasePath as NSString).deletingLastPathComponent
        let name = (databasePath as NSString).lastPathComponent
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: directory.isEmpty ? "." : directory)) ?? []
        return entries.compactMap { entry in
            let named = entry.hasPrefix(name + "-pending.")
            guard named || entry.hasPrefix(name + "-newpending.") else { return nil }
            return (entry, (directory as NSString).appendingPathComponent(entry), named)
        }
    }

    /// The journal's instance name in a log's file name (`NAME-pending.<instance>.<side>`).
    private static func instance(of entry: String, _ name: String) -> String {
        String(entry.dropFirst(name.count + "-pending.".count).split(separator: ".").dropLast().joined(separator: "."))
    }

    /// The batch number and the whole frames of the log behind `descriptor`; `nil` for one without a header.
    static func read(_ descriptor: Int32) -> (batch: UInt64, payloads: [[UInt8]], damaged: Bool)? {
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_size >= headerSize else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        var count = 0
        while count < bytes.count {
            let read = bytes[count...].withUnsafeMutableBytes {
                pread(descriptor, $0.baseAddress, $0.count, off_t(count))
            }
            if read < 0 && errno == EINTR { continue }
            guard read > 0 else { break }
            count += read
        }
        return parse(Array(bytes[..<count]))
    }

    /// The batch number and whole frames of a log's bytes, up to the first torn frame or (`damaged`) the first that
    /// fails its checksum; `nil` without a header.
    static func parse(_ bytes: [UInt8]) -> (batch: UInt64, payloads: [[UInt8]], damaged: Bool)? {
        guard bytes.count >= headerSize else { return nil }
        let checked = word(bytes, 0) == magic
        guard checked || word(bytes, 0) == uncheckedMagic else { return nil }
        let batch = word(bytes, 8)
        var payloads: [[UInt8]] = []
        var offset = headerSize
        while bytes.count - offset >= 16 {
            let first = word(bytes, offset)
            let size = checked ? first & 0xFFFF_FFFF : first
            guard size > 0, word(bytes, offset + 8) == batch, size <= UInt64(bytes.count - offset - 16) else { break }
            let payload = bytes[(offset + 16)..<(offset + 16 + Int(size))]
            if checked, first >> 32 != UInt64(checksum(payload, batch: batch)) { return (batch, payloads, true) }
            payloads.append(Array(payload))
            offset += 16 + (Int(size) + 7) & ~7
        }
        return (batch, payloads, false)
    }

    private static func word(_ bytes: [UInt8], _ offset: Int) -> UInt64 {
        (0..<8).reduce(0) { $0 | UInt64(bytes[offset + $1]) << (8 * $1) }
    }

    static func put(_ value: UInt64, into bytes: inout [UInt8]) {
        for index in 0..<8 { bytes.append(UInt8(truncatingIfNeeded: value >> (8 * index))) }
    }

    private static func error(_ message: String) -> any Error {
        NSError(
            domain: NSPOSIXErrorDomain, code: Int(errno),
            userInfo: [NSLocalizedDescriptionKey: "\(message): \(String(cString: strerror(errno)))"])
    }
}
