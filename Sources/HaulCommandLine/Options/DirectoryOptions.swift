import ArgumentParser
import Foundation

/// `-d/--dir`: where the files go, for `haul get` and `haul worker`.
struct DirectoryOptions: ParsableArguments {
    @Option(
        name: [.customShort("d"), .customLong("dir")],
        help: ArgumentHelp("Directory the files are written under (created if missing).", valueName: "DIR"))
    var directory: String = "."

    /// The directory, absolute and standardized.
    var url: URL { URL(fileURLWithPath: directory, isDirectory: true).standardizedFileURL }
}
