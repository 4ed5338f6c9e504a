import ArgumentParser
import Haul

/// `-j/--max-concurrent`: how many connections run at once, for `haul get` and `haul worker`.
struct ConcurrencyOptions: ParsableArguments {
    // Unconditional, so that `-j -1` reaches validate() and is reported as a bad number, not a missing value.
    @Option(
        name: [.customShort("j"), .customLong("max-concurrent")], parsing: .unconditional,
        help: ArgumentHelp(
            "Connections at once: downloads, and the extra connections of split files (default 4; for haul get, "
                + "N of -s when larger, and 1 fetches one at a time in input order).", valueName: "N"))
    var maxConcurrent: Int?

    /// The most connections at once a run may ask for: each is a socket and a file descriptor.
    static let limit = 10_000

    func validate() throws {
        if let maxConcurrent, maxConcurrent < 1 {
            throw ValidationError("-j/--max-concurrent must be at least 1, not \(maxConcurrent)")
        }
        if let maxConcurrent, maxConcurrent > Self.limit {
            throw ValidationError("-j/--max-concurrent must be at most \(Self.limit), not \(maxConcurrent)")
        }
    }

    /// The connections at once: `-j`, else 4, or `split` when larger (one file split over N connections gets them
    /// without `-j` too).
    func connections(split: Int = 1) -> Int { maxConcurrent ?? max(4, split) }

    /// Sets how many downloads `configuration` runs at once, for files split into up to `split` segments.
    func apply(to configuration: inout DownloadQueue.Configuration, split: Int) {
        configuration.maxConcurrentDownloads = connections(split: split)
    }
}
