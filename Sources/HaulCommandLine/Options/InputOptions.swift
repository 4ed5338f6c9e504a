import ArgumentParser

/// The URLs to fetch: arguments, and `-i FILE`, for `haul get` and `haul enqueue`.
struct InputOptions: ParsableArguments {
    @Argument(help: "URLs to download (http or https).")
    var urls: [String] = []

    @Option(
        name: [.customShort("i"), .customLong("input-file")],
        help: ArgumentHelp("Read URLs from FILE ('-' = stdin).", valueName: "FILE"))
    var inputFile: String?

    /// The URLs of the command line, then those of the input file; a file that cannot be read is a usage error
    /// followed by `summary`.
    func open(summary: String) throws(UsageFailure) -> InputSource {
        var source = InputSource(arguments: urls)
        guard let inputFile else { return source }
        do {
            source.file = (
                try InputSpool(path: inputFile == "-" ? nil : inputFile), inputFile == "-" ? "<stdin>" : inputFile
            )
        } catch {
            throw UsageFailure(
                [
                    InputProblem(
                        origin: "-i/--input-file", message: "cannot read '\(inputFile)': \(GetCommand.reason(error))")
                ], summary: summary)
        }
        return source
    }
}
