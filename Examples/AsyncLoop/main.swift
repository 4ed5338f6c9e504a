// async/await: a plain `for` loop downloads one file after another; cancelling the task stops the loop and the
// transfer in progress, and leaves no half-written file.
import ExampleSupport
import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulTestServer

let server = try await startExampleServer()
let directory = try makeExampleDirectory("async-loop")
let queue = DownloadQueue(downloader: Downloader(transport: AsyncHTTPClientTransport.shared))
let names = (1...5).map { "chapter\($0).pdf" }

let finished = Locked<[String]>([])
let loop = Task {
    for name in names {
        // The third file stalls at the server's gate: the moment the user cancels.
        let query = name == "chapter3.pdf" ? ["size": "500000", "hold": "stuck"] : ["size": "500000"]
        let result = try await queue.download(
            DownloadRequest(url: server.url(path: "/bytes/\(name)", query: query), destination: .directory(directory)))
        finished.withLock { $0.append(result.fileURL.lastPathComponent) }
        print("downloaded \(result.fileURL.lastPathComponent)")
    }
}
try await waitUntil { server.heldCount(at: "stuck") == 1 }
print("cancelling while chapter3.pdf is in flight")
loop.cancel()
var stopped = false
do {
    try await loop.value
} catch let error as DownloadError where error.isCancellation {
    stopped = true
    print("the loop stopped: \(error.message)")
}
let onDisk = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
print("on disk: \(onDisk.joined(separator: ", "))")
try await server.shutdown()
check(
    stopped && onDisk == ["chapter1.pdf", "chapter2.pdf"] && finished.withLock { $0 } == onDisk,
    "sequential async loop, cancelled mid-transfer, nothing half-written")
