import Foundation
import Haul
import Testing

@testable import HaulCommandLine

/// `haul get`'s own options, parsed in process into the plan, the queue and the engine's configuration.
@Suite("haul get: parsing", .timeLimit(.minutes(1)))
struct GetCommandParsingTests {
    @Test("by default: 4 at once, no per-host limit, 3 retries, one connection per file, no digest")
    func defaults() throws {
        let get = try parse(["get", "https://example.org/a"], as: GetCommand.self)
        #expect(get.input.urls == ["https://example.org/a"] && get.input.inputFile == nil)
        let queue = get.queueConfiguration
        #expect(queue.maxConcurrentDownloads == 4 && queue.perHostLimit == nil && !queue.recordsRequests)
        let configuration = try configuration("get", [])
        #expect(configuration.retryPolicy.maxRetries == 3)
        #expect(!configuration.computesSHA256)
        #expect(configuration.keepsPartialOnCancel)
        let plan = get.planSettings(directory: URL(fileURLWithPath: "/tmp"))
        #expect(plan.fileName == nil && plan.checksum == nil && plan.headers.isEmpty && plan.maxSize == nil)
        #expect(plan.split == 1 && plan.minimumSegmentSize == DownloadRequest.defaultMinimumSegmentSize)
        #expect(plan.conflictPolicy == .fail && !plan.useContentDisposition)
    }

    @Test("URLs and -i/--input-file")
    func input() throws {
        let get = try parse(["get", "-i", "urls.txt", "https://a/1", "https://a/2"], as: GetCommand.self)
        #expect(get.input.urls == ["https://a/1", "https://a/2"] && get.input.inputFile == "urls.txt")
        #expect(try parse(["get", "--input-file", "-"], as: GetCommand.self).input.inputFile == "-")
        let failure = #expect(throws: UsageFailure.self) {
            try parse(["get", "-i", "/nonexistent/urls.txt"], as: GetCommand.self).input.open(summary: "nothing")
        }
        #expect(failure?.problems.first?.origin == "-i/--input-file")
        #expect(failure?.problems.first?.message.contains("/nonexistent/urls.txt") == true)
    }

    @Test("-o, --checksum, --header, --max-size, --content-disposition and --on-conflict plan every entry")
    func plan() throws {
        let get = try parse(
            [
                "get", "-o", "name.bin", "--checksum", "sha-256=00", "--header", "A: 1", "--header", "B: 2",
                "--max-size", "10M", "--content-disposition", "--on-conflict", "rename",
            ], as: GetCommand.self)
        let plan = get.planSettings(directory: URL(fileURLWithPath: "/tmp"))
        #expect(plan.fileName == "name.bin" && plan.checksum == "sha-256=00")
        #expect(plan.headers == ["A: 1", "B: 2"])
        #expect(plan.maxSize == 10 << 20)
        #expect(plan.useContentDisposition && plan.conflictPolicy == .rename)
        #expect(try parse(["get", "--output", "x"], as: GetCommand.self).fileName == "x")
        for policy in ConflictPolicy.allCases {
            let parsed = try parse(["get", "--on-conflict", policy.rawValue], as: GetCommand.self)
            #expect(parsed.planSettings(directory: URL(fileURLWithPath: "/")).conflictPolicy == policy)
        }
    }

    @Test("-s/--split and --min-split-size; -s raises the default -j")
    func split() throws {
        let get = try parse(["get", "-s", "8", "--min-split-size", "1M"], as: GetCommand.self)
        let plan = get.planSettings(directory: URL(fileURLWithPath: "/tmp"))
        #expect(plan.split == 8 && plan.minimumSegmentSize == 1 << 20)
        #expect(get.queueConfiguration.maxConcurrentDownloads == 8)
        let limited = try parse(["get", "--split", "8", "-j", "2"], as: GetCommand.self)
        #expect(limited.queueConfiguration.maxConcurrentDownloads == 2)
    }

    @Test("-j, --per-host, --retries and --sha256 set the queue and the engine")
    func queueAndEngine() throws {
        let get = try parse(["get", "-j", "6", "--per-host", "2"], as: GetCommand.self)
        #expect(get.queueConfiguration.maxConcurrentDownloads == 6 && get.queueConfiguration.perHostLimit == 2)
        #expect(try configuration("get", ["--retries", "0"]).retryPolicy.maxRetries == 0)
        #expect(try configuration("get", ["--sha256"]).computesSHA256)
    }

    @Test(
        "a number out of range, or a size that is not one, is refused, naming the option and the value",
        arguments: [
            (["--per-host", "0"], ["--per-host", "0"]),
            (["--retries=-1"], ["--retries", "-1"]),
            (["-s", "0"], ["-s/--split", "0"]),
            (["-s", "65"], ["-s/--split", "65"]),
            (["-s", "-1"], ["-s/--split", "-1"]),
            (["--min-split-size", "0"], ["--min-split-size", "'0'"]),
            (["--min-split-size", "big"], ["--min-split-size", "'big'"]),
            (["--max-size", "10Q"], ["--max-size", "'10Q'"]),
            (["--per-host", "many"], ["--per-host", "many"]),
            (["--retries", "x"], ["--retries", "x"]),
            (["-s", "two"], ["-s", "two"]),
            (["--on-conflict", "merge"], ["--on-conflict", "merge"]),
        ])
    func refused(arguments: [String], words: [String]) {
        expectUsageError(["get"] + arguments, naming: words)
    }

    @Test("an option without its value is refused, naming it", arguments: ["-i", "-o", "--checksum", "--header", "-s"])
    func missingValue(option: String) {
        expectUsageError(["get", option], naming: ["Missing value", option])
    }
}
