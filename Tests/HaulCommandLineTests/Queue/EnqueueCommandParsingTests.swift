import Foundation
import Haul
import HaulPostgres
import Testing

@testable import HaulCommandLine

/// `haul enqueue`'s options, parsed into the plan of every entry and the queue's host settings.
@Suite("haul enqueue: parsing", .timeLimit(.minutes(1)))
struct EnqueueCommandParsingTests {
    @Test("by default: 3 retries, one connection per file, fail on conflict, the queue's host settings kept")
    func defaults() throws {
        let enqueue = try parse(["enqueue", "https://example.org/a"], as: EnqueueCommand.self)
        #expect(enqueue.input.urls == ["https://example.org/a"])
        #expect(enqueue.retries == 3)
        let plan = enqueue.planSettings
        #expect(plan.directory.path == "/" && plan.split == 1 && plan.conflictPolicy == .fail)
        #expect(plan.headers.isEmpty && plan.maxSize == nil)
        #expect(try HostOptions(perHost: enqueue.perHost, perHostRate: enqueue.perHostRate).isEmpty)
    }

    @Test("-i, --retries, -s, --max-size, --header and --on-conflict")
    func options() throws {
        let enqueue = try parse(
            [
                "enqueue", "-i", "list.txt", "--retries", "0", "-s", "4", "--max-size", "2G", "--header", "X-A: 1",
                "--on-conflict", "skip",
            ], as: EnqueueCommand.self)
        #expect(enqueue.input.inputFile == "list.txt" && enqueue.retries == 0)
        let plan = enqueue.planSettings
        #expect(
            plan.split == 4 && plan.maxSize == 2 << 30 && plan.headers == ["X-A: 1"] && plan.conflictPolicy == .skip)
    }

    @Test("--per-host and --per-host-rate replace the queue's settings; 'none' lifts them")
    func hostSettings() throws {
        let current = HostSettings(maxConnectionsPerHost: 9, minimumInterval: .seconds(9))
        let set = try HostOptions(perHost: "2", perHostRate: "10/s")
        #expect(set.applied(to: current) == HostSettings(maxConnectionsPerHost: 2, minimumInterval: .milliseconds(100)))
        let lifted = try HostOptions(perHost: "none", perHostRate: "none")
        #expect(lifted.applied(to: current) == HostSettings(maxConnectionsPerHost: nil, minimumInterval: .zero))
        let one = try HostOptions(perHost: "3", perHostRate: nil)
        #expect(one.applied(to: current) == HostSettings(maxConnectionsPerHost: 3, minimumInterval: .seconds(9)))
        let enqueue = try parse(["enqueue", "--per-host", "5", "--per-host-rate", "60/m"], as: EnqueueCommand.self)
        #expect(enqueue.perHost == "5" && enqueue.perHostRate == "60/m")
    }

    @Test(
        "a value out of range or not of its kind is refused, naming the option and the value",
        arguments: [
            (["--retries=-1"], ["--retries", "-1"]),
            (["-s", "0"], ["-s/--split", "0"]),
            (["-s", "65"], ["-s/--split", "65"]),
            (["--max-size", "huge"], ["--max-size", "'huge'"]),
            (["--per-host", "0"], ["--per-host", "'0'"]),
            (["--per-host", "all"], ["--per-host", "'all'"]),
            (["--per-host-rate", "fast"], ["--per-host-rate", "'fast'"]),
            (["--on-conflict", "ask"], ["--on-conflict", "ask"]),
            (["--retries", "some"], ["--retries", "some"]),
        ])
    func refused(arguments: [String], words: [String]) {
        expectUsageError(["enqueue"] + arguments, naming: words)
    }
}
