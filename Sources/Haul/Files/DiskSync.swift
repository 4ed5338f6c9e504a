#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Syncing a file to the disk itself, for ``Downloader/Durability/powerLoss`` and the files whose loss would cost
/// more than a download (a cookie file, the journal's log).
package enum DiskSync {
    /// Writes the file's data and metadata through to the storage device, as `fsync(2)` does on Linux. On Darwin
    /// `fsync` only hands them to the drive, which may keep them in its cache across a power loss (fsync(2): "the
    /// disk drive may not write the data to its platters for some time"); `fcntl(2)`'s `F_FULLFSYNC` asks the drive
    /// to flush them, and `fsync` is the fallback where a file system refuses it (some network file systems).
    /// Returns 0, or -1 with `errno` set.
    package static func toDisk(_ descriptor: Int32) -> Int32 {
        #if canImport(Darwin)
        if fcntl(descriptor, F_FULLFSYNC) == 0 { return 0 }
        #endif
        return fsync(descriptor)
    }
}
