import CoreMetrics
import Foundation
import Haul
import HaulOperations

/// The requests a worker runs, claimed from the database as they are read: the download queue reads one when it
/// has room, so a claim asks for the free slots plus ``SharedQueueWorker/Configuration/claimAhead`` (one statement
/// serves several downloads), and the rest wait here, a few milliseconds, until read.
///
/// Ends when the run's task is cancelled, when the lease is lost, or (with
/// ``SharedQueueWorker/Configuration/exitsWhenEmpty``) once nothing in the queue is waiting or running anywhere and
/// every end of this worker is recorded.
struct ClaimFeed: AsyncSequence, Sendable {
    let run: WorkerRun

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(run: run) }

    struct AsyncIterator: AsyncIteratorProtocol {
        let run: WorkerRun
        /// Claims in a row that found nothing while work was claimable.
        var crowded = 0

        mutating func next() async -> DownloadRequest? {
            let configuration = run.configuration
            while true {
                enum Step {
                    case stop
                    case hand(Claim)
                    case claim(Int)
                }
                let step = run.state.withLock { state -> Step in
                    if state.phase != .running || Task.isCancelled { return .stop }
                    if !state.buffered.isEmpty {
                        let claim = state.buffered.removeFirst()
                        state.held[claim.path(in: configuration.directory)] = claim
                        return .hand(claim)
                    }
                    return .claim(
                        Swift.max(1, configuration.maxConcurrent - state.held.count) + configuration.claimAhead)
                }
                switch step {
                case .stop:
                    return nil
                case .hand(let claim):
                    if let problem = run.makeDirectories(for: claim.path) {
                        run.refuse(claim, because: problem)
                        continue
                    }
                    var request = claim.request(in: configuration.directory)
                    if let credentials = configuration.credentials { request.credentials = credentials }
                    run.started(claim)
                    return request
                case .claim(let limit):
                    do {
                        let asked = ContinuousClock.now
                        let claims = try await run.queue.claim(worker: run.id, limit: limit)
                        if let metrics = run.worker.metrics {
                            metrics.claimLatency.recordNanoseconds(
                                Int64((ContinuousClock.now - asked) / .nanoseconds(1)))
                            metrics.claims.increment(by: claims.count)
                        }
                        run.reachable()
                        if !claims.isEmpty {
                            crowded = 0
                            run.state.withLock { $0.buffered.append(contentsOf: claims) }
                            run.worker.emit(.claimed(count: claims.count))
                            continue
                        }
                        if configuration.exitsWhenEmpty, try await isDone() { return nil }
                        // Hosts skipped because another worker's claim held them: try again in a moment (a few
                        // times; then the poll interval, or a wake-up, as when nothing is ready).
                        if crowded < 8, try await run.queue.hasClaimableWork() {
                            crowded += 1
                            try? await Task.sleep(for: .milliseconds(Int.random(in: 2...20)))
                            continue
                        }
                        // A host that waits only for its turn (a per-host rate) is claimed from at that turn, not at
                        // the next poll: N starts a second reach N, whatever the poll interval.
                        crowded = 0
                        let turn = try await run.queue.nextHostTurn()
                        await run.feedWake.wait(
                            upTo: Swift.min(turn ?? configuration.pollInterval, configuration.pollInterval))
                        continue
                    } catch {
                        run.unreachable(error)
                    }
                    crowded = 0
                    await run.feedWake.wait(upTo: configuration.pollInterval)
                }
            }
        }

        /// Whether this worker holds nothing, has recorded every end, and the queue has nothing waiting or running.
        private func isDone() async throws -> Bool {
            let idle = run.state.withLock { $0.held.isEmpty && $0.completions.isEmpty }
            guard idle else { return false }
            return try await !run.queue.hasUnfinishedWork()
        }
    }
}

extension Claim {
    /// The file's path under `directory`.
    func path(in directory: URL) -> String {
        directory.appendingPathComponent(path, isDirectory: false).path
    }

    /// The request, writing under `directory`, with the connections the claim counted.
    func request(in directory: URL) -> DownloadRequest {
        var request = request
        request.destination = .file(directory.appendingPathComponent(path, isDirectory: false))
        request.maxConnections = connections
        return request
    }
}
