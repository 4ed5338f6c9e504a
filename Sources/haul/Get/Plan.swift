import Foundation
import Haul
import HTTPTypes
import HaulOperations

/// A download the command will run, with where it came from for messages.
struct PlannedDownload: Sendable {
    var request: DownloadRequest
    /// Where it came from.
    var source: InputOrigin
    /// Where it came from, for messages (`urls.txt:3`).
    var origin: String { source.description }
    /// The name shown in progress lines: the planned file name, else the URL's last component.
    var displayName: String
    /// The standardized path the file will be published at, when known before any response (see
    /// `DownloadRequest.plannedFileURL`): what two downloads must not share.
    var plannedPath: String? = nil
}

/// What applies to every URL of one `haul get`.
struct PlanSettings: Sendable {
    var directory: URL
    /// `-o`: only with exactly one URL.
    var fileName: String?
    /// `--checksum`: only with exactly one URL.
    var checksum: String?
    /// `--header`, in order (per-URL `header=` lines come after them, so they win).
    var headers: [String] = []
    var maxSize: Int64?
    var conflictPolicy: ConflictPolicy = .fail
    var useContentDisposition = false
}

/// Turns the user's URLs and options into requests, or reports every problem with them (nothing is
/// downloaded when anything is wrong: exit 2).
enum Planner {
    static func plan(_ entries: [InputEntry], settings: PlanSettings) -> Result<[PlannedDownload], UsageFailure> {
        var problems: [InputProblem] = []
        if entries.isEmpty {
            problems.append(InputProblem(origin: "haul get", message: "no URL given (pass URLs or --input-file FILE)"))
        }
        if settings.fileName != nil, entries.count > 1 {
            problems.append(
                InputProblem(
                    origin: "-o/--output",
                    message:
                        "names one file, but \(entries.count) URLs were given; use 'out=NAME' lines in an input file"))
        }
        if settings.checksum != nil, entries.count > 1 {
            problems.append(
                InputProblem(
                    origin: "--checksum",
                    message:
                        "is for a single URL, but \(entries.count) were given; use 'checksum=' lines in an input file"
                ))
        }
        var globalHeaders = HTTPFields()
        for header in settings.headers {
            switch parseHeader(header) {
            case .success(let field): globalHeaders.append(field)
            case .failure(let problem): problems.append(InputProblem(origin: "--header", message: problem.message))
            }
        }
        // Standardized once: every download without dir= shares it.
        let directoryPath = settings.directory.standardizedFileURL.path
        let headers = globalHeaders
        var planned: [PlannedDownload] = []
        let entryProblems = planEach(entries, into: &planned) { entry in
            plan(entry, settings: settings, headers: headers, directoryPath: directoryPath)
        }
        problems += entryProblems
        problems += duplicateDestinations(planned)
        return problems.isEmpty ? .success(planned) : .failure(UsageFailure(problems))
    }

    /// Plans every entry, in order, into `planned` (those that can be); returns the problems of those that cannot.
    /// A long list is done in two halves at once: each entry is planned on its own (a `URL` parsed, a name
    /// derived), and the second core is otherwise idle before the first request (10,000 entries took ~12 ms on
    /// one). Each download is written straight into its place and moved out from there: collecting results and
    /// then copying them (their requests and all) took another ~2 ms.
    private static func planEach(
        _ entries: [InputEntry], into planned: inout [PlannedDownload],
        _ body: @escaping @Sendable (InputEntry) -> Result<PlannedDownload, UsageFailure>
    ) -> [InputProblem] {
        let count = entries.count
        let slots = Slots<PlannedDownload>(count: count)
        defer { slots.deallocate() }
        let problems = Locked<[(index: Int, problems: [InputProblem])]>([])
        let work = { @Sendable (range: Range<Int>) in
            for index in range {
                switch body(entries[index]) {
                case .success(let download): slots.put(download, at: index)
                case .failure(let failure): problems.withLock { $0.append((index, failure.problems)) }
                }
            }
        }
        if count >= 2_048 {
            let middle = count / 2
            DispatchQueue.concurrentPerform(iterations: 2) { half in work(half == 0 ? 0..<middle : middle..<count) }
        } else {
            work(0..<count)
        }
        let found = problems.withLock { $0 }.sorted { $0.index < $1.index }
        planned = slots.take(skipping: found.map(\.index))
        return found.flatMap(\.problems)
    }

    private static func plan(
        _ entry: InputEntry, settings: PlanSettings, headers: HTTPFields, directoryPath: String
    ) -> Result<PlannedDownload, UsageFailure> {
        var problems: [String] = []
        let url = validateURL(entry.url, problems: &problems)
        var directory = settings.directory
        var directoryPath = directoryPath
        if let subdirectory = entry.subdirectory {
            let parts = subdirectory.split(separator: "/")
            if subdirectory.hasPrefix("/") || parts.contains("..") || parts.isEmpty {
                problems.append("dir='\(subdirectory)' must be a relative path inside the destination, without '..'")
            } else {
                directory = directory.appendingPathComponent(subdirectory, isDirectory: true)
                directoryPath = directory.standardizedFileURL.path
            }
        }
        let fileName = entry.fileName ?? settings.fileName
        if let fileName, let problem = problemWithFileName(fileName) { problems.append(problem) }
        var fields = headers
        for header in entry.headers {
            switch parseHeader(header) {
            case .success(let field): fields[field.name] = field.value
            case .failure(let problem): problems.append(problem.message)
            }
        }
        var digest: Digest?
        if let checksum = entry.checksum ?? settings.checksum {
            do { digest = try Digest(parsing: checksum) } catch { problems.append(error.message) }
        }
        guard let url, problems.isEmpty else {
            return .failure(UsageFailure(problems.map { InputProblem(origin: entry.origin, message: $0) }))
        }
        let destination: Destination =
            fileName.map { .file(directory.appendingPathComponent($0, isDirectory: false)) }
            ?? .directory(directory, useContentDisposition: settings.useContentDisposition)
        let request = DownloadRequest(
            url: url, destination: destination, headerFields: fields, expectedDigest: digest,
            maxSize: settings.maxSize, conflictPolicy: settings.conflictPolicy)
        // What `request.plannedFileURL` gives, by joining strings: building and standardizing a URL for every
        // download (three times) was most of planning a list of 10,000, before the first could start.
        let name: String?
        let plannedPath: String?
        switch destination {
        case .file(let file):
            name = file.lastPathComponent
            plannedPath = file.standardizedFileURL.path
        case .directory(_, useContentDisposition: true):
            name = nil
            plannedPath = nil
        case .directory(_, useContentDisposition: false):
            // A name from the URL is one safe path component (no '/', never '.' or '..'), so joined to a
            // standardized directory the path is standardized too.
            name = DownloadRequest.fileName(for: url)
            plannedPath = name.map { directoryPath.hasSuffix("/") ? directoryPath + $0 : directoryPath + "/" + $0 }
        }
        if plannedPath == nil, !settings.useContentDisposition {
            return .failure(
                UsageFailure([
                    InputProblem(
                        origin: entry.origin,
                        message: "no safe file name in '\(entry.url)'; give one with -o or an 'out=NAME' line")
                ]))
        }
        return .success(
            PlannedDownload(
                request: request, source: entry.source,
                displayName: name ?? DownloadRequest.fileName(for: url) ?? url.absoluteString, plannedPath: plannedPath)
        )
    }

    /// The URL, if it is an absolute http(s) URL with a host; otherwise a problem saying which part is wrong.
    static func validateURL(_ text: String, problems: inout [String]) -> URL? {
        guard let url = URL(string: text), let scheme = url.scheme else {
            problems.append("'\(text)' is not a valid URL (expected http://HOST/PATH or https://HOST/PATH)")
            return nil
        }
        // Compared without making lowercased copies, and the host checked as written (decoding it made a string
        // per URL): a list of 10,000 is validated before the first download.
        guard scheme.utf8.equalsIgnoringCase("http") || scheme.utf8.equalsIgnoringCase("https") else {
            problems.append("unsupported scheme '\(scheme.lowercased())' in '\(text)': only http and https")
            return nil
        }
        guard let host = url.host(percentEncoded: true), !host.isEmpty else {
            problems.append("'\(text)' is not a valid URL: it has no host")
            return nil
        }
        return url
    }

    private static func problemWithFileName(_ name: String) -> String? {
        if name.isEmpty || name == "." || name == ".." || name.contains("/") || name.contains("\0") {
            return "'\(name)' is not a file name (no '/', not '.' or '..'); use dir= or -d for directories"
        }
        if name == ".haul" { return "'.haul' is where Haul keeps its records; choose another name" }
        return nil
    }

    static func parseHeader(_ text: String) -> Result<HTTPField, HeaderProblem> {
        guard let colon = text.firstIndex(of: ":") else {
            return .failure(HeaderProblem("header '\(text)' is not 'Name: value'"))
        }
        let name = text[..<colon].trimmingSpaces()
        let value = text[text.index(after: colon)...].trimmingSpaces()
        guard let fieldName = HTTPField.Name(name) else {
            return .failure(HeaderProblem("header name '\(name)' is not a valid HTTP field name"))
        }
        // By scalar: "\r\n" is one Character, equal to neither "\r" nor "\n".
        guard !value.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) else {
            return .failure(HeaderProblem("header '\(name)' has a line break or NUL in its value"))
        }
        return .success(HTTPField(name: fieldName, value: value))
    }

    /// Two downloads that would write one file: each pair is named.
    private static func duplicateDestinations(_ planned: [PlannedDownload]) -> [InputProblem] {
        // Indices, room made up front: growing a dictionary of whole downloads one by one showed in the start-up
        // of a list of 10,000.
        var firstByPath: [PathKey: Int] = [:]
        firstByPath.reserveCapacity(planned.count)
        var problems: [InputProblem] = []
        // By index: a loop over the elements copied every download (its request and all) to read one path.
        for index in planned.indices {
            guard let path = planned[index].plannedPath else { continue }
            if let first = firstByPath[PathKey(path)].map({ planned[$0] }) {
                let download = planned[index]
                problems.append(
                    InputProblem(
                        origin: download.origin,
                        message:
                            "'\(download.request.url.absoluteString)' and '\(first.request.url.absoluteString)' (\(first.origin)) would both write '\(path)'; give one of them another name (out=NAME)"
                    ))
            } else {
                firstByPath[PathKey(path)] = index
            }
        }
        return problems
    }
}

/// A path compared the way the destination's file system compares names: by bytes on Linux, where `café` in
/// NFC and in NFD are two files (a Swift `String` compares them equal), and as Swift strings on Apple systems,
/// whose file systems treat the two forms as one name.
struct PathKey: Hashable {
    #if canImport(Darwin)
    private let path: String
    init(_ path: String) { self.path = path }
    #else
    private let bytes: [UInt8]
    init(_ path: String) { bytes = Array(path.utf8) }
    #endif
}

/// `12345`, `64K`, `1.5M`, `2G` (powers of 1024), for `--max-size`.
func parseByteCount(_ text: String) -> Int64? {
    let multipliers: [Character: Double] = [
        "K": 1024, "M": 1024 * 1024, "G": 1024 * 1024 * 1024, "T": 1024 * 1024 * 1024 * 1024,
    ]
    var digits = Substring(text[...].trimmingSpaces())
    var multiplier: Double = 1
    if let last = digits.last?.uppercased().first, let factor = multipliers[last] {
        multiplier = factor
        digits = digits.dropLast()
    }
    guard let number = Double(digits), number.isFinite, number >= 0 else { return nil }
    let value = (number * multiplier).rounded()
    guard value <= Double(Int64.max / 2) else { return nil }
    return Int64(value)
}

/// What is wrong with a `K: V` header.
struct HeaderProblem: Error {
    var message: String
    init(_ message: String) { self.message = message }
}

/// Room for `count` values written from several threads, each index once, then moved out in order: no copy of a
/// value, and no retain or release of what it holds.
private final class Slots<Value>: @unchecked Sendable {
    private let base: UnsafeMutablePointer<Value>
    private let count: Int

    init(count: Int) {
        self.count = count
        base = .allocate(capacity: max(count, 1))
    }

    /// Index `index` must not have been written before; no two threads write one index.
    func put(_ value: consuming Value, at index: Int) {
        (base + index).initialize(to: value)
    }

    /// Every value, in order, except at `skipped` (indices never written, ascending); leaves none behind.
    func take(skipping skipped: [Int]) -> [Value] {
        [Value](unsafeUninitializedCapacity: count - skipped.count) { buffer, initialized in
            var start = 0
            for end in skipped + [count] {
                _ = buffer[initialized..<initialized + end - start].moveInitialize(
                    fromContentsOf: UnsafeMutableBufferPointer(start: base + start, count: end - start))
                initialized += end - start
                start = end + 1
            }
        }
    }

    func deallocate() { base.deallocate() }
}
