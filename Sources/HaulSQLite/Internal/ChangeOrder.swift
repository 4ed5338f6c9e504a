import Atomics
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The order of the changes made to one database by every journal open on it, in any process: a counter in a file
/// beside the database (`NAME-order`), mapped shared, from which each change takes a number (its ticket) as it is
/// written. A change is applied to a record only over a change with a lower ticket (``WriteStatements``), so the
/// change written last wins, whenever each is committed: a killed journal's change committed by the next one to open,
/// or a batch a journal commits after another journal committed a later change to the same record. No clock takes
/// part.
///
/// The file belongs to the database as its `-wal` and `-shm` files do. A journal that opens lifts the counter to the
/// highest ticket the database and the pending logs hold (``lift(to:)``), so a database moved without its order file,
/// or one whose file was deleted between runs, goes on above every ticket it holds.
final class ChangeOrder: @unchecked Sendable {  // the counter is only touched atomically
    let path: String
    private let descriptor: Int32
    private let mapping: UnsafeMutableRawPointer
    private var counter: UnsafeAtomic<UInt64> {
        UnsafeAtomic(at: mapping.assumingMemoryBound(to: UInt64.AtomicRepresentation.self))
    }

    /// The order file of the database at `databasePath`, created (owner-only, the counter at 0) if missing.
    ///
    /// - Throws: ``JournalOpenError`` naming the file when it cannot be opened and mapped, or is not a regular file
    ///   of this user's (a link, a FIFO, another user's file is left alone).
    init(databasePath: String) throws(JournalOpenError) {
        let path = databasePath + "-order"
        self.path = path
        func failure(_ what: String, systemSays: Bool = true) -> JournalOpenError {
            let reason = systemSays ? ": " + String(cString: strerror(errno)) : ""
            return JournalOpenError(reason: .notWritable, path: databasePath, detail: "'\(path)' \(what)\(reason)")
        }
        // Never through a link, and without waiting for a writer of a FIFO named like it.
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0o600)
        guard descriptor >= 0 else { throw failure("cannot be opened") }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            defer { close(descriptor) }
            throw failure("cannot be read")
        }
        // One name of the file only: a link planted beside the database would have another file of the user's counted
        // in.
        if let problem = Self.problem(with: info) ?? (info.st_nlink > 1 ? "has other links to it" : nil) {
            close(descriptor)
            throw failure(problem, systemSays: false)
        }
        // Two journals creating it at once both extend it to one word of zeros; one already counting is that long.
        guard info.st_size >= 8 || ftruncate(descriptor, 8) == 0,
            let mapped = mmap(nil, 8, PROT_READ | PROT_WRITE, MAP_SHARED, descriptor, 0), mapped != MAP_FAILED
        else {
            defer { close(descriptor) }
            throw failure("cannot be mapped")
        }
        self.descriptor = descriptor
        mapping = mapped
    }

    deinit {
        munmap(mapping, 8)
        close(descriptor)
    }

    /// Takes `count` tickets (at least 1); returns the first, the others follow it.
    func take(_ count: Int) -> Int64 {
        let last = counter.wrappingIncrementThenLoad(by: UInt64(max(count, 1)), ordering: .relaxed)
        return Int64(bitPattern: last) - Int64(max(count, 1)) + 1
    }

    /// The highest ticket taken so far.
    var current: Int64 { Int64(bitPattern: counter.load(ordering: .relaxed)) }

    /// Tickets are below this: 2^62 changes would take a journal ages, so a ticket or floor at or above it is damage
    /// (a payload read back, a database changed by hand), and counting from it would soon wrap.
    static let limit: Int64 = 1 << 62

    /// Sets a counter at or above ``limit`` (damaged, or planted) back to 0, for the journal opening to lift; returns
    /// whether it was.
    func resetIfDamaged() -> Bool {
        let seen = counter.load(ordering: .relaxed)
        guard Int64(bitPattern: seen) >= Self.limit || Int64(bitPattern: seen) < 0 else { return false }
        return counter.compareExchange(expected: seen, desired: 0, ordering: .relaxed).exchanged
    }

    /// Raises the counter to `floor` if it is below (a ticket already given out is never given again); a floor at or
    /// above ``limit`` is ignored.
    func lift(to floor: Int64) {
        guard floor < Self.limit else { return }
        var seen = counter.load(ordering: .relaxed)
        while Int64(bitPattern: seen) < floor {
            let (exchanged, original) = counter.weakCompareExchange(
                expected: seen, desired: UInt64(floor), ordering: .relaxed)
            if exchanged { return }
            seen = original
        }
    }

    /// Why the file named like the order file is not one to count in: it is a regular file of this user's.
    private static func problem(with info: stat) -> String? {
        if info.st_mode & S_IFMT != S_IFREG { return "is not a regular file" }
        if info.st_uid != geteuid() { return "belongs to another user (uid \(info.st_uid))" }
        return nil
    }
}
