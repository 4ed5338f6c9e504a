import Foundation
import Haul
import HaulPostgres
import Testing

@testable import HaulCommandLine

/// `haul worker`'s own options, parsed into the worker's configuration (the options it shares with `get` are
/// checked for both by the suites of Options/).
@Suite("haul worker: parsing", .timeLimit(.minutes(1)))
struct WorkerCommandParsingTests {
    @Test("by default: 4 at once, a lease of 30 s, running until stopped, SHA-256 of every file")
    func defaults() throws {
        let worker = try parse(["worker"], as: WorkerCommand.self)
        let configuration = worker.workerConfiguration(directory: URL(fileURLWithPath: "/srv"))
        #expect(configuration.directory.path == "/srv")
        #expect(configuration.maxConcurrent == 4 && configuration.lease == .seconds(30))
        #expect(!configuration.exitsWhenEmpty && !worker.noOpDownloads)
        #expect(configuration.name.hasSuffix(":\(ProcessInfo.processInfo.processIdentifier)"))
        #expect(worker.database.queue == "default")
        #expect(try HaulCommandLineTests.configuration("worker", []).computesSHA256)
    }

    @Test("-u/--user gives every claimed download its credentials; without it there are none")
    func user() throws {
        let worker = try parse(["worker", "-u", "ann:se:cret"], as: WorkerCommand.self)
        let configuration = worker.workerConfiguration(directory: URL(fileURLWithPath: "/srv"))
        #expect(configuration.credentials == Credentials(user: "ann", password: "se:cret"))
        let plain = try parse(["worker"], as: WorkerCommand.self)
        #expect(plain.workerConfiguration(directory: URL(fileURLWithPath: "/srv")).credentials == nil)
    }

    @Test("-j, --lease, --until-empty, --name, --no-op-downloads, --db and --queue")
    func options() throws {
        let worker = try parse(
            [
                "worker", "-j", "8", "--lease", "2.5", "--until-empty", "--name", "w1", "--no-op-downloads", "--db",
                "postgres://haul@db/haul", "--queue", "datasets", "-d", "/srv",
            ], as: WorkerCommand.self)
        let configuration = worker.workerConfiguration(directory: worker.destination.url)
        #expect(configuration.directory.path == "/srv")
        #expect(configuration.maxConcurrent == 8 && configuration.claimAhead == 8)
        #expect(configuration.lease == .milliseconds(2500))
        #expect(configuration.exitsWhenEmpty && configuration.name == "w1")
        #expect(worker.noOpDownloads)
        #expect(worker.database.queue == "datasets")
        #expect(try worker.database.databaseURL(environment: [:]).host == "db")
    }

    @Test(
        "a lease out of range or not a number is refused, naming it and the value",
        arguments: [("0.5", "--lease"), ("86401", "--lease"), ("long", "--lease")])
    func leaseRefused(value: String, option: String) {
        expectUsageError(["worker", option, value], naming: [option, value])
    }

    @Test("an option without its value is refused, naming it", arguments: ["--lease", "--name", "--db", "--queue"])
    func missingValue(option: String) {
        expectUsageError(["worker", option], naming: ["Missing value", option])
    }
}
