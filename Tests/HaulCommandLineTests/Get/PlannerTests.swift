import Foundation
import Haul
import Testing

@testable import HaulCommandLine

/// How `haul get` turns one entry of its input into a request, without I/O: what the run downloads is exactly what
/// the entry and the command's options say, whichever of the request's fields the planner leaves at their defaults.
@Suite("Planner: entries into requests (no I/O)")
struct PlannerTests {
    private let directory = URL(fileURLWithPath: "/tmp/haul-planner-tests", isDirectory: true)

    private func plan(_ entry: InputEntry, settings: PlanSettings) throws -> PlannedDownload {
        try Planner(settings: settings).plan(entry).get()
    }

    @Test("an entry without options plans the request a new one of its URL and directory is, with the planned path")
    func plainEntry() throws {
        let url = try #require(URL(string: "http://example.com/files/a.bin"))
        let planned = try plan(
            InputEntry(source: InputOrigin(source: "list.txt", line: 1), url: url.absoluteString),
            settings: PlanSettings(directory: directory))
        let expected = DownloadRequest(url: url, destination: .directory(directory, useContentDisposition: false))
        #expect(planned.request == expected)
        #expect(planned.request.hashValue == expected.hashValue)
        #expect(planned.request.maxConnections == 1)
        #expect(planned.request.minimumSegmentSize == DownloadRequest.defaultMinimumSegmentSize)
        #expect(planned.request.mirrors.isEmpty && !planned.request.continuesExistingFile)
        #expect(planned.request.maxBytesPerSecond == nil && planned.request.timeLimit == nil)
        #expect(planned.request.minimumSpeed == nil)
        #expect(planned.plannedPath == directory.path + "/a.bin")
    }

    @Test("every option of an entry and of the command reaches the request")
    func entryOptions() throws {
        var entry = InputEntry(source: InputOrigin(source: "list.txt", line: 3), url: "http://example.com/b.iso")
        entry.mirrors = ["http://mirror.example.net/b.iso"]
        entry.split = "4"
        entry.limitRate = "1M"
        entry.maxTime = "30"
        entry.speedLimit = "1000"
        entry.speedTime = "5"
        var settings = PlanSettings(directory: directory)
        settings.continuesExistingFiles = true
        settings.minimumSegmentSize = 1 << 20
        let request = try plan(entry, settings: settings).request
        #expect(request.mirrors == [URL(string: "http://mirror.example.net/b.iso")])
        #expect(request.maxConnections == 4)
        #expect(request.maxBytesPerSecond == 1 << 20)
        #expect(request.timeLimit == .seconds(30))
        #expect(request.minimumSpeed == MinimumSpeed(bytesPerSecond: 1000, for: .seconds(5)))
        #expect(request.continuesExistingFile)
        #expect(request.minimumSegmentSize == 1 << 20)
    }

    @Test("-s/--split sets the connections of every entry without split=; split= wins over it")
    func commandSplit() throws {
        var settings = PlanSettings(directory: directory)
        settings.split = 8
        let plain = InputEntry(source: InputOrigin(source: "list.txt", line: 1), url: "http://example.com/c")
        #expect(try plan(plain, settings: settings).request.maxConnections == 8)
        var one = plain
        one.split = "1"
        let request = try plan(one, settings: settings).request
        #expect(request.maxConnections == 1)
        var unsplit = settings
        unsplit.split = 1
        #expect(request == (try plan(plain, settings: unsplit).request))
    }
}
