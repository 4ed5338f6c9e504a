import Foundation
import HTTPTypes
import HaulTestSupport
import Testing

@testable import Haul

/// A transport that must never be reached: the transitions below run no download.
struct UnreachableTransport: HTTPTransport {
    struct Reached: Error {}
    func send(_ request: HTTPRequest, options: TransportOptions) async throws -> TransportResponse {
        throw Reached()
    }
}

/// The queue's transitions under its lock, driven without I/O: what an admission leads to is returned as actions
/// (``DownloadQueue/Admission``), carried out only after the lock, so no task is made and no waiter woken inside it.
@Suite("DownloadQueue transitions (no I/O)", .timeLimit(.minutes(1)))
struct DownloadQueueTransitionTests {
    static func queue(maxConcurrent: Int) -> DownloadQueue {
        DownloadQueue(
            downloader: Downloader(transport: UnreachableTransport(), configuration: testConfiguration()),
            configuration: .init(maxConcurrentDownloads: maxConcurrent))
    }

    static func request(_ name: String) -> DownloadRequest {
        DownloadRequest(
            url: SourceListTests.url("http://queue.invalid/\(name)"),
            destination: .file(URL(fileURLWithPath: "/nonexistent/haul-transitions/\(name)")))
    }

    @Test("an admission returns a start per admitted download and makes no task under the lock")
    func admissionReturnsStarts() {
        let queue = Self.queue(maxConcurrent: 2)
        let (admitted, tasks) = queue.state.withLock { state in
            for name in ["a", "b", "c"] { _ = queue.enqueue(Self.request(name), absentPath: nil, in: &state) }
            queue.admit(in: &state)
            defer { state.admitted = [] }
            return (state.admitted, state.entries.values.map { $0.task?.status.made != true })
        }
        let started: [UInt64] = admitted.compactMap { if case .start(let start) = $0 { start.id } else { nil } }
        #expect(started == [1, 2])
        #expect(tasks == [true, true, true], "a task was made under the lock")
        #expect(queue.state.withLock { ($0.scheduler.runningCount, $0.scheduler.waitingCount) } == (2, 1))
    }

    @Test("a download cancelled between its admission and its task's start: the task is cancelled as it is stored")
    func cancelledBeforeStart() async {
        let queue = Self.queue(maxConcurrent: 1)
        let (id, box, _) = queue.state.withLock { state in queue.enqueue(Self.request("a"), absentPath: nil, in: &state)
        }
        let admitted = queue.state.withLock { state in
            queue.admit(in: &state)
            defer { state.admitted = [] }
            return state.admitted
        }
        #expect(admitted.count == 1)
        // Admitted, its task not made yet: the cancellation is noted on the entry, and the same request added now
        // waits for this one's end.
        queue.cancel(id)
        let (noted, ending) = queue.state.withLock { state in
            (state.entries[id.rawValue]?.task?.status.cancelled, state.ending.values.map(\.outcome))
        }
        #expect(noted == true)
        #expect(ending.count == 1 && ending.first === box)
        let again = queue.state.withLock { state in queue.enqueue(Self.request("a"), absentPath: nil, in: &state) }
        #expect(again.0 != id)
        #expect(queue.state.withLock { $0.entries[again.0.rawValue]?.predecessor } === box)
        queue.carryOut(admitted)
        let outcome = await box.wait()
        guard case .failure(let error) = outcome else {
            Issue.record("the download cancelled before its start succeeded")
            return
        }
        #expect(error.isCancellation, "\(error)")
    }

    @Test("an extra connection's admission wakes its waiter after the lock, not in it")
    func connectionWakesAfterLock() {
        let queue = Self.queue(maxConcurrent: 2)
        let connection = ResultBox<Bool>()
        let admitted = queue.state.withLock { state in
            state.connections[DownloadQueue.State.connectionIDs | 1] = connection
            state.scheduler.enqueue(
                DownloadQueue.State.connectionIDs | 1, host: "http://queue.invalid:80", priority: 0, ahead: true)
            queue.admit(in: &state)
            defer { state.admitted = [] }
            return state.admitted
        }
        #expect(admitted.count == 1)
        #expect(connection.value == nil, "the waiter was woken under the lock")
        queue.carryOut(admitted)
        #expect(connection.value == true)
        #expect(queue.state.withLock { $0.runningConnections } == 1)
    }
}
