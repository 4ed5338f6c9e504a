// "How do I make one operation not start until another finishes?" op2 and op3 depend on op1 (a manifest);
// they start only after it, side by side, each reading op1's result — no delegates, no shared variables.
import ExampleSupport
import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulTestServer

let server = try await startExampleServer()
let directory = try makeExampleDirectory("dependencies")
let downloads = DownloadQueue(downloader: Downloader(transport: AsyncHTTPClientTransport.shared))

func request(_ name: String, size: Int) -> DownloadRequest {
    DownloadRequest(
        url: server.url(path: "/bytes/\(name)", query: ["size": "\(size)", "rate": "4000000"]),
        destination: .directory(directory))
}

let op1 = DownloadOperation(request("manifest.json", size: 200_000), queue: downloads)
let op2 = DownloadOperation(request("left.bin", size: 100_000), queue: downloads)
let op3 = DownloadOperation(request("right.bin", size: 100_000), queue: downloads)
op2.addDependency(op1)
op3.addDependency(op1)
// A step that uses the manifest's result once both followers are done.
let report = AsyncBlockOperation(name: "report", consuming: op1) { manifest in
    let left = try await op2.value
    let right = try await op3.value
    return
        "manifest \(manifest.size) bytes, then \(left.fileURL.lastPathComponent) and \(right.fileURL.lastPathComponent)"
}
report.addDependency(op2)
report.addDependency(op3)

let operationQueue = OperationQueue()
operationQueue.maxConcurrentOperationCount = 4
operationQueue.addOperations([op3, op2, report, op1])  // the order added does not matter
print(try await report.value)

let order = server.stats.requests.map(\.path)
print("server saw: \(order.joined(separator: ", "))")
try await server.shutdown()
check(
    order.first == "/bytes/manifest.json" && Set(order.dropFirst()) == ["/bytes/left.bin", "/bytes/right.bin"],
    "op2 and op3 started only after op1 finished")
