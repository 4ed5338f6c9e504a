import Foundation
import Haul
import HaulOperations
import HaulTestSupport
import Testing

#if canImport(Combine)
import Combine
#else
import OpenCombine
#endif

/// Records what a sink receives; the completion reads "finished" or "failure(STATUS or CODE)".
final class Recorder<Value: Sendable>: Sendable {
    private let received = Locked<[Value]>([])
    let completion = Gate<String>()
    var values: [Value] { received.withLock { $0 } }

    func receive(_ value: Value) { received.withLock { $0.append(value) } }

    func complete(_ result: Subscribers.Completion<DownloadError>) {
        switch result {
        case .finished: completion.open(with: "finished")
        case .failure(let error): completion.open(with: "failure(\(error.status.map(String.init) ?? "\(error.code)"))")
        }
    }

    func complete(_ result: Subscribers.Completion<Never>) { completion.open(with: "finished") }
}

/// A subscriber that asks for nothing until the test says so.
final class ManualSubscriber: Subscriber, @unchecked Sendable {
    // unchecked Sendable: mutable state is behind locks.
    typealias Input = DownloadResult
    typealias Failure = DownloadError

    private let subscription = Locked<(any Subscription)?>(nil)
    private let count = Locked(0)
    let completion = Gate<String>()

    var hasSubscription: Bool { subscription.withLock { $0 != nil } }
    var values: Int { count.withLock { $0 } }

    func demand(_ demand: Subscribers.Demand) { subscription.withLock { $0 }?.request(demand) }

    func receive(subscription: any Subscription) { self.subscription.withLock { $0 = subscription } }

    func receive(_ input: DownloadResult) -> Subscribers.Demand {
        count.withLock { $0 += 1 }
        return .none
    }

    func receive(completion: Subscribers.Completion<DownloadError>) {
        if case .finished = completion {
            self.completion.open(with: "finished")
        } else {
            self.completion.open(with: "failure")
        }
    }
}
