// The seeds' bug and its fix. Starting downloads in a loop starts them all at once — an API that allows one
// request at a time answers 403, a phone runs out of memory. A DownloadQueue of width 1 runs them one after
// another, in order. The loopback server's in-flight counter shows both.
import ExampleSupport
import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulTestServer

let server = try await startExampleServer()
let downloader = Downloader(transport: AsyncHTTPClientTransport.shared)
let names = ["AppStoreCard", "currentLocation", "DispatchQueue", "dynamicFont", "telegrammy"]
// In the loop every request waits at the server's gate until all that are going to start have started.
let urls = names.map { server.url(path: "/bytes/\($0).zip", query: ["size": "200000", "hold": "loop"]) }
// Through the queue they are throttled instead (50 ms each), so any overlap would show in the counter.
let throttled = names.map { server.url(path: "/bytes/\($0).zip", query: ["size": "200000", "rate": "4000000"]) }

print("1. downloader.start(...) in a loop:")
let loopDirectory = try makeExampleDirectory("loop")
let tasks = urls.map { downloader.start(DownloadRequest(url: $0, destination: .directory(loopDirectory))) }
try await waitUntil { server.heldCount(at: "loop") == names.count }
print("   \(server.heldCount(at: "loop")) requests in flight at once")
server.openGate("loop")
for task in tasks { _ = try await task.result }
let loopMax = server.stats.maxInFlight

print("2. a DownloadQueue with maxConcurrentDownloads = 1:")
server.resetStats()  // counters back to zero (gates too, which the throttled URLs do not use)
let queueDirectory = try makeExampleDirectory("queue")
let queue = DownloadQueue(downloader: downloader, configuration: .init(maxConcurrentDownloads: 1))
let handles = throttled.map { queue.add(DownloadRequest(url: $0, destination: .directory(queueDirectory))) }
for handle in handles {
    let result = try await handle.result
    print("   finished \(result.fileURL.lastPathComponent) (\(result.size) bytes)")
}
let queueMax = server.stats.maxInFlight
let order = server.stats.requests.map { String($0.path.dropFirst("/bytes/".count).dropLast(".zip".count)) }
print("   at most \(queueMax) in flight, in the order given: \(order == names)")
try await server.shutdown()
check(loopMax == names.count && queueMax == 1 && order == names, "the loop ran all at once, the queue one at a time")
