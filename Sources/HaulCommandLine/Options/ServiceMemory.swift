#if canImport(Glibc)
import Glibc
#endif

/// How `haul daemon` and `haul worker` keep their memory to what they use, on glibc.
///
/// glibc gives each thread that meets a busy allocator an arena of its own, up to eight per core, and returns an
/// arena's free pages to the system only from its top. A service whose threads take turns with short-lived
/// allocations (a multicall's thousand answers, a batch of ended downloads) ends up holding each arena's high-water
/// mark, several times what it uses after a long run of small downloads. So a service process limits
/// the arenas to one per core, and hands free pages back once a second while it runs (`malloc_trim`, which
/// also releases whole free pages inside each arena; an idle daemon's heap takes it a fraction of a millisecond).
/// Both functions are glibc's own (`<malloc.h>`, which Swift's Glibc module leaves out), so they are looked up by
/// name; where they do not exist (musl's static builds, Darwin, whose allocator returns memory itself) nothing is done.
enum ServiceMemory {
    /// Limits the allocator's arenas to one per core, and says whether the allocator took the limit. Call before the
    /// process starts its threads: a thread that has an arena keeps it.
    @discardableResult
    static func limitArenas() -> Bool {
        #if canImport(Glibc)
        let arenaMax: Int32 = -8  // M_ARENA_MAX in <malloc.h>
        return Self.mallopt?(arenaMax, Int32(clamping: max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN))))) == 1
        #else
        return false
        #endif
    }

    /// Returns the allocator's free pages to the system.
    static func returnFreePages() {
        _ = Self.mallocTrim?(0)
    }

    private static let mallopt = function("mallopt", as: (@convention(c) (Int32, Int32) -> Int32).self)
    private static let mallocTrim = function("malloc_trim", as: (@convention(c) (Int) -> Int32).self)

    private static func function<F>(_ name: String, as type: F.Type) -> F? {
        #if canImport(Glibc)
        guard let process = dlopen(nil, RTLD_NOW), let symbol = dlsym(process, name) else { return nil }
        return unsafeBitCast(symbol, to: type)
        #else
        return nil
        #endif
    }

    /// How often a running service returns free pages.
    static let interval: Duration = .seconds(1)
}

extension CommandService {
    /// Returns the allocator's free pages every ``ServiceMemory/interval`` until the group shuts down.
    static var returningFreePages: CommandService {
        .cancelled {
            while (try? await Task.sleep(for: ServiceMemory.interval)) != nil {
                ServiceMemory.returnFreePages()
            }
        }
    }
}
