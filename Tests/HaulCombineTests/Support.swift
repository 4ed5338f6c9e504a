import Foundation
import Haul
import HaulOperations
import Testing

#if canImport(Combine)
import Combine
#else
import OpenCombine
#endif

/// A value set once that tests await.
final class Completion: Sendable {
    private let state = Locked<(value: String?, waiters: [CheckedContinuation<String, Never>])>((nil, []))

    var value: String? { state.withLock { $0.value } }

    func set(_ value: String) {
        let waiters = state.withLock { state -> [CheckedContinuation<String, Never>] in
            guard state.value == nil else { return [] }
            state.value = value
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: value) }
    }

    func wait() async -> String {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> String? in
                if let value = state.value { return value }
                state.waiters.append(continuation)
                return nil
            }
            if let now { continuation.resume(returning: now) }
        }
    }
}

/// Records what a sink receives; the completion reads "finished" or "failure(STATUS or CODE)".
final class Recorder<Value: Sendable>: Sendable {
    private let received = Locked<[Value]>([])
    let completion = Completion()
    var values: [Value] { received.withLock { $0 } }

    func receive(_ value: Value) { received.withLock { $0.append(value) } }

    func complete(_ result: Subscribers.Completion<DownloadError>) {
        switch result {
        case .finished: completion.set("finished")
        case .failure(let error): completion.set("failure(\(error.status.map(String.init) ?? "\(error.code)"))")
        }
    }

    func complete(_ result: Subscribers.Completion<Never>) { completion.set("finished") }
}

/// A subscriber that asks for nothing until the test says so.
final class ManualSubscriber: Subscriber, @unchecked Sendable {
    // unchecked Sendable: mutable state is behind locks.
    typealias Input = DownloadResult
    typealias Failure = DownloadError

    private let subscription = Locked<(any Subscription)?>(nil)
    private let count = Locked(0)
    let completion = Completion()

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
            self.completion.set("finished")
        } else {
            self.completion.set("failure")
        }
    }
}
