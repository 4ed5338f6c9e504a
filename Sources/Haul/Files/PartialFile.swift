import Foundation
import Synchronization

#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The hidden file a download is written to before it is published at its destination (ARCHITECTURE.md,
/// "Invariants" 1 and 9): same directory as the destination, so publishing is an atomic rename; created, never
/// followed (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600 until published, then ``publishedMode``).
///
/// On Linux a small body that will not be kept for a later resume goes to an unnamed file instead
/// (``init(unnamedFor:url:)``, `O_TMPFILE`), published with one `linkat`: one directory change per file where a
/// named partial takes three (create, link, unlink), and nothing to clean up after a crash. It is created with its
/// final mode (nobody can open a file that has no name), which spares a `fchmod` per file.
final class PartialFile {
    /// The partial's path (for an unnamed file, the name it would have had: used in messages only, so made only
    /// when asked for).
    var path: String { isUnnamed ? Self.partialPath(forDestination: location) : location }
    /// The partial's path, or for an unnamed file its destination's.
    private let location: String
    private var descriptor: Int32
    private(set) var size: Int64 = 0
    /// The file has no name (`O_TMPFILE`); it gets one when published, and vanishes if it never is.
    let isUnnamed: Bool

    /// The partial's path for a destination: `.NAME.haul-partial` beside it. A name too long for that (over 241
    /// bytes) is cut at a character boundary and followed by a digest of the whole name, so that every name a
    /// destination can have has a partial of its own that fits the file system's 255 bytes.
    static func partialPath(forDestination destination: String) -> String {
        let (directory, name) = FileNaming.split(path: destination)
        let decoration = ".".utf8.count + suffix.utf8.count
        var partialName = name
        var tag = ""
        if name.utf8.count + decoration > FileNaming.maxNameBytes {
            tag = "~" + FileNaming.stableDigest(of: name.utf8)
            partialName = FileNaming.prefix(of: name, fittingIn: FileNaming.maxNameBytes - decoration - tag.utf8.count)
        }
        let file = ".\(partialName)\(tag)\(suffix)"
        // split() gives "." for a bare name: keep a bare name bare.
        if !destination.utf8.contains(UInt8(ascii: "/")) { return file }
        return directory == "/" ? "/" + file : "\(directory)/\(file)"
    }

    private static let suffix = ".haul-partial"

    /// Creates a new, empty partial at `path` and takes its writer's lock (see `openLocked`).
    /// A leftover regular file there that nobody holds is emptied and reused; one another writer holds is left
    /// alone (``DownloadError/Code/destinationBusy``); a symbolic link or anything else that is not a regular file is
    /// refused. A leftover with other names (hard links: a directory copied with `cp -al`, or a link planted there)
    /// loses this name to a new file: written through, it would change the file under its other names.
    init(creatingAt path: String, url: URL) throws(DownloadError) {
        location = path
        isUnnamed = false
        var fd = try Self.openLocked(path, flags: O_RDWR | O_CREAT, url: url)
        var info = stat()
        if fstat(fd, &info) == 0, info.st_nlink > 1 {
            unlink(path)
            close(fd)
            fd = try Self.openLocked(path, flags: O_RDWR | O_CREAT | O_EXCL, url: url)
            info = stat()
        }
        descriptor = fd
        // Only a leftover is emptied: ext4 takes any truncation to zero, even of an empty file, for a file being
        // replaced, and then writes its blocks out when it is closed (`auto_da_alloc`), a flush nobody asked for.
        if fstat(descriptor, &info) != 0 || info.st_size != 0, ftruncate(descriptor, 0) != 0 {
            let code = errno
            close(descriptor)
            throw Self.fileSystemError(code, "truncating", path, url)
        }
    }

    /// Opens the partial an earlier run left at `path`, to append to it (or, not `appending`, to write it in place),
    /// and takes its writer's lock. `nil` when
    /// there is none, or when what is there is not a regular file (a symbolic link is not followed; it is replaced
    /// or refused later), or has other names (hard links: it is replaced too). Throws
    /// ``DownloadError/Code/destinationBusy`` when another writer holds it.
    init?(resumingAt path: String, appending: Bool = true, url: URL) throws(DownloadError) {
        let fd: Int32
        do {
            fd = try Self.openLocked(path, flags: appending ? O_RDWR | O_APPEND : O_RDWR, url: url)
        } catch  where error.code != .destinationBusy {
            return nil
        }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_nlink == 1 else {
            close(fd)
            return nil
        }
        location = path
        descriptor = fd
        size = Int64(info.st_size)
        isUnnamed = false
    }

    /// Opens the regular file at `path` (never through a symbolic link) and takes an exclusive `flock` on it without
    /// waiting. The lock is the one-writer rule between downloads, in this process (each open is its own lock) and
    /// in others: whoever holds it is writing the partial and will publish it. After the lock is taken the path must
    /// still name the locked file; if a writer that held it removed or published it meanwhile, the path is opened
    /// again.
    private static func openLocked(_ path: String, flags: Int32, url: URL) throws(DownloadError) -> Int32 {
        for _ in 0..<8 {
            // O_NONBLOCK: a FIFO there must fail (ENXIO), not wait for a reader; regular files ignore it.
            let fd = open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
            guard fd >= 0 else {
                let code = errno
                if code == ELOOP || code == ENXIO || code == EISDIR { throw unsafePathError(path, url) }
                throw fileSystemError(code, "creating", path, url)
            }
            var opened = stat()
            guard fstat(fd, &opened) == 0, opened.st_mode & S_IFMT == S_IFREG else {
                close(fd)
                throw unsafePathError(path, url)
            }
            while flock(fd, LOCK_EX | LOCK_NB) != 0 {
                if errno == EINTR { continue }
                let code = errno
                close(fd)
                if code == EWOULDBLOCK {
                    throw DownloadError(
                        .destinationBusy,
                        message: "another download (in this run or another process) is writing '\(path)'; left to it",
                        url: url, path: path)
                }
                throw fileSystemError(code, "locking", path, url)
            }
            if names(path, fd) { return fd }
            close(fd)  // the file was removed or published while we waited for it: look again
        }
        throw DownloadError(
            .destinationBusy, message: "'\(path)' keeps being replaced by another writer; left to it", url: url,
            path: path)
    }

    /// Creates an unnamed file in the directory of `destination` (Linux `O_TMPFILE`), or returns `nil` where that
    /// is not available (another system, a file system without it, no `/proc` to link it through); the caller then
    /// creates a named partial, whose errors are the ones to report.
    init?(unnamedFor destination: String) {
        #if os(Linux)
        guard Self.canLinkUnnamed else { return nil }
        let directory = String(FileNaming.split(path: destination).directory)
        // 0644 less the umask, applied by open(2) as for any new file: the mode it is published with.
        let fd = open(directory, __O_TMPFILE | O_RDWR | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return nil }
        location = destination
        descriptor = fd
        isUnnamed = true
        #else
        return nil
        #endif
    }

    #if os(Linux)
    /// Whether an unnamed file can be given a name: by descriptor (`AT_EMPTY_PATH`) where the kernel allows it, else
    /// through `/proc/self/fd`.
    static let canLinkUnnamed = access("/proc/self/fd", X_OK) == 0

    /// Whether `linkat(fd, "", ..., AT_EMPTY_PATH)` was refused once (older kernels allow it only with
    /// `CAP_DAC_READ_SEARCH`): then every link goes through `/proc/self/fd`.
    static let emptyPathRefused = Atomic<Bool>(false)
    /// `AT_EMPTY_PATH` from <fcntl.h>, which Glibc's module leaves out (it is behind `_GNU_SOURCE`).
    private static let atEmptyPath: Int32 = 0x1000

    /// Links the unnamed file behind `descriptor` at `destination`; 0 or -1 with `errno` set, like `linkat`.
    /// By descriptor first, which spares a path walk through procfs (and its magic link) per published file.
    /// `throughProc` forces the fallback (for tests).
    static func linkDescriptor(_ descriptor: Int32, to destination: String, throughProc: Bool = false) -> Int32 {
        let tryEmptyPath = !throughProc && !emptyPathRefused.load(ordering: .relaxed)
        if tryEmptyPath {
            if linkat(descriptor, "", AT_FDCWD, destination, atEmptyPath) == 0 { return 0 }
            guard errno == ENOENT || errno == EPERM else { return -1 }
        }
        let result = linkat(AT_FDCWD, "/proc/self/fd/\(descriptor)", AT_FDCWD, destination, AT_SYMLINK_FOLLOW)
        // ENOENT is also what a missing destination directory gives: only a link that then works this way shows
        // that the kernel refuses the other.
        if tryEmptyPath && result == 0 { emptyPathRefused.store(true, ordering: .relaxed) }
        return result
    }
    #endif

    deinit {
        if descriptor >= 0 { close(descriptor) }
    }

    /// Appends `chunk`.
    func write(_ chunk: any ByteChunk, url: URL) throws(DownloadError) {
        let result: Int32 = chunk.withUnsafeBytes { buffer in
            guard let base = buffer.baseAddress else { return 0 }  // an empty chunk writes nothing
            var offset = 0
            while offset < buffer.count {
                let written = posixWrite(descriptor, base + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                offset += written
            }
            return 0
        }
        if result != 0 { throw Self.fileSystemError(result, "writing", path, url) }
        size += Int64(chunk.count)
    }

    /// Appends the first `count` bytes of the file at `source` (a symbolic link there is not followed): the start of a
    /// file another tool left, which the download continues. In the kernel where it can (`sendfile`), else through a
    /// buffer.
    func append(copyOf source: String, count: Int64, url: URL) throws(DownloadError) {
        let input = open(source, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard input >= 0 else { throw Self.fileSystemError(errno, "reading", source, url) }
        defer { close(input) }
        var copied: Int64 = 0
        #if os(Linux)
        while copied < count {
            let moved = sendfile(descriptor, input, nil, Int(min(count - copied, 1 << 30)))
            if moved > 0 {
                copied += Int64(moved)
                continue
            }
            if moved < 0 && errno == EINTR { continue }
            break  // not supported here (or the file ended): the buffer below copies what is left, or finds the end
        }
        size += copied
        #endif
        if copied < count {
            guard lseek(input, off_t(copied), SEEK_SET) >= 0 else {
                throw Self.fileSystemError(errno, "reading", source, url)
            }
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            while copied < count {
                let wanted = Int(min(Int64(buffer.count), count - copied))
                let got = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, wanted) }
                if got < 0 && errno == EINTR { continue }
                if got < 0 { throw Self.fileSystemError(errno, "reading", source, url) }
                if got == 0 {
                    throw DownloadError(
                        .fileSystem, message: "'\(source)' became shorter while it was copied to be continued",
                        url: url, path: source)
                }
                try write(Data(buffer[..<got]), url: url)
                copied += Int64(got)
            }
        }
    }

    /// Makes the file `length` bytes long (what is past its bytes reads as zeros, without taking space) and ready for
    /// ``write(_:count:at:url:)``: a file fetched in segments is written in place, each segment at its offset.
    func prepareForPositionalWrites(length: Int64, url: URL) throws(DownloadError) {
        // A partial resumed to append to was opened with O_APPEND, under which pwrite would append.
        let flags = fcntl(descriptor, F_GETFL)
        guard flags >= 0, fcntl(descriptor, F_SETFL, flags & ~O_APPEND) == 0, ftruncate(descriptor, off_t(length)) == 0
        else {
            throw Self.fileSystemError(errno, "sizing", path, url)
        }
        size = length
    }

    /// Writes the first `count` bytes of `chunk` at `offset` (``prepareForPositionalWrites(length:url:)`` first). Safe
    /// from several threads at once, for different bytes.
    func write(_ chunk: any ByteChunk, count: Int, at offset: Int64, url: URL) throws(DownloadError) {
        let result: Int32 = chunk.withUnsafeBytes { buffer in
            guard let base = buffer.baseAddress else { return 0 }
            var written = 0
            while written < count {
                let result = pwrite(descriptor, base + written, count - written, off_t(offset) + off_t(written))
                if result < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                written += result
            }
            return 0
        }
        if result != 0 { throw Self.fileSystemError(result, "writing", path, url) }
    }

    /// Sets the file's modification (and access) time to `seconds` since 1970, before it is sealed and stamped.
    func setModificationTime(secondsSince1970 seconds: Int64) {
        guard descriptor >= 0 else { return }
        let time = timespec(tv_sec: Int(seconds), tv_nsec: 0)
        _ = futimens(descriptor, [time, time])
    }

    /// Empties the file, for an attempt that starts over.
    func truncate(url: URL) throws(DownloadError) {
        guard ftruncate(descriptor, 0) == 0, lseek(descriptor, 0, SEEK_SET) == 0 else {
            throw Self.fileSystemError(errno, "truncating", path, url)
        }
        size = 0
    }

    /// Makes the finished file ready to publish: synced when `durable`, given ``publishedMode`` (an unnamed file
    /// has it from the start). The descriptor stays open until the file is published or removed: for an unnamed
    /// file it is its only handle, for a named one it holds the writer's lock. Idempotent.
    func seal(durable: Bool, url: URL) throws(DownloadError) {
        guard descriptor >= 0, !sealed else { return }
        if durable, DiskSync.toDisk(descriptor) != 0 { throw Self.fileSystemError(errno, "syncing", path, url) }
        if !isUnnamed, fchmod(descriptor, Self.publishedMode) != 0 {
            throw Self.fileSystemError(errno, "setting permissions of", path, url)
        }
        sealed = true
    }

    private var sealed = false

    /// The mode of a published file: 0644 less the process's umask, what `open(2)` gives a new file (and what curl
    /// and wget leave): readable by others unless the umask says otherwise.
    static let publishedMode: mode_t = 0o644 & ~processUmask

    /// The process's umask, read without changing it: `umask(2)` reads it only by setting it, and another thread
    /// creating a file meanwhile would get the temporary mask. Linux shows it in `/proc/self/status`; elsewhere (and
    /// on a Linux without it) a file is made with mode 0777 and its mode says what the umask took away. 022 if
    /// neither can be done.
    static let processUmask: mode_t = {
        #if os(Linux)
        if let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Umask:") }),
            let umask = mode_t(line.dropFirst("Umask:".count).trimmingCharacters(in: .whitespaces), radix: 8)
        {
            return umask
        }
        #endif
        return probedUmask(in: NSTemporaryDirectory()) ?? 0o022
    }()

    /// The umask as `open(2)` applies it to a file created in `directory` (with mode 0777, then removed), or `nil`
    /// when no file can be made there.
    static func probedUmask(in directory: String) -> mode_t? {
        let path = (directory as NSString).appendingPathComponent(
            ".haul-umask-\(getpid())-\(UInt64.random(in: 0...UInt64.max))")
        let descriptor = open(path, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0o777)
        guard descriptor >= 0 else { return nil }
        defer {
            close(descriptor)
            unlink(path)
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return nil }
        return ~info.st_mode & 0o777
    }

    /// Whether the regular file at `path` holds exactly this file's bytes (it is opened for reading too, so that a
    /// download that lost a race to publish can tell whether the file that won is the one it fetched).
    func holdsSameBytes(asFileAt path: String) -> Bool {
        guard descriptor >= 0 else { return false }
        let other = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)  // a FIFO there: no wait for a writer
        guard other >= 0 else { return false }
        defer { close(other) }
        var mine = stat()
        var theirs = stat()
        guard fstat(descriptor, &mine) == 0, fstat(other, &theirs) == 0, theirs.st_mode & S_IFMT == S_IFREG,
            mine.st_size == theirs.st_size
        else { return false }
        let chunk = 64 << 10
        var (a, b) = ([UInt8](repeating: 0, count: chunk), [UInt8](repeating: 0, count: chunk))
        var offset: off_t = 0
        while offset < mine.st_size {
            let count = a.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, chunk, offset) }
            guard count > 0,
                b.withUnsafeMutableBytes({ pread(other, $0.baseAddress, count, offset) }) == count,
                a[..<count] == b[..<count]
            else { return false }
            offset += off_t(count)
        }
        return true
    }

    /// The stamp of the sealed file, which publishing keeps (a link or rename changes neither inode nor times).
    func stamp() -> FileStamp? {
        guard descriptor >= 0 else { return FileStamp(ofFileAt: path) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return nil }
        return FileStamp(info)
    }

    /// Moves the sealed file to `destination`. With `replace == false` it never clobbers: it fails with
    /// ``DownloadError/Code/destinationExists`` if a file appeared there meanwhile. A named partial is published
    /// only while its path still names the file this download wrote (it holds the lock, so no other Haul writer
    /// can have replaced it; this also catches anything else that did).
    func move(to destination: String, replace: Bool, durable: Bool, url: URL) throws(DownloadError) {
        if isUnnamed {
            try linkUnnamed(to: destination, url: url)
        } else {
            try checkStillNamed(url: url)
            if replace {
                guard rename(path, destination) == 0 else {
                    throw Self.fileSystemError(errno, "renaming to '\(destination)'", path, url)
                }
            } else {
                // link() is the portable atomic "rename unless the target exists"; then drop the partial's name.
                guard link(path, destination) == 0 else { throw publishingError(errno, to: destination, url: url) }
                unlink(path)
            }
            close(descriptor)
            descriptor = -1
        }
        if durable { Self.syncDirectory(of: destination) }
    }

    /// Whether `path` names the file open behind `descriptor` (a symbolic link there is not followed).
    private static func names(_ path: String, _ descriptor: Int32) -> Bool {
        var opened = stat()
        var named = stat()
        return descriptor >= 0 && fstat(descriptor, &opened) == 0 && lstat(path, &named) == 0
            && opened.st_dev == named.st_dev && opened.st_ino == named.st_ino
    }

    /// Why Haul will not write at `path`: something other than a regular file is there.
    static func unsafePathError(_ path: String, _ url: URL) -> DownloadError {
        DownloadError(
            .unsafePath, message: "refusing to write through a symbolic link or special file at '\(path)'", url: url,
            path: path)
    }

    /// Fails unless the partial's path still names the file open behind ``descriptor``.
    private func checkStillNamed(url: URL) throws(DownloadError) {
        guard Self.names(path, descriptor) else {
            throw DownloadError(
                .fileSystem,
                message: "the partial file '\(path)' was replaced or removed by something else; not published",
                url: url, path: path)
        }
    }

    /// Why linking this file at `destination` failed with `code`: a file there (`EEXIST`, left as it is) or another
    /// file-system error.
    private func publishingError(_ code: Int32, to destination: String, url: URL) -> DownloadError {
        if code == EEXIST {
            return DownloadError(
                .destinationExists, message: "'\(destination)' appeared after the download was queued; left untouched",
                url: url, path: destination)
        }
        return Self.fileSystemError(code, "publishing to '\(destination)'", path, url)
    }

    /// Gives the unnamed file its name, never replacing what is there (`linkat` fails if `destination` exists).
    private func linkUnnamed(to destination: String, url: URL) throws(DownloadError) {
        #if os(Linux)
        precondition(descriptor >= 0, "an unnamed partial is linked once")
        guard Self.linkDescriptor(descriptor, to: destination) == 0 else {
            throw publishingError(errno, to: destination, url: url)
        }
        close(descriptor)
        descriptor = -1
        #endif
    }

    /// Closes and deletes the partial (Haul created it, so Haul may remove it). An unnamed one goes with its
    /// descriptor.
    func remove() {
        // Unlinked while the lock is held, so that no other writer can take over the name in between; and only while
        // the name is still this file's (what replaced it is not Haul's to remove).
        if !isUnnamed, Self.names(path, descriptor) { unlink(path) }
        if descriptor >= 0 {
            close(descriptor)
            descriptor = -1
        }
    }

    private static func syncDirectory(of file: String) {
        let directory = (file as NSString).deletingLastPathComponent
        let fd = open(directory.isEmpty ? "." : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 {
            _ = DiskSync.toDisk(fd)
            close(fd)
        }
    }

    static func fileSystemError(_ code: Int32, _ action: String, _ path: String, _ url: URL) -> DownloadError {
        let reason = String(cString: strerror(code))
        let advice = code == ENOSPC || code == EFBIG || code == EDQUOT ? " — free some space and run again" : ""
        return DownloadError(
            .fileSystem, message: "\(reason) while \(action) '\(path)'\(advice)", url: url, path: path,
            underlying: POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO))
    }
}

/// What sits at a path, without following a symbolic link there.
enum PathKind {
    case missing
    case regularFile(size: Int64)
    case other

    init(at path: String) {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            self = .missing
            return
        }
        self = info.st_mode & S_IFMT == S_IFREG ? .regularFile(size: Int64(info.st_size)) : .other
    }
}

extension FileStamp {
    /// The stamp of the regular file at `path` (a symbolic link is not followed), or `nil` if there is none.
    public init?(ofFileAt path: String) {
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        self.init(info)
    }

    init(_ info: stat) {
        #if canImport(Darwin)
        let modified = Int64(info.st_mtimespec.tv_sec) * 1_000_000_000 + Int64(info.st_mtimespec.tv_nsec)
        #else
        let modified = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
        #endif
        self.init(size: Int64(info.st_size), modifiedNanoseconds: modified, inode: UInt64(info.st_ino))
    }
}

#if canImport(Darwin)
private let posixWrite = Darwin.write
#elseif canImport(Glibc)
private let posixWrite = Glibc.write
#else
private let posixWrite = Musl.write
#endif

extension Journal {
    /// Discards what a stopped download kept to resume with: the partial file its record names (taken with its
    /// writer's lock, so that a file another writer holds is left alone) and the record, also that of a new copy of
    /// a completed file. A completed or failed record is not a partial, and stays.
    func discardPartial(of key: JournalKey) {
        for key in [key, key.newCopy] {
            guard let record = record(for: key) else { continue }
            switch record.state {
            case .partial:
                let path = PartialFile.partialPath(forDestination: record.path)
                guard let url = URL(string: key.url) ?? URL(string: "file:///"),
                    let file = try? PartialFile(resumingAt: path, url: url)
                else {
                    // Held by another writer: its record is its own now.
                    if FileManager.default.fileExists(atPath: path) { continue }
                    remove(key)
                    continue
                }
                file.remove()
                remove(key)
            case .requested:
                remove(key)
            case .completed, .failed:
                continue
            }
        }
    }
}
