import Foundation
import Testing

@testable import Haul

@Suite("Progress and ETA (no I/O)")
struct BatchProgressTests {
    @Test("a download's ETA is what is left at the current speed; nil without a total or speed")
    func downloadETA() {
        #expect(
            DownloadProgress(bytesWritten: 500, totalBytes: 1000, bytesPerSecond: 100).estimatedTimeRemaining
                == .seconds(5))
        #expect(DownloadProgress(bytesWritten: 500, totalBytes: nil, bytesPerSecond: 100).estimatedTimeRemaining == nil)
        #expect(DownloadProgress(bytesWritten: 500, totalBytes: 1000, bytesPerSecond: 0).estimatedTimeRemaining == nil)
    }

    @Test("the batch sums finished and running files, and estimates unknown sizes from the known average")
    func batchEstimate() throws {
        var scheduler = AdmissionScheduler(maxConcurrent: 1)
        scheduler.enqueue(1, host: "h", priority: 0)
        scheduler.enqueue(2, host: "h", priority: 0)
        #expect(scheduler.admit() == [1])
        var state = DownloadQueue.State(scheduler: scheduler, failurePolicy: .continueOthers)
        let url = try #require(URL(string: "http://127.0.0.1/f"))
        let request = DownloadRequest(url: url, destination: .file(URL(fileURLWithPath: "/tmp/f")))
        let running = DownloadQueue.Entry(
            request: request, joinKey: .init(url: url, destination: request.destination), box: ResultBox(),
            absentPath: nil)
        running.progress = Locked(DownloadProgress(bytesWritten: 500, totalBytes: 1000, bytesPerSecond: 100))
        state.entries[1] = running
        state.batch.totalFiles = 3
        state.batch.finishedFiles = 1
        state.batch.finishedBytes = 1000
        state.batch.waitingWithoutSize = 1  // download 2: size unknown until it starts

        let progress = state.batchProgress()
        #expect(progress.runningFiles == 1 && progress.completedFiles == 1)
        #expect(progress.bytesWritten == 1500 && progress.bytesPerSecond == 100)
        #expect(progress.totalBytes == nil)  // one size is unknown
        // Known: 2 files, 2,000 bytes, so the third is estimated at 1,000: 3,000 - 1,500 left at 100 B/s.
        #expect(progress.estimatedTimeRemaining == .seconds(15))
    }
}
