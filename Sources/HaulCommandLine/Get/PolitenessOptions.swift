import ArgumentParser
import Foundation
import Haul

/// `haul get`'s options for reruns that notice change, servers that ask for restraint, and time limits: wget's `-N`,
/// `-c`, `--wait`, `--random-wait`, `--limit-rate`, curl's `--rate`, `--max-time`, `--speed-limit`, `--speed-time`.
struct PolitenessOptions: ParsableArguments {
    @Flag(
        name: [.customShort("N"), .customLong("check-remote")],
        help: ArgumentHelp(
            "Revalidate each file an earlier run completed with a conditional request (If-None-Match with its "
                + "ETag, else If-Modified-Since): 304 keeps it, a new copy replaces it. Without it a rerun trusts "
                + "the files it wrote."))
    var checkRemote = false

    @Flag(
        inversion: .prefixedNo, exclusivity: .chooseLast,
        help: "Give each file the server's Last-Modified time (default: on, as wget does).")
    var remoteTime = true

    @Flag(
        name: .customLong("no-keep-partial"),
        help: ArgumentHelp(
            "Delete the partial file of a download that fails for good (default: keep it, hidden and owner-only, "
                + "so a rerun resumes it)."))
    var noKeepPartial = false

    @Flag(
        name: [.customShort("c"), .customLong("continue")],
        help: ArgumentHelp(
            "Continue a file another tool left half done at the destination: ask for the rest with Range from its "
                + "size.",
            discussion:
                "Nothing can prove those bytes are the start of the server's file: use it only for partial copies of "
                + "the same URL. A server without range support leaves the file to --on-conflict."))
    var continueExisting = false

    @Option(
        name: .customLong("limit-rate"),
        help: ArgumentHelp(
            "At most this many bytes per second for the whole run, all downloads together (K, M, G suffixes: "
                + "powers of 1024); 'limit-rate=' lines limit one URL.",
            valueName: "RATE"))
    var limitRate: String?

    @Option(
        name: .customLong("rate"),
        help: ArgumentHelp(
            "At most N request starts per second, minute or hour for the run (N/s, N/m, N/h), evenly spaced.",
            valueName: "N/UNIT"))
    var rate: String?

    @Option(
        name: .customLong("per-host-rate"),
        help: ArgumentHelp(
            "At most N request starts per unit of time to one host (N/s, N/m, N/h).", valueName: "N/UNIT"))
    var perHostRate: String?

    @Option(
        name: .customLong("wait"),
        help: ArgumentHelp("Seconds between the starts of two requests to one host.", valueName: "S"))
    var wait: Double?

    @Flag(
        name: .customLong("random-wait"),
        help: "Vary each --wait between 0.5 and 1.5 times its length, as wget does.")
    var randomWait = false

    @Option(
        name: [.customShort("m"), .customLong("max-time")],
        help: ArgumentHelp(
            "Seconds one download may take in all, retries and waits included; then it fails (its partial is "
                + "kept). 'max-time=' lines set it per URL.",
            valueName: "S"))
    var maxTime: Double?

    @Option(
        name: [.customShort("Y"), .customLong("speed-limit")],
        help: ArgumentHelp(
            "A transfer slower than this many bytes per second for --speed-time seconds (default 30) is a "
                + "transient failure: retried, and resumed. 'speed-limit=' lines set it per URL.",
            valueName: "BYTES"))
    var speedLimit: String?

    @Option(
        name: [.customShort("y"), .customLong("speed-time")],
        help: ArgumentHelp(
            "How long a transfer may stay under --speed-limit (default 1 byte per second when only this is "
                + "given).",
            valueName: "S"))
    var speedTime: Double?

    func validate(journalEnabled: Bool) throws {
        if checkRemote && !journalEnabled {
            throw ValidationError("-N/--check-remote revalidates the files the journal records: it needs the journal")
        }
        if let limitRate, Self.byteRate(limitRate) == nil {
            throw ValidationError("--limit-rate '\(limitRate)' is not a rate in bytes per second (e.g. 500K, 2M)")
        }
        for (name, value) in [("--rate", rate), ("--per-host-rate", perHostRate)] {
            if let value, RequestRate(parsing: value) == nil {
                throw ValidationError("\(name) '\(value)' is not a rate like 10/s, 30/m or 100/h")
            }
        }
        if let wait, !(wait >= 0 && wait <= 86_400) {
            throw ValidationError("--wait must be a number of seconds from 0 to 86400, not \(wait)")
        }
        if randomWait && (wait ?? 0) == 0 { throw ValidationError("--random-wait needs --wait") }
        for (name, value) in [("-m/--max-time", maxTime), ("-y/--speed-time", speedTime)] {
            if let value, !Self.isTimeLimit(value) {
                throw ValidationError("\(name) must be a number of seconds above 0, not \(value)")
            }
        }
        if let speedLimit, Self.byteRate(speedLimit) == nil {
            throw ValidationError("-Y/--speed-limit '\(speedLimit)' is not a number of bytes per second")
        }
    }

    /// A rate in bytes per second above zero: `500000`, `64K`, `1.5M`.
    static func byteRate(_ text: String) -> Int64? {
        parseByteCount(text).flatMap { $0 > 0 ? $0 : nil }
    }

    /// Whether `seconds` can be a time limit or a speed time: above 0, at most a year.
    static func isTimeLimit(_ seconds: Double) -> Bool { seconds > 0 && seconds <= 31_536_000 }

    /// Seconds as a duration (to the millisecond).
    static func duration(seconds: Double) -> Duration { .milliseconds(Int64((seconds * 1000).rounded())) }

    /// The pacing of the options.
    var pacing: RequestPacing {
        RequestPacing(
            rate: rate.flatMap(RequestRate.init(parsing:)),
            perHostRate: perHostRate.flatMap(RequestRate.init(parsing:)),
            perHostWait: wait.map(Self.duration(seconds:)) ?? .zero,
            randomizesWait: randomWait)
    }

    /// The minimum speed of the options.
    var minimumSpeed: MinimumSpeed? {
        guard speedLimit != nil || speedTime != nil else { return nil }
        return Self.minimumSpeed(bytesPerSecond: speedLimit.flatMap(Self.byteRate), seconds: speedTime)
    }

    /// A minimum speed as curl pairs `--speed-limit` and `--speed-time`: either alone takes the other's default
    /// (1 byte per second, 30 seconds).
    static func minimumSpeed(bytesPerSecond: Int64?, seconds: Double?) -> MinimumSpeed {
        MinimumSpeed(bytesPerSecond: bytesPerSecond ?? 1, for: duration(seconds: seconds ?? 30))
    }

    /// Sets revalidation, modification times, partial files, the run's rate limit, pacing and time limits of
    /// `configuration`.
    func apply(to configuration: inout Downloader.Configuration) {
        configuration.revalidatesCompletedFiles = checkRemote
        configuration.usesRemoteModificationTime = remoteTime
        configuration.keepsPartialOnFailure = !noKeepPartial
        configuration.maxBytesPerSecond = limitRate.flatMap(Self.byteRate)
        configuration.pacing = pacing
        configuration.timeLimit = maxTime.map(Self.duration(seconds:))
        configuration.minimumSpeed = minimumSpeed
    }

    /// Sets what every entry's plan takes from the options: `-c` and the speed limit for lines that set only one half.
    func apply(to settings: inout PlanSettings) {
        settings.continuesExistingFiles = continueExisting
        settings.speedLimit = speedLimit.flatMap(Self.byteRate)
        settings.speedTime = speedTime
    }
}
