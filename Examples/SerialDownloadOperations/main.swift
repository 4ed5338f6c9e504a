// The seeds' DownloadManager: each download is an Operation that stays executing until its file is on disk, on
// a serial OperationQueue, with "k / n files downloaded" progress and a cancel that stops the rest.
import ExampleSupport
import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulTestServer

let server = try await startExampleServer()
let directory = try makeExampleDirectory("serial")
let downloader = Downloader(transport: AsyncHTTPClientTransport.shared)
let names = (1...6).map { "part\($0).bin" }

let operationQueue = OperationQueue()
operationQueue.maxConcurrentOperationCount = 1
let operations = names.map { name in
    DownloadOperation(
        DownloadRequest(
            url: server.url(path: "/bytes/\(name)", query: ["size": "300000", "rate": "6000000"]),
            destination: .directory(directory)),
        downloader: downloader)
}
let group = OperationGroup(operations)
// The whole progress line is one closure; after the third file the user presses "cancel".
group.onMemberFinished = { done, total in
    print("\(done) / \(total) files downloaded")
    if done == 3 { group.cancelAll() }
}
operationQueue.addOperations(operations + [group.completionOperation { print("completion operation: all ended") }])
try await group.finished()

let finished = operations.filter { (try? $0.result?.get()) != nil }.count
let cancelled = operations.filter { operation in
    if case .failure(let error as DownloadError)? = operation.result { return error.isCancellation }
    if case .failure(let error as OperationError)? = operation.result { return error.isCancellation }
    return false
}.count
let onDisk = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
print("finished \(finished), cancelled \(cancelled), on disk: \(onDisk.joined(separator: ", "))")
try await server.shutdown()
check(
    finished == 3 && cancelled == 3 && onDisk == Array(names.prefix(3)) && server.stats.maxInFlight == 1,
    "one at a time, k / n progress, cancel stops the rest and leaves nothing half-written")
