import ArgumentParser
import Foundation
import Haul
import HaulTestServer

/// `haul demo`: the main job on a loopback server — a mixed batch with the faults real servers have, downloaded
/// with default settings and the live display, then every file checked byte for byte.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Download a generated batch from an in-process test server, with faults, and verify every file.",
        discussion: """
            Starts HaulTestServer on 127.0.0.1 (a free port) serving 10 files of mixed sizes: one fails with 503 \
            twice before it succeeds, one is cut mid-body and resumes with Range, one is throttled, and one does \
            not exist (404). They are downloaded with `haul get`'s defaults (4 at once, 3 retries) into a fresh \
            temporary directory, then each file is compared with what the server generated.

            Exit status 0 when every outcome is the expected one (the 404 is expected to fail).
            """
    )

    /// One file of the demo set.
    struct Item {
        var name: String
        var size: Int
        var faults: [String: String] = [:]
        var mustFail = false
        var note: String?
    }

    static let items: [Item] = [
        Item(name: "readme.txt", size: 12 << 10),
        Item(name: "settings.json", size: 700),
        Item(name: "photo-1.jpg", size: 600 << 10),
        Item(name: "photo-2.jpg", size: 1536 << 10),
        Item(name: "dataset.csv", size: 3 << 20),
        Item(name: "archive.tar", size: 8 << 20),
        Item(name: "flaky.bin", size: 1 << 20, faults: ["fail": "2"], note: "503 twice, then served"),
        Item(
            name: "interrupted.iso", size: 6 << 20,
            faults: ["cutAfter": "2500000", "cutTimes": "1", "rate": "4000000"],
            note: "cut after 2.5 MB, resumed with Range"),
        Item(name: "slow.zip", size: 3 << 20, faults: ["rate": "1000000"], note: "throttled to 1 MB/s"),
        Item(name: "missing.pdf", size: 1000, faults: ["status": "404"], mustFail: true, note: "404, expected to fail"),
    ]

    @Option(
        name: [.customShort("d"), .customLong("dir")], help: "Download here instead of a fresh temporary directory.")
    var directory: String?

    mutating func run() async throws {
        Interruption.install()
        let server = TestServer()
        try await server.start()
        let target: URL
        if let directory {
            target = URL(fileURLWithPath: directory, isDirectory: true).standardizedFileURL
        } else {
            target = FileManager.default.temporaryDirectory.appendingPathComponent(
                "haul-demo-\(UUID().uuidString.prefix(8))", isDirectory: true)
        }
        try FileManager.default.createDirectory(at: target, withIntermediateDirectories: true)
        Console.out(
            "Serving \(Self.items.count) files on \(server.baseURL.absoluteString) (loopback); downloading into \(target.path)\n"
        )
        for item in Self.items where item.note != nil {
            Console.out("  \(item.name): \(item.note ?? "")\n")
        }

        let requests = Self.items.map { item in
            var query = item.faults
            query["size"] = "\(item.size)"
            return DownloadRequest(
                url: server.url(path: "/bytes/\(item.name)", query: query), destination: .directory(target))
        }
        // `haul get`'s defaults, but demo runs always start fresh, so nothing is remembered between them.
        let connection = try ConnectionOptions.parse([])
        var configuration = Downloader.Configuration.commandLine
        connection.apply(to: &configuration)
        let queue = DownloadQueue.Configuration(recordsRequests: false)
        let engine = connection.makeEngine(configuration: configuration, maxConcurrent: queue.maxConcurrentDownloads)
        let names = NameBook()
        let report = await GetRun.run(
            ListedRequests(requests: requests, names: names), count: requests.count, names: names, engine: engine,
            queue: queue, output: try OutputOptions.parse([]))
        try await server.shutdown()

        let problems = Self.verify(report, in: target)
        if report.interrupted { throw ExitCode(130) }
        if problems.isEmpty {
            let good = Self.items.count(where: { !$0.mustFail })
            Console.out(
                "Verified: \(good) files byte for byte identical to what the server generated; missing.pdf failed as expected (404).\n"
            )
            Console.out("The files are in \(target.path)\n")
        } else {
            for problem in problems { Console.err("demo: \(problem)\n") }
            throw ExitCode(1)
        }
    }

    /// What differs from the expected outcome: each good file present and identical, the 404 failed, nothing else
    /// in the directory.
    static func verify(_ report: RunReport, in directory: URL) -> [String] {
        var problems: [String] = []
        for item in items {
            let file = directory.appendingPathComponent(item.name, isDirectory: false)
            let data = try? Data(contentsOf: file)
            if item.mustFail {
                if data != nil { problems.append("\(item.name) should have failed but is on disk") }
                if !report.failures.contains(where: { $0.name == item.name && $0.error.status == 404 }) {
                    problems.append("\(item.name) did not fail with 404")
                }
                continue
            }
            guard let data else {
                problems.append("\(item.name) is missing")
                continue
            }
            if [UInt8](data) != TestServer.expectedBytes(name: item.name, size: item.size) {
                problems.append("\(item.name) differs from the served bytes (\(data.count) of \(item.size) bytes)")
            }
        }
        let expected = Set(items.filter { !$0.mustFail }.map(\.name))
        let present = Set((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? [])
        for extra in present.subtracting(expected).sorted() { problems.append("unexpected file left: \(extra)") }
        return problems
    }
}
