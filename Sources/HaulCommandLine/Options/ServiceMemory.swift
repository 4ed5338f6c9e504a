import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// How `haul daemon` and `haul worker` keep their memory to what they use, on glibc.
///
/// glibc gives each thread that allocates an arena of its own, up to eight per core, and an arena keeps the free
/// space its thread's short-lived allocations leave (a multicall's thousand answers, a batch of ended downloads). A
/// service whose threads take turns with such work holds every arena's high-water mark at once. So a service process
/// limits the arenas to one per core: its threads share them, and the memory one batch freed serves the next.
/// `mallopt` is glibc's own (`<malloc.h>`, which Swift's Glibc module leaves out), so it is looked up by name; where
/// it does not exist (musl's static builds, Darwin) nothing is done.
enum ServiceMemory {
    /// Limits the allocator's arenas to one per core, unless the environment sets a limit of its own
    /// (`MALLOC_ARENA_MAX`, or `glibc.malloc.arena_max` in `GLIBC_TUNABLES`). Call before the process starts its
    /// threads (``HaulCommand/prepareProcess(arguments:)`` does): until a limit is set glibc gives every thread that
    /// allocates a new arena, and a thread that has an arena keeps it.
    static func limitArenas(environment: [String: String] = ProcessInfo.processInfo.environment) {
        #if canImport(Glibc)
        if environment["MALLOC_ARENA_MAX"] != nil
            || environment["GLIBC_TUNABLES"]?.contains("glibc.malloc.arena_max") == true
        {
            return
        }
        guard let process = dlopen(nil, RTLD_NOW), let symbol = dlsym(process, "mallopt") else { return }
        let mallopt = unsafeBitCast(symbol, to: (@convention(c) (Int32, Int32) -> Int32).self)
        let arenaMax: Int32 = -8  // M_ARENA_MAX in <malloc.h>
        _ = mallopt(arenaMax, Int32(clamping: max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))))
        #endif
    }
}
