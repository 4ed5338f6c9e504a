import Foundation
import Haul
import HaulOperations

/// The names downloads are shown by, by their number in the run's queue (a queue numbers downloads from 1 in the
/// order added, and `haul get` never adds one twice). A name is added as its request is read to run and removed
/// once a display has shown the download's end, so the book holds only downloads in flight.
final class NameBook: Sendable {
    private struct State {
        var added: UInt64 = 0
        var names: [UInt64: String] = [:]
    }

    private let state = Locked(State())

    /// Names the next download added to the queue.
    func add(_ name: String) {
        state.withLock { state in
            state.added += 1
            state.names[state.added] = name
        }
    }

    /// The name of `id` (its `#N` if unknown).
    func name(of id: DownloadID) -> String {
        state.withLock { $0.names[id.number] } ?? id.description
    }

    /// Forgets the name of a download that has ended.
    func remove(_ id: DownloadID) {
        _ = state.withLock { $0.names.removeValue(forKey: id.number) }
    }
}

/// The input read a second time, to run: each entry planned again (the first reading checked them all), given its
/// credentials and its directory, and named, as the queue has room for it.
struct PlannedRequests: AsyncSequence, Sendable {
    typealias Element = DownloadRequest

    let source: InputSource
    let planner: Planner
    let credentials: CredentialRule
    let directories: DestinationDirectories
    let names: NameBook

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(requests: self, reader: source.makeReader())
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        let requests: PlannedRequests
        var reader: InputSource.Reader

        mutating func next() async throws -> DownloadRequest? {
            while let item = try reader.next() {
                // A regular input file is read up to the size it had when checked, but it may have been changed in
                // place since: what no longer plans is reported and left out.
                let entry: InputEntry
                switch item {
                case .problem(let problem):
                    Console.err("haul: \(problem) (the input changed after it was checked; left out)\n")
                    continue
                case .entry(let next): entry = next
                }
                switch requests.planner.plan(entry) {
                case .failure(let failure):
                    for problem in failure.problems {
                        Console.err("haul: \(problem) (the input changed after it was checked; left out)\n")
                    }
                case .success(let planned):
                    var request = planned.request
                    requests.credentials.apply(to: &request)
                    if entry.subdirectory != nil, let problem = requests.directories.make(request) {
                        // Its download fails when it cannot make its partial file there, naming the path.
                        Console.err("haul: \(problem)\n")
                    }
                    requests.names.add(displayName(of: request))
                    return request
                }
            }
            return nil
        }
    }
}

/// A fixed list of requests, named (`haul demo`).
struct ListedRequests: AsyncSequence, Sendable {
    typealias Element = DownloadRequest

    let requests: [DownloadRequest]
    let names: NameBook

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(list: self) }

    struct AsyncIterator: AsyncIteratorProtocol {
        let list: ListedRequests
        var index = 0

        mutating func next() async -> DownloadRequest? {
            guard index < list.requests.count else { return nil }
            defer { index += 1 }
            list.names.add(displayName(of: list.requests[index]))
            return list.requests[index]
        }
    }
}
