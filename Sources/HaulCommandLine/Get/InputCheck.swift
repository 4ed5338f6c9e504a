import Foundation
import Haul

/// The first reading of the input: every entry planned and checked, before anything is downloaded, keeping nothing
/// of each but its destination's hash (``DuplicateFinder``). Every problem is written to standard error as it is
/// found, so a list of any length is reported whole in the same memory.
enum InputCheck {
    /// What the run needs to know of a good input.
    struct Summary {
        /// Downloads planned.
        var count = 0
        /// Whether any URL (a mirror included) is `https`.
        var usesHTTPS = false
    }

    /// Checks every entry of `source`: its plan, its `dir=` directory (when `directories` is given), and what
    /// `check` says of the planned download (a problem, or `nil`).
    /// - Throws: `UsageFailure` after reporting the problems found (its own list is empty: they were written).
    static func run(
        _ source: InputSource, planner: Planner, directories: DestinationDirectories?,
        check: (PlannedDownload) -> String? = { _ in nil }
    ) throws(UsageFailure) -> Summary {
        var problemCount = 0
        func report(_ problem: InputProblem) {
            problemCount += 1
            Console.err("haul: \(problem)\n")
        }
        planner.optionProblems.forEach(report)
        var summary = Summary()
        let finder = DuplicateFinder()
        var reader = source.makeReader()
        do {
            while let item = try reader.next() {
                switch item {
                case .problem(let problem):
                    report(problem)
                case .entry(let entry):
                    let ordinal = summary.count
                    summary.count += 1
                    switch planner.plan(entry) {
                    case .failure(let failure):
                        failure.problems.forEach(report)
                    case .success(let planned):
                        if let path = planned.plannedPath { try finder.add(path, ordinal: ordinal) }
                        if !summary.usesHTTPS {
                            summary.usesHTTPS = ([planned.request.url] + planned.request.mirrors).contains {
                                $0.scheme?.lowercased() == "https"
                            }
                        }
                        if entry.subdirectory != nil, let problem = directories?.check(planned.request) {
                            report(problem)
                        }
                        if let problem = check(planned) {
                            report(InputProblem(origin: planned.origin, message: problem))
                        }
                    }
                }
            }
            planner.problems(forCount: summary.count).forEach(report)
            let groups = try finder.candidates()
            if !groups.isEmpty { try duplicates(in: groups, of: source, planner: planner).forEach(report) }
        } catch let failure as UsageFailure {
            throw failure
        } catch {
            throw UsageFailure([
                InputProblem(origin: "-i/--input-file", message: "cannot check it: \(GetCommand.reason(error))")
            ])
        }
        guard problemCount == 0 else { throw UsageFailure([]) }
        return summary
    }

    /// Plans the entries whose destinations hash alike again and names every pair that would write one file.
    private static func duplicates(
        in groups: [[Int]], of source: InputSource, planner: Planner
    ) throws(UsageFailure) -> [InputProblem] {
        let wanted = Set(groups.joined())
        var planned: [Int: PlannedDownload] = [:]
        var reader = source.makeReader()
        var ordinal = 0
        while let item = try reader.next() {
            guard case .entry(let entry) = item else { continue }
            defer { ordinal += 1 }
            if wanted.contains(ordinal), case .success(let download) = planner.plan(entry) {
                planned[ordinal] = download
            }
        }
        var problems: [(ordinal: Int, problem: InputProblem)] = []
        for group in groups {
            var firstByPath: [PathKey: PlannedDownload] = [:]
            for ordinal in group {
                guard let download = planned[ordinal], let path = download.plannedPath else { continue }
                guard let first = firstByPath[PathKey(path)] else {
                    firstByPath[PathKey(path)] = download
                    continue
                }
                let message =
                    "'\(download.request.url.redactedString)' and '\(first.request.url.redactedString)' "
                    + "(\(first.origin)) would both write '\(path)'; give one of them another name (out=NAME)"
                problems.append((ordinal, InputProblem(origin: download.origin, message: message)))
            }
        }
        return problems.sorted { $0.ordinal < $1.ordinal }.map(\.problem)
    }
}
