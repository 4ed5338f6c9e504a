// Combine (OpenCombine on Linux): downloadsPublisher with maxConcurrent stops at the first failure and cancels
// the rest; mapping each error into a value keeps going and reports every outcome.
import ExampleSupport
import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulCombine
import HaulTestServer

#if canImport(Combine)
import Combine
#else
import OpenCombine
#endif

let server = try await startExampleServer()
let queue = DownloadQueue(downloader: Downloader(transport: AsyncHTTPClientTransport.shared))
var urls = (1...6).map { server.url(path: "/bytes/photo\($0).jpg", query: ["size": "150000", "rate": "3000000"]) }
urls[3] = server.url(path: "/photo4.jpg", query: ["status": "404"])

/// Runs `publisher` to completion, printing what arrives; returns the values and how it ended.
func collect<Value: Sendable>(_ publisher: AnyPublisher<Value, DownloadError>) async -> ([Value], String) {
    let values = Locked<[Value]>([])
    // The subscription lives as long as this holds it: it must outlive the continuation's closure.
    let keep = Locked<AnyCancellable?>(nil)
    let ended = await withCheckedContinuation { continuation in
        let cancellable = publisher.sink { completion in
            switch completion {
            case .finished: continuation.resume(returning: "finished")
            case .failure(let error): continuation.resume(returning: "failed: \(error.message)")
            }
        } receiveValue: { value in
            values.withLock { $0.append(value) }
        }
        keep.withLock { $0 = cancellable }
    }
    keep.withLock { $0 = nil }
    return (values.withLock { $0 }, ended)
}

print("1. downloadsPublisher(maxConcurrent: 2), stopping at the first failure:")
let stopDirectory = try makeExampleDirectory("combine-stop")
let (stopped, stopEnd) = await collect(queue.downloadsPublisher(for: urls, into: stopDirectory, maxConcurrent: 2))
print("   \(stopped.count) published, then \(stopEnd)")
await queue.waitUntilIdle()
let stopMax = server.stats.maxInFlight

print("2. the same with each error mapped into a value, keeping going:")
let keepDirectory = try makeExampleDirectory("combine-keep")
let keepGoing = urls.publisher
    // @Sendable: top-level code is main-actor isolated, and downloads complete on other threads.
    .flatMap(maxPublishers: .max(2)) { @Sendable url in
        queue.publisher(for: DownloadRequest(url: url, destination: .directory(keepDirectory)))
            .map { "ok \($0.fileURL.lastPathComponent)" }
            .replaceError(with: "failed \(url.lastPathComponent)")
            .setFailureType(to: DownloadError.self)
    }
    .eraseToAnyPublisher()
let (outcomes, keepEnd) = await collect(keepGoing)
for outcome in outcomes.sorted() { print("   \(outcome)") }
let kept = try FileManager.default.contentsOfDirectory(atPath: keepDirectory.path).count
try await server.shutdown()
check(
    stopEnd.hasPrefix("failed") && stopMax <= 2 && keepEnd == "finished" && outcomes.count == 6 && kept == 5,
    "stop at the first failure, or keep going with replaceError")
