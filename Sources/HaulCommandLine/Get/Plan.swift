import Foundation
import Haul
import HTTPTypes

/// A download the command will run, with where it came from for messages.
struct PlannedDownload: Sendable {
    var request: DownloadRequest
    /// Where it came from.
    var source: InputOrigin
    /// Where it came from, for messages (`urls.txt:3`).
    var origin: String { source.description }
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
    /// `-c/--continue`.
    var continuesExistingFiles = false
    /// `-s/--split`, for the lines without `split=`.
    var split = 1
    /// `--min-split-size`.
    var minimumSegmentSize = DownloadRequest.defaultMinimumSegmentSize
    /// `--speed-limit` and `--speed-time`, for the lines that set only the other one.
    var speedLimit: Int64?
    var speedTime: Double?
}

/// Turns the user's URLs and options into requests, one entry at a time, or reports every problem with them
/// (nothing is downloaded when anything is wrong: exit 2).
struct Planner: Sendable {
    let settings: PlanSettings
    /// `--header`, parsed.
    private let headers: HTTPFields
    /// `--checksum`, parsed.
    private let checksum: Digest?
    /// What is wrong with `--header` and `--checksum` values, each named by its option.
    let optionProblems: [InputProblem]
    /// Every download without dir= shares the directory; standardizing its URL is the dearest step of planning one
    /// (bench/compare, s3: planning runs before the first request).
    private let directoryPath: String

    init(settings: PlanSettings) {
        self.settings = settings
        var headers = HTTPFields()
        var problems: [InputProblem] = []
        for header in settings.headers {
            switch Self.parseHeader(header) {
            case .success(let field): headers.append(field)
            case .failure(let problem): problems.append(InputProblem(origin: "--header", message: problem.message))
            }
        }
        self.headers = headers
        var checksum: Digest?
        if let given = settings.checksum {
            do {
                checksum = try Digest(parsing: given)
            } catch {
                problems.append(InputProblem(origin: "--checksum", message: error.message))
            }
        }
        self.checksum = checksum
        optionProblems = problems
        directoryPath = settings.directory.standardizedFileURL.path
    }

    /// What is wrong with the number of URLs given (`count`).
    func problems(forCount count: Int) -> [InputProblem] {
        var problems: [InputProblem] = []
        if count == 0 {
            problems.append(InputProblem(origin: "haul get", message: "no URL given (pass URLs or --input-file FILE)"))
        }
        if settings.fileName != nil, count > 1 {
            problems.append(
                InputProblem(
                    origin: "-o/--output",
                    message: "names one file, but \(count) URLs were given; use 'out=NAME' lines in an input file"))
        }
        if settings.checksum != nil, count > 1 {
            problems.append(
                InputProblem(
                    origin: "--checksum",
                    message: "is for a single URL, but \(count) were given; use 'checksum=' lines in an input file"))
        }
        return problems
    }

    /// The download `entry` asks for, or every problem with it.
    func plan(_ entry: InputEntry) -> Result<PlannedDownload, UsageFailure> {
        Self.plan(entry, settings: settings, headers: headers, checksum: checksum, directoryPath: directoryPath)
    }

    private static func plan(
        _ entry: InputEntry, settings: PlanSettings, headers: HTTPFields, checksum: Digest?, directoryPath: String
    ) -> Result<PlannedDownload, UsageFailure> {
        var problems: [String] = []
        let url = validateURL(entry.url, problems: &problems)
        let mirrors = entry.mirrors.compactMap { validateURL($0, problems: &problems) }
        for mirror in mirrors where mirror.user != nil {
            // A mirror's own user and password would have to be kept apart from the first URL's; a netrc file
            // names credentials by host already.
            problems.append(
                "mirror '\(mirror.redactedString)' carries a user and password: give them in a netrc file (--netrc-file)"
            )
        }
        var split = settings.split
        if let text = entry.split {
            if let value = Int(text), (1...64).contains(value) {
                split = value
            } else {
                problems.append("split='\(text)' is not a number of connections from 1 to 64")
            }
        }
        var directory = settings.directory
        var directoryPath = directoryPath
        if let subdirectory = entry.subdirectory {
            let parts = subdirectory.split(separator: "/")
            if subdirectory.unicodeScalars.contains(where: FileNaming.isUnprintable) {
                problems.append(
                    "dir='\(Format.printable(subdirectory))' holds control, bidirectional or invisible characters")
            } else if subdirectory.hasPrefix("/") || parts.contains("..") || parts.isEmpty {
                problems.append("dir='\(subdirectory)' must be a relative path inside the destination, without '..'")
            } else if parts.contains(".haul") {
                // Any directory's own `.haul`: the run that downloads into it keeps its records there.
                problems.append("dir='\(subdirectory)': '.haul' is where Haul keeps its records; choose another name")
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
        var digest = checksum
        if let given = entry.checksum {
            do { digest = try Digest(parsing: given) } catch { problems.append(error.message) }
        }
        let limits = entryLimits(entry, settings: settings, problems: &problems)
        guard let url, problems.isEmpty else {
            return .failure(UsageFailure(problems.map { InputProblem(origin: entry.origin, message: $0) }))
        }
        let destination: Destination =
            fileName.map { .file(directory.appendingPathComponent($0, isDirectory: false)) }
            ?? .directory(directory, useContentDisposition: settings.useContentDisposition)
        var request = DownloadRequest(
            url: url, destination: destination, headerFields: fields, expectedDigest: digest,
            maxSize: settings.maxSize, conflictPolicy: settings.conflictPolicy)
        // Only what differs from a new request's defaults is set: each setter copies and compares all of the
        // request's rarely set fields, and setting all seven takes a quarter of planning a plain entry
        // (bench/lists/check.sh).
        if settings.continuesExistingFiles { request.continuesExistingFile = true }
        if let rate = limits.rate { request.maxBytesPerSecond = rate }
        if let time = limits.time { request.timeLimit = time }
        if let speed = limits.speed { request.minimumSpeed = speed }
        if !mirrors.isEmpty { request.mirrors = mirrors }
        if split != request.maxConnections { request.maxConnections = split }
        if settings.minimumSegmentSize != request.minimumSegmentSize {
            request.minimumSegmentSize = settings.minimumSegmentSize
        }
        // The name `request.plannedFileURL` ends in: one path component, never '.' or '..' (FileNaming makes a URL's
        // safe, and `problemWithFileName` refused any other), so joined to a standardized directory the path is
        // standardized too.
        let name = fileName ?? (settings.useContentDisposition ? nil : DownloadRequest.fileName(for: url))
        let plannedPath = name.map { FileNaming.path($0, in: directoryPath) }
        if plannedPath == nil, !settings.useContentDisposition {
            return .failure(
                UsageFailure([
                    InputProblem(
                        origin: entry.origin,
                        message:
                            "no safe file name in '\(URLText.redacted(entry.url))'; give one with -o or an 'out=NAME' line"
                    )
                ]))
        }
        return .success(
            PlannedDownload(request: request, source: entry.source, plannedPath: plannedPath)
        )
    }

    /// An entry's own `limit-rate=`, `max-time=`, `speed-limit=` and `speed-time=`, checked.
    private static func entryLimits(
        _ entry: InputEntry, settings: PlanSettings, problems: inout [String]
    ) -> (rate: Int64?, time: Duration?, speed: MinimumSpeed?) {
        var rate: Int64?
        if let text = entry.limitRate {
            rate = PolitenessOptions.byteRate(text)
            if rate == nil { problems.append("limit-rate='\(text)' is not a rate in bytes per second (e.g. 500K, 2M)") }
        }
        func seconds(_ name: String, _ text: String?) -> Double? {
            guard let text else { return nil }
            guard let value = Double(text), PolitenessOptions.isTimeLimit(value) else {
                problems.append("\(name)='\(text)' is not a number of seconds above 0")
                return nil
            }
            return value
        }
        let time = seconds("max-time", entry.maxTime).map(PolitenessOptions.duration(seconds:))
        let speedTime = seconds("speed-time", entry.speedTime)
        var speed: MinimumSpeed?
        if entry.speedLimit != nil || speedTime != nil {
            var bytes = settings.speedLimit
            if let text = entry.speedLimit {
                bytes = PolitenessOptions.byteRate(text)
                if bytes == nil { problems.append("speed-limit='\(text)' is not a number of bytes per second") }
            }
            speed = PolitenessOptions.minimumSpeed(bytesPerSecond: bytes, seconds: speedTime ?? settings.speedTime)
        }
        return (rate, time, speed)
    }

    /// The URL, if it is an absolute http(s) URL with a host; otherwise a problem saying which part is wrong.
    static func validateURL(_ given: String, problems: inout [String]) -> URL? {
        // Problems show the URL without its password; a valid URL is not redacted at all.
        guard let url = URL(string: given), let scheme = url.scheme else {
            problems.append(
                "'\(URLText.redacted(given))' is not a valid URL (expected http://HOST/PATH or https://HOST/PATH)")
            return nil
        }
        guard scheme.utf8.equalsIgnoringCase("http") || scheme.utf8.equalsIgnoringCase("https") else {
            problems.append(
                "unsupported scheme '\(scheme.lowercased())' in '\(URLText.redacted(given))': only http and https")
            return nil
        }
        guard let host = url.host(percentEncoded: true), !host.isEmpty else {
            problems.append("'\(URLText.redacted(given))' is not a valid URL: it has no host")
            return nil
        }
        return url
    }

    private static func problemWithFileName(_ name: String) -> String? {
        if name.isEmpty || name == "." || name == ".." || name.contains("/") || name.contains("\0") {
            return "'\(name)' is not a file name (no '/', not '.' or '..'); use dir= or -d for directories"
        }
        if name == ".haul" { return "'.haul' is where Haul keeps its records; choose another name" }
        if name.unicodeScalars.contains(where: FileNaming.isUnprintable) {
            // An `out=` line of someone else's list: `‮fdp.exe` would show as `exe.pdf` in every listing.
            return "'\(Format.printable(name))' is not a file name: it holds control, bidirectional or invisible "
                + "characters"
        }
        return nil
    }

    static func parseHeader(_ text: String) -> Result<HTTPField, HeaderProblem> {
        guard let colon = text.firstIndex(of: ":") else {
            return .failure(HeaderProblem("header '\(DownloadRequest.redactedHeaderLine(text))' is not 'Name: value'"))
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
