import ArgumentParser

/// `--max-size`: the largest body a download accepts, for `haul get` and `haul enqueue`.
struct MaxSizeOptions: ParsableArguments {
    @Option(
        name: .customLong("max-size"),
        help: ArgumentHelp("Refuse larger bodies (K, M, G suffixes: powers of 1024).", valueName: "BYTES"))
    var maxSize: String?

    func validate() throws {
        if let maxSize, parseByteCount(maxSize) == nil {
            throw ValidationError("--max-size '\(maxSize)' is not a size (e.g. 500000, 64K, 10M, 2G)")
        }
    }

    /// Sets the largest body every entry's plan accepts.
    func apply(to settings: inout PlanSettings) {
        settings.maxSize = maxSize.flatMap(parseByteCount)
    }
}
