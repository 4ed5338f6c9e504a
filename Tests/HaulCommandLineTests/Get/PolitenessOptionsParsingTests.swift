import Foundation
import Haul
import Testing

@testable import HaulCommandLine

/// `haul get`'s freshness, politeness and time-limit options, parsed into the engine's configuration and the plan.
@Suite("haul get: politeness options", .timeLimit(.minutes(1)))
struct PolitenessOptionsParsingTests {
    @Test("by default: trust the journal, remote times, keep partials, no limits")
    func defaults() throws {
        let configuration = try configuration("get", [])
        #expect(!configuration.revalidatesCompletedFiles)
        #expect(configuration.usesRemoteModificationTime && configuration.keepsPartialOnFailure)
        #expect(configuration.maxBytesPerSecond == nil && configuration.pacing == RequestPacing())
        #expect(configuration.timeLimit == nil && configuration.minimumSpeed == nil)
        let plan = try parse(["get"], as: GetCommand.self).planSettings(directory: URL(fileURLWithPath: "/"))
        #expect(!plan.continuesExistingFiles && plan.speedLimit == nil && plan.speedTime == nil)
    }

    @Test("-N, --no-remote-time, --no-keep-partial and -c")
    func freshness() throws {
        #expect(try configuration("get", ["-N"]).revalidatesCompletedFiles)
        #expect(try configuration("get", ["--check-remote"]).revalidatesCompletedFiles)
        #expect(try !configuration("get", ["--no-remote-time"]).usesRemoteModificationTime)
        #expect(try configuration("get", ["--no-remote-time", "--remote-time"]).usesRemoteModificationTime)
        #expect(try !configuration("get", ["--no-keep-partial"]).keepsPartialOnFailure)
        for flag in ["-c", "--continue"] {
            let plan = try parse(["get", flag], as: GetCommand.self).planSettings(directory: URL(fileURLWithPath: "/"))
            #expect(plan.continuesExistingFiles)
        }
    }

    @Test("--limit-rate, --rate, --per-host-rate, --wait and --random-wait")
    func pacing() throws {
        let configuration = try configuration(
            "get",
            ["--limit-rate", "500K", "--rate", "10/s", "--per-host-rate", "30/m", "--wait", "1.5", "--random-wait"])
        #expect(configuration.maxBytesPerSecond == 500 << 10)
        #expect(
            configuration.pacing
                == RequestPacing(
                    rate: RequestRate(parsing: "10/s"), perHostRate: RequestRate(parsing: "30/m"),
                    perHostWait: .milliseconds(1500), randomizesWait: true))
    }

    @Test("-m/--max-time, -Y/--speed-limit and -y/--speed-time; either speed option alone takes the other's default")
    func timeLimits() throws {
        let both = try configuration("get", ["-m", "60", "-Y", "1K", "-y", "10"])
        #expect(both.timeLimit == .seconds(60))
        #expect(both.minimumSpeed == MinimumSpeed(bytesPerSecond: 1024, for: .seconds(10)))
        #expect(try configuration("get", ["--max-time", "0.5"]).timeLimit == .milliseconds(500))
        #expect(
            try configuration("get", ["--speed-limit", "100"]).minimumSpeed
                == MinimumSpeed(bytesPerSecond: 100, for: .seconds(30)))
        #expect(
            try configuration("get", ["--speed-time", "5"]).minimumSpeed
                == MinimumSpeed(bytesPerSecond: 1, for: .seconds(5)))
        let plan = try parse(["get", "-Y", "2K", "-y", "7"], as: GetCommand.self).planSettings(
            directory: URL(fileURLWithPath: "/"))
        #expect(plan.speedLimit == 2048 && plan.speedTime == 7)
    }

    @Test(
        "a value out of range or not of its kind is refused, naming the option and the value",
        arguments: [
            (["--limit-rate", "fast"], ["--limit-rate", "'fast'"]),
            (["--limit-rate", "0"], ["--limit-rate", "'0'"]),
            (["--rate", "10/w"], ["--rate", "'10/w'"]),
            (["--per-host-rate", "0/s"], ["--per-host-rate", "'0/s'"]),
            (["--wait=-1"], ["--wait", "-1"]),
            (["--wait", "86401"], ["--wait", "86401"]),
            (["--wait", "long"], ["--wait", "long"]),
            (["-m", "0"], ["-m/--max-time", "0"]),
            (["--max-time", "31536001"], ["-m/--max-time", "31536001"]),
            (["-y", "0"], ["-y/--speed-time", "0"]),
            (["-Y", "slow"], ["-Y/--speed-limit", "'slow'"]),
            (["-Y", "0"], ["-Y/--speed-limit", "'0'"]),
        ])
    func refused(arguments: [String], words: [String]) {
        expectUsageError(["get"] + arguments, naming: words)
    }

    @Test("-N without the journal, and --random-wait without --wait, are refused")
    func conflicts() {
        expectUsageError(["get", "-N", "--no-journal"], naming: ["-N/--check-remote", "journal"])
        expectUsageError(["get", "--random-wait"], naming: ["--random-wait", "--wait"])
        expectUsageError(["get", "--random-wait", "--wait", "0"], naming: ["--random-wait", "--wait"])
    }
}
