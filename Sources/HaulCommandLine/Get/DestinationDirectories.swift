import Foundation
import Haul
import HaulOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The destination directory and the `dir=` directories under it, walked by ``ContainedDirectories`` (no symbolic
/// link followed). Checked when the input is checked (nothing is made then), made when its first download is read to
/// run.
final class DestinationDirectories: Sendable {
    let base: String
    /// The walk under the destination, which remembers the directories it checked or made (a list names the same few
    /// again and again).
    private let walker: ContainedDirectories

    init(base: URL) {
        self.base = base.standardizedFileURL.path
        walker = ContainedDirectories(base: self.base)
    }

    /// Creates the destination directory.
    func createBase() throws(UsageFailure) {
        do {
            try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        } catch {
            throw UsageFailure([
                InputProblem(origin: "-d/--dir", message: "cannot create '\(base)': \(GetCommand.reason(error))")
            ])
        }
    }

    /// The directory `request` writes into.
    static func directory(of request: DownloadRequest) -> String {
        switch request.destination {
        case .file(let file): file.deletingLastPathComponent().standardizedFileURL.path
        case .directory(let directory, _): directory.standardizedFileURL.path
        }
    }

    /// What is wrong with the directory of `request` as things are (a missing directory is fine: it will be made).
    func check(_ request: DownloadRequest) -> InputProblem? {
        walk(Self.directory(of: request), making: false)
    }

    /// Makes the directory of `request` and the missing ones above it, under the destination.
    func make(_ request: DownloadRequest) -> InputProblem? {
        walk(Self.directory(of: request), making: true)
    }

    private func walk(_ directory: String, making: Bool) -> InputProblem? {
        guard directory != base else { return nil }
        let relative = directory.hasPrefix(base + "/") ? directory.dropFirst(base.count + 1) : ""
        guard let problem = walker.walk(relative.split(separator: "/"), making: making) else { return nil }
        let message =
            switch problem.finding {
            case .symbolicLink: "is a symbolic link; Haul does not follow links out of the destination directory"
            case .notDirectory: "exists and is not a directory"
            case .cannotCreate(let error): "cannot be created: \(String(cString: strerror(error)))"
            }
        return InputProblem(origin: "dir=\(relative)", message: "'\(problem.path)' \(message)")
    }
}
