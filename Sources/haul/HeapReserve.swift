#if canImport(Glibc)
import Glibc
#endif

/// How much room glibc's malloc gives a thread's heap when it makes one.
///
/// glibc grows a thread's heap (every thread but the main one has its own arena) by exactly what an allocation
/// needs, with one `mprotect` per page, each taking the process's memory-map lock for writing while the other
/// threads fault pages in under it. Adding a batch of 10,000 downloads made ~1,500 of them, ~3,400 in a run.
/// A heap is made with `M_TOP_PAD` bytes of room beyond the allocation that made it, so with 32 MiB (a heap can
/// have 64 MiB) a run makes ~50 in all. Only address space is reserved: a page is backed once it is written,
/// so the resident size is the same (peak ~59 MiB either way for 10,000 files).
enum HeapReserve {
    static let padding: Int32 = 32 << 20

    /// Sets the padding for heaps made from now on; call before the threads that allocate most are started.
    static func enlarge() {
        #if canImport(Glibc)
        // `mallopt` is declared in <malloc.h>, which the Glibc module does not include. A nil handle is glibc's
        // RTLD_DEFAULT (the macro is a cast, which Swift does not import).
        guard let symbol = dlsym(nil, "mallopt") else { return }
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        let M_TOP_PAD: Int32 = -2
        _ = unsafeBitCast(symbol, to: Mallopt.self)(M_TOP_PAD, padding)
        #endif
    }
}
