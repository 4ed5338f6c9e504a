import Foundation
import Haul
import HaulOperations
import HaulTestServer
import HaulTestSupport
import Testing

/// Cancellation at every stage leaves no destination file, no partial and no transfer running.
@Suite("Download cancellation", .timeLimit(.minutes(2)))
struct DownloadCancellationTests {
    enum Stage: String, CaseIterable, CustomTestStringConvertible {
        case beforeConnect, awaitingHead, midBody, duringBackoff, justBeforeRename
        var testDescription: String { rawValue }
    }

    static let cases = TransportKind.allCases.flatMap { kind in Stage.allCases.map { (kind, $0) } }

    @Test("cancelling at every stage cleans up", arguments: cases)
    func cancelAtStage(kind: TransportKind, stage: Stage) async throws {
        try await TestServer.withRunning(kind.server()) { server in
            let dir = try TemporaryDirectory()
            let clock = BlockingClock()
            let atRename = Gate<Void>()
            var configuration = kind.configuration(clock: clock)
            configuration.hooks.beforePublish = {
                atRename.open()
                try? await Task.sleep(for: .seconds(3600))  // returns early when the task is cancelled
            }
            let downloader = Downloader(transport: kind.makeTransport(), configuration: configuration)
            let query: [String: String] =
                switch stage {
                case .beforeConnect, .justBeforeRename: ["size": "10000"]
                case .awaitingHead: ["size": "10000", "hold": "gate"]
                case .midBody: ["size": "100000", "stallAfter": "20000", "stall": "forever"]
                case .duringBackoff: ["size": "10000", "status": "503"]
                }
            let url = server.url(path: "/bytes/victim", query: query)
            let sawBytes = Gate<Void>()
            let task = Task {
                if stage == .beforeConnect { withUnsafeCurrentTask { $0?.cancel() } }
                return try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url))) {
                    event in
                    if case .progress(let progress) = event, progress.bytesWritten > 0 { sawBytes.open() }
                }
            }
            switch stage {
            case .beforeConnect: break
            case .awaitingHead: try await eventually("request held") { server.heldCount(at: "gate") == 1 }
            case .midBody: await sawBytes.wait()
            case .duringBackoff: await clock.entered.wait()
            case .justBeforeRename: await atRename.wait()
            }
            task.cancel()
            let error = try await #require(throws: DownloadError.self) { try await task.value }
            #expect(error.code == .cancelled)
            #expect(dir.contents().isEmpty, "left behind: \(dir.contents())")
            try await eventually("server sees no request in flight") { server.stats.inFlight == 0 }
            if stage == .beforeConnect { #expect(server.stats.requestCount == 0) }
        }
    }

    @Test("DownloadTask: events as an AsyncSequence, cancel() stops the transfer")
    func downloadTaskHandle() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            let downloader = Downloader(
                transport: TransportKind.asyncHTTPClient.makeTransport(),
                configuration: testConfiguration())
            let ok = downloader.start(
                DownloadRequest(
                    url: server.url(path: "/bytes/ok", query: ["size": "100000"]), destination: .directory(dir.url)))
            var sawFinished = false
            for await event in ok.events {
                if case .finished(let result) = event { sawFinished = result.size == 100_000 }
            }
            #expect(sawFinished)
            #expect(try await ok.result.size == 100_000)

            let stuck = downloader.start(
                DownloadRequest(
                    url: server.url(path: "/bytes/stuck", query: ["size": "10", "hold": "never"]),
                    destination: .directory(dir.url)))
            try await eventually("request held") { server.heldCount(at: "never") == 1 }
            stuck.cancel()
            let error = try await #require(throws: DownloadError.self) { try await stuck.result }
            #expect(error.code == .cancelled)
            #expect(dir.contents() == ["ok"])
        }
    }

    @Test(
        "keepsPartialOnCancel keeps a hidden partial for a later resume (none for a small body), never the destination")
    func keepsPartial() async throws {
        try await TestServer.withRunning { server in
            let dir = try TemporaryDirectory()
            var configuration = testConfiguration()
            configuration.keepsPartialOnCancel = true
            let journal = MemoryJournal()  // a kept partial is only of use to a run that can find it
            configuration.journal = journal
            let downloader = Downloader(
                transport: TransportKind.asyncHTTPClient.makeTransport(), configuration: configuration)
            func cancelMidway(_ name: String, size: Int) async {
                let sawBytes = Gate<Void>()
                let url = server.url(
                    path: "/bytes/\(name)", query: ["size": "\(size)", "stallAfter": "\(size / 2)", "stall": "forever"])
                let task = Task {
                    try await downloader.download(DownloadRequest(url: url, destination: .directory(dir.url))) {
                        event in
                        if case .progress(let progress) = event, progress.bytesWritten > 0 { sawBytes.open() }
                    }
                }
                await sawBytes.wait()
                task.cancel()
                _ = await task.result
            }
            await cancelMidway("half", size: 600_000)  // above DownloadRun.restartableLimit
            #expect(dir.contents() == [".half.haul-partial"])
            let kept = journal.allRecords().map(\.state)
            #expect(kept.count == 1 && { if case .partial = kept[0] { true } else { false } }())
            await cancelMidway("small", size: 50_000)
            #expect(dir.contents() == [".half.haul-partial"])
        }
    }
}
