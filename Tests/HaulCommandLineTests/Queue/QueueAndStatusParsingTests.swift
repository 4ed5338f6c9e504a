import Foundation
import HaulPostgres
import Testing

@testable import HaulCommandLine

/// `haul status` and `haul queue`'s subcommands.
@Suite("haul status and haul queue: parsing", .timeLimit(.minutes(1)))
struct QueueAndStatusParsingTests {
    @Test("status: by default one reading, text, 20 failures; --watch, --interval, --json, --failures")
    func status() throws {
        let plain = try parse(["status"], as: StatusCommand.self)
        #expect(!plain.watch && plain.interval == 2 && !plain.json && plain.failures == 20)
        let given = try parse(
            ["status", "--watch", "--interval", "0.5", "--json", "--failures", "0"], as: StatusCommand.self)
        #expect(given.watch && given.interval == 0.5 && given.json && given.failures == 0)
    }

    @Test(
        "status: an interval or a count out of range is refused, naming the option and the value",
        arguments: [
            (["--interval", "0.05"], ["--interval", "0.05"]),
            (["--interval", "3601"], ["--interval", "3601"]),
            (["--interval", "often"], ["--interval", "often"]),
            (["--failures=-1"], ["--failures", "-1"]),
            (["--failures", "all"], ["--failures", "all"]),
        ])
    func statusRefused(arguments: [String], words: [String]) {
        expectUsageError(["status"] + arguments, naming: words)
    }

    @Test("queue cancel: --url, --host or --all")
    func cancel() throws {
        #expect(
            try parse(["queue", "cancel", "--url", "https://a/b"], as: QueueCommand.Cancel.self).selection
                == .url("https://a/b"))
        #expect(
            try parse(["queue", "cancel", "--host", "a.example"], as: QueueCommand.Cancel.self).selection
                == .host("a.example"))
        #expect(try parse(["queue", "cancel", "--all"], as: QueueCommand.Cancel.self).selection == .all)
    }

    @Test("queue cancel: none, or more than one, of --url, --host and --all is refused")
    func cancelRefused() {
        expectUsageError(["queue", "cancel"], naming: ["--url", "--host", "--all"])
        expectUsageError(["queue", "cancel", "--all", "--host", "h"], naming: ["--url", "--host", "--all"])
        expectUsageError(["queue", "cancel", "--url", "u", "--host", "h"], naming: ["--url", "--host", "--all"])
    }

    @Test("queue set: --per-host, --per-host-rate or both")
    func set() throws {
        let set = try parse(["queue", "set", "--per-host", "3", "--per-host-rate", "1/h"], as: QueueCommand.Set.self)
        #expect(set.perHost == "3" && set.perHostRate == "1/h")
        let settings = try HostOptions(perHost: set.perHost, perHostRate: set.perHostRate).applied(to: HostSettings())
        #expect(settings == HostSettings(maxConnectionsPerHost: 3, minimumInterval: .seconds(3600)))
    }

    @Test(
        "queue set: nothing to set, or a value not of its kind, is refused",
        arguments: [
            ([], ["--per-host", "--per-host-rate"]),
            (["--per-host", "-"], ["--per-host", "'-'"]),
            (["--per-host-rate", "5/y"], ["--per-host-rate", "'5/y'"]),
        ])
    func setRefused(arguments: [String], words: [String]) {
        expectUsageError(["queue", "set"] + arguments, naming: words)
    }

    @Test("queue purge: --older-than N with s, m, h or d")
    func purge() throws {
        #expect(try parse(["queue", "purge", "--older-than", "7d"], as: QueueCommand.Purge.self).olderThan == "7d")
        #expect(QueueCommand.Purge.age("7d") == .seconds(7 * 86_400))
        #expect(QueueCommand.Purge.age("12h") == .seconds(12 * 3600))
        #expect(QueueCommand.Purge.age("30m") == .seconds(1800))
        #expect(QueueCommand.Purge.age("45s") == .seconds(45))
    }

    @Test("queue purge: an age not of its kind, or none, is refused", arguments: ["7w", "d", "-1d", "soon"])
    func purgeRefused(age: String) {
        expectUsageError(["queue", "purge", "--older-than=\(age)"], naming: ["--older-than", "'\(age)'"])
    }

    @Test("queue purge without --older-than is refused, naming it")
    func purgeMissing() {
        expectUsageError(["queue", "purge"], naming: ["Missing expected argument", "--older-than"])
    }

    @Test("queue retry-failed takes only the database options")
    func retryFailed() throws {
        _ = try parse(["queue", "retry-failed", "--queue", "q"], as: QueueCommand.RetryFailed.self)
        expectUsageError(["queue", "retry-failed", "--all"], naming: ["--all"])
    }

    @Test("an unknown subcommand is refused, naming it")
    func unknownSubcommand() {
        expectUsageError(["queue", "empty"], naming: ["empty"])
    }
}
