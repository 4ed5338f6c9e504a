import HaulTestSupport
import Testing

@testable import Haul

@Suite("AdmissionScheduler (no I/O)")
struct AdmissionSchedulerTests {
    @Test("the global limit: never more admitted than allowed; a finish frees one slot")
    func globalLimit() {
        var scheduler = AdmissionScheduler(maxConcurrent: 2)
        for id in 1...5 { scheduler.enqueue(UInt64(id), host: "h", priority: 0) }
        #expect(scheduler.admit() == [1, 2])
        #expect(scheduler.admit() == [])
        scheduler.finish(1)
        #expect(scheduler.admit() == [3])
        #expect(scheduler.runningCount == 2 && scheduler.waitingCount == 2)
    }

    @Test("an extra connection of a running download waits before every waiting download of its priority, FIFO")
    func extraConnectionsGoFirst() {
        var scheduler = AdmissionScheduler(maxConcurrent: 1, perHostLimit: 1)
        scheduler.enqueue(1, host: "a", priority: 0)
        #expect(scheduler.admit() == [1])
        scheduler.enqueue(2, host: "a", priority: 0)
        scheduler.enqueue(3, host: "b", priority: 0)
        scheduler.enqueue(10, host: "a", priority: 0, ahead: true)
        scheduler.enqueue(11, host: "b", priority: 0, ahead: true)
        scheduler.enqueue(4, host: "b", priority: 1)
        scheduler.finish(1)
        // A higher priority still comes first; then the extra connections in the order they asked, then downloads.
        #expect(scheduler.admit() == [4])
        scheduler.finish(4)
        #expect(scheduler.admit() == [10])
        scheduler.finish(10)
        #expect(scheduler.admit() == [11])
        scheduler.finish(11)
        #expect(scheduler.admit() == [2])
        scheduler.finish(2)
        #expect(scheduler.admit() == [3])
    }

    @Test("paused, the items ahead of the downloads are admitted as the limits allow; the downloads wait")
    func aheadWhilePaused() {
        var scheduler = AdmissionScheduler(maxConcurrent: 2, perHostLimit: 1)
        scheduler.enqueue(1, host: "a", priority: 0)
        #expect(scheduler.admit() == [1])
        scheduler.isPaused = true
        scheduler.enqueue(2, host: "b", priority: 1)
        scheduler.enqueue(10, host: "a", priority: 0, ahead: true)
        scheduler.enqueue(11, host: "b", priority: -1, ahead: true)
        // 10 waits for host a's slot; 11 takes b's, and the download 2 waits for the pause to end.
        #expect(scheduler.admit() == [11])
        scheduler.finish(1)
        #expect(scheduler.admit() == [10])
        #expect(scheduler.waitingCount == 1 && scheduler.runningCount == 2)
        scheduler.finish(11)
        scheduler.finish(10)
        #expect(scheduler.admit() == [])
        scheduler.isPaused = false
        #expect(scheduler.admit() == [2])
        scheduler.finish(2)
        #expect(scheduler.admit() == [] && scheduler.waitingCount == 0 && scheduler.hostCount == 0)
    }

    @Test("width 1 admits in submission order")
    func sequentialOrder() {
        var scheduler = AdmissionScheduler(maxConcurrent: 1)
        for id in 1...20 { scheduler.enqueue(UInt64(id), host: id.isMultiple(of: 2) ? "a" : "b", priority: 0) }
        var order: [UInt64] = []
        while case let admitted = scheduler.admit(), let id = admitted.first {
            #expect(admitted.count == 1)
            order.append(id)
            scheduler.finish(id)
        }
        #expect(order == Array(1...20))
    }

    @Test("higher priority first, FIFO within one priority, across hosts")
    func priorities() {
        var scheduler = AdmissionScheduler(maxConcurrent: 1)
        scheduler.isPaused = true
        scheduler.enqueue(1, host: "a", priority: 0)
        scheduler.enqueue(2, host: "b", priority: 0)
        scheduler.enqueue(3, host: "b", priority: 5)
        scheduler.enqueue(4, host: "a", priority: 5)
        scheduler.enqueue(5, host: "a", priority: -1)
        #expect(scheduler.admit() == [])  // paused
        scheduler.isPaused = false
        let order = admitOneAtATime(&scheduler)
        #expect(order == [3, 4, 1, 2, 5])
    }

    @Test("the per-host limit holds a host's downloads while other hosts go ahead")
    func perHostLimit() {
        var scheduler = AdmissionScheduler(maxConcurrent: 4, perHostLimit: 1)
        scheduler.enqueue(1, host: "a", priority: 0)
        scheduler.enqueue(2, host: "a", priority: 0)
        scheduler.enqueue(3, host: "a", priority: 0)
        scheduler.enqueue(4, host: "b", priority: 0)
        #expect(scheduler.admit() == [1, 4])
        scheduler.finish(4)
        #expect(scheduler.admit() == [])  // "a" is full, "b" has nothing
        scheduler.finish(1)
        #expect(scheduler.admit() == [2])
        scheduler.perHostLimit = 2  // raised at run time: "a" gets a second slot at once
        #expect(scheduler.admit() == [3])
    }

    @Test("changing a waiting item's priority moves it; removing one skips it; raising the limit admits more")
    func runtimeChanges() {
        var scheduler = AdmissionScheduler(maxConcurrent: 1)
        for id in 1...4 { scheduler.enqueue(UInt64(id), host: "h", priority: 0) }
        #expect(scheduler.admit() == [1])
        let moved = scheduler.setPriority(9, of: 4)
        let removed = scheduler.remove(2)
        let removedRunning = scheduler.remove(1)  // running, not waiting
        let reprioritisedRunning = scheduler.setPriority(3, of: 1)
        #expect(moved && removed && !removedRunning && !reprioritisedRunning)
        scheduler.maxConcurrent = 3
        #expect(scheduler.admit() == [4, 3])
        #expect(scheduler.waitingCount == 0)
    }

    @Test("a lowered priority goes behind the others of its new level")
    func loweredPriority() {
        var scheduler = AdmissionScheduler(maxConcurrent: 1)
        scheduler.isPaused = true
        scheduler.enqueue(1, host: "h", priority: 5)
        scheduler.enqueue(2, host: "h", priority: 5)
        scheduler.enqueue(3, host: "h", priority: 0)
        scheduler.setPriority(0, of: 1)
        scheduler.isPaused = false
        let order = admitOneAtATime(&scheduler)
        #expect(order == [2, 3, 1])
    }

    @Test("the host heap holds about one entry per host, however many downloads wait (O(1) admission)")
    func heapStaysSmall() {
        var scheduler = AdmissionScheduler(maxConcurrent: 8, perHostLimit: 2)
        for id in 0..<10_000 { scheduler.enqueue(UInt64(id), host: "h\(id % 4)", priority: id % 3) }
        #expect(scheduler.candidateCount <= 4 * 3)  // at most a push per host per priority level seen first
        var running = scheduler.admit()
        var admitted = running.count
        while let id = running.first {
            running.removeFirst()
            scheduler.finish(id)
            let more = scheduler.admit()
            admitted += more.count
            running += more
            #expect(scheduler.candidateCount <= 8)
        }
        #expect(admitted == 10_000)
    }

    @Test("hosts with nothing left are forgotten; re-enqueueing after many cycles still works")
    func manyCycles() {
        var scheduler = AdmissionScheduler(maxConcurrent: 3, perHostLimit: 2)
        var admittedTotal = 0
        for round in 0..<100 {
            for index in 0..<6 { scheduler.enqueue(UInt64(round * 6 + index), host: "h\(index % 3)", priority: 0) }
            while case let admitted = scheduler.admit(), !admitted.isEmpty {
                #expect(admitted.count <= 3)
                admittedTotal += admitted.count
                for id in admitted { scheduler.finish(id) }
            }
        }
        #expect(scheduler.waitingCount == 0 && scheduler.runningCount == 0)
        #expect(scheduler.hostCount == 0)
        #expect(admittedTotal == 600)
    }

    @Test("a forgotten host's number, reused by another host, does not let a stale heap entry admit anything")
    func reusedHostNumber() {
        var scheduler = AdmissionScheduler(maxConcurrent: 1)
        scheduler.enqueue(1, host: "a", priority: 5)
        scheduler.remove(1)  // host "a" forgotten; its heap entry (priority 5) stays, stale
        #expect(scheduler.hostCount == 0)
        scheduler.enqueue(2, host: "b", priority: 0)  // takes "a"'s number
        scheduler.enqueue(4, host: "c", priority: 3)
        scheduler.enqueue(3, host: "b", priority: 0)
        #expect(scheduler.hostCount == 2)
        // Taken for "b"'s, the stale entry would let 2 go before 4, whose priority is higher.
        #expect(admitOneAtATime(&scheduler) == [4, 2, 3])
        #expect(scheduler.hostCount == 0)
    }

    @Test("cancelling a host's first waiting download does not strand the rest of that host")
    func removingTheHeadOffersTheNext() {
        var scheduler = AdmissionScheduler(maxConcurrent: 1)
        scheduler.isPaused = true
        scheduler.enqueue(1, host: "a", priority: 0)
        scheduler.enqueue(2, host: "a", priority: 0)
        scheduler.remove(1)
        scheduler.isPaused = false
        #expect(scheduler.admit() == [2])

        // Width 1 over an interleaved batch on two hosts: cancelling one waiting download of "b".
        var interleaved = AdmissionScheduler(maxConcurrent: 1)
        for id in 1...6 { interleaved.enqueue(UInt64(id), host: id.isMultiple(of: 2) ? "b" : "a", priority: 0) }
        #expect(interleaved.admit() == [1])
        interleaved.remove(2)
        #expect(admitOneAtATime(&interleaved, finishing: [1]) == [3, 4, 5, 6])
    }

    @Test("random adds, cancels, priority changes, limits and pauses agree with a reference model", arguments: 0..<40)
    func agreesWithModel(seed: UInt64) {
        var random = SplitMix(seed: seed)
        var scheduler = AdmissionScheduler(maxConcurrent: 2, perHostLimit: 1)
        var model = ReferenceScheduler(maxConcurrent: 2, perHostLimit: 1)
        var nextID: UInt64 = 0
        for step in 0..<400 {
            switch random.next(below: 10) {
            case 0, 1, 2:
                nextID += 1
                let host = ["a", "b", "c"][random.next(below: 3)]
                let priority = random.next(below: 3) - 1
                // One in five is an extra connection or a move of a running download.
                let ahead = random.next(below: 5) == 0
                scheduler.enqueue(nextID, host: host, priority: priority, ahead: ahead)
                model.enqueue(nextID, host: host, priority: priority, ahead: ahead)
            case 3:
                if let id = model.waiting.randomElement(using: &random)?.id {
                    let removed = scheduler.remove(id)
                    #expect(removed)
                    model.remove(id)
                }
            case 4:
                if let id = model.waiting.filter({ !$0.ahead }).randomElement(using: &random)?.id {
                    let priority = random.next(below: 3) - 1
                    let changed = scheduler.setPriority(priority, of: id)
                    #expect(changed)
                    model.setPriority(priority, of: id)
                }
            case 5, 6:
                if let id = model.running.keys.sorted().randomElement(using: &random) {
                    scheduler.finish(id)
                    model.finish(id)
                }
            case 7:
                let paused = random.next(below: 4) == 0
                scheduler.isPaused = paused
                model.isPaused = paused
            case 8:
                let limit = 1 + random.next(below: 3)
                scheduler.maxConcurrent = limit
                model.maxConcurrent = limit
            default:
                let limit = random.next(below: 3) == 0 ? nil : 1 + random.next(below: 2)
                scheduler.perHostLimit = limit
                model.perHostLimit = limit
            }
            let admitted = scheduler.admit()
            let expected = model.admit()
            #expect(admitted == expected, "seed \(seed), step \(step)")
            if admitted != expected { return }  // one divergence is enough to report
            #expect(scheduler.waitingCount == model.waiting.count && scheduler.runningCount == model.running.count)
            // Nothing waits while it could run.
            var again = model
            let leftover = again.admit()
            #expect(leftover.isEmpty, "seed \(seed), step \(step)")
        }
    }
}

/// Finishes `finishing`, then admits and finishes one item at a time until nothing is left; returns the admission order.
private func admitOneAtATime(_ scheduler: inout AdmissionScheduler, finishing: [UInt64] = []) -> [UInt64] {
    for id in finishing { scheduler.finish(id) }
    var order: [UInt64] = []
    while let id = scheduler.admit().first {
        order.append(id)
        scheduler.finish(id)
    }
    return order
}

/// The scheduler's rules, written the plain way: a list scanned on every admission.
private struct ReferenceScheduler {
    struct Item {
        var id: UInt64
        var host: String
        var priority: Int
        var sequence: Int
        /// Waits before every download of its priority, and is admitted while paused.
        var ahead: Bool
    }

    var maxConcurrent: Int
    var perHostLimit: Int?
    var isPaused = false
    var waiting: [Item] = []
    var running: [UInt64: String] = [:]
    var sequence = 0

    init(maxConcurrent: Int, perHostLimit: Int?) {
        self.maxConcurrent = maxConcurrent
        self.perHostLimit = perHostLimit
    }

    mutating func enqueue(_ id: UInt64, host: String, priority: Int, ahead: Bool = false) {
        sequence += 1
        waiting.append(Item(id: id, host: host, priority: priority, sequence: sequence, ahead: ahead))
    }

    mutating func remove(_ id: UInt64) { waiting.removeAll { $0.id == id } }

    mutating func setPriority(_ priority: Int, of id: UInt64) {
        guard let index = waiting.firstIndex(where: { $0.id == id }), waiting[index].priority != priority else {
            return
        }
        sequence += 1
        waiting[index].priority = priority
        waiting[index].sequence = sequence
    }

    mutating func finish(_ id: UInt64) { running[id] = nil }

    mutating func admit() -> [UInt64] {
        var admitted: [UInt64] = []
        // Paused, only the items ahead of the downloads are admitted (they belong to running downloads).
        while running.count < maxConcurrent {
            let eligible = waiting.indices.filter { index in
                (!isPaused || waiting[index].ahead)
                    && running.values.filter { $0 == waiting[index].host }.count < (perHostLimit ?? .max)
            }
            func key(_ index: Int) -> (Int, Int, Int) {
                (waiting[index].priority, waiting[index].ahead ? 1 : 0, -waiting[index].sequence)
            }
            guard let best = eligible.max(by: { key($0) < key($1) }) else { break }
            let item = waiting.remove(at: best)
            running[item.id] = item.host
            admitted.append(item.id)
        }
        return admitted
    }
}

/// Moving a running download to another host's slot (a download that goes on from a mirror).
@Suite("Admission scheduler: moves (no I/O)")
struct AdmissionSchedulerMoveTests {
    @Test("a move to a host with a free slot keeps the global slot and frees the old host's")
    func moveWithFreeSlot() {
        var scheduler = AdmissionScheduler(maxConcurrent: 2, perHostLimit: 1)
        scheduler.enqueue(1, host: "a", priority: 0)
        scheduler.enqueue(2, host: "a", priority: 0)
        #expect(scheduler.admit() == [1])
        let moved = scheduler.move(1, to: "b")
        #expect(moved)
        #expect(scheduler.host(of: 1) == "b")
        // Host a's slot is free again: the second download starts.
        #expect(scheduler.admit() == [2])
        #expect(scheduler.runningCount == 2)
    }

    @Test("a move to a host without a free slot changes nothing; finish and a new item ahead wait for it")
    func moveWithoutFreeSlot() {
        var scheduler = AdmissionScheduler(maxConcurrent: 1, perHostLimit: 1)
        scheduler.enqueue(1, host: "a", priority: 0)
        #expect(scheduler.admit() == [1])
        scheduler.enqueue(2, host: "b", priority: 0)
        // The global slot is taken: nothing else starts, and host b has none running, so the move succeeds.
        let moved = scheduler.move(1, to: "b")
        #expect(moved)
        #expect(scheduler.host(of: 1) == "b")
        #expect(scheduler.admit() == [])

        var busy = AdmissionScheduler(maxConcurrent: 4, perHostLimit: 1)
        busy.enqueue(1, host: "a", priority: 0)
        busy.enqueue(2, host: "b", priority: 0)
        #expect(busy.admit() == [1, 2])
        let movedToBusy = busy.move(1, to: "b")
        #expect(!movedToBusy)
        #expect(busy.host(of: 1) == "a")
        // The caller gives the slot back and waits ahead at host b: it starts when b's download ends, before a
        // download added to b earlier.
        busy.enqueue(3, host: "b", priority: 0)
        busy.finish(1)
        busy.enqueue(10, host: "b", priority: 0, ahead: true)
        #expect(busy.admit() == [])
        busy.finish(2)
        #expect(busy.admit() == [10])
    }

    /// Admits one at a time (each finishing at once) until nothing more starts; the order admitted.
    private func drain(_ scheduler: inout AdmissionScheduler) -> [UInt64] {
        var order: [UInt64] = []
        while case let admitted = scheduler.admit(), !admitted.isEmpty {
            order += admitted
            for id in admitted { scheduler.finish(id) }
        }
        return order
    }

    @Test("a paused item keeps its place and is never admitted; resumed, it goes from that place")
    func pauseKeepsPlace() {
        var scheduler = AdmissionScheduler(maxConcurrent: 1)
        scheduler.isPaused = true
        for id in 1...4 { scheduler.enqueue(UInt64(id), host: id.isMultiple(of: 2) ? "a" : "b", priority: 0) }
        #expect(scheduler.pause(2) && scheduler.pause(2))  // pausing twice is no error
        #expect(scheduler.isPaused(2) && scheduler.isWaiting(2) && scheduler.pausedCount == 1)
        #expect(scheduler.waitingCount == 4 && scheduler.waitingOrder() == [1, 2, 3, 4])
        #expect(scheduler.position(of: 2) == 1 && scheduler.position(of: 4) == 3)
        scheduler.isPaused = false
        #expect(drain(&scheduler) == [1, 3, 4])
        #expect(scheduler.waitingCount == 1 && scheduler.waitingOrder() == [2])
        // Its host had nothing else: it was forgotten, and comes back with the item.
        #expect(scheduler.hostCount == 0)
        #expect(scheduler.unpause(2) && !scheduler.unpause(2))
        #expect(drain(&scheduler) == [2] && scheduler.waitingCount == 0)
    }

    @Test("resumed before the items behind it have started, a paused item starts before them")
    func resumedBeforeOthers() {
        var scheduler = AdmissionScheduler(maxConcurrent: 1, perHostLimit: 1)
        scheduler.isPaused = true
        for id in 1...3 { scheduler.enqueue(UInt64(id), host: "a", priority: 0) }
        scheduler.pause(1)
        scheduler.isPaused = false
        #expect(scheduler.admit() == [2])
        scheduler.unpause(1)
        scheduler.finish(2)
        #expect(drain(&scheduler) == [1, 3])
    }

    @Test("a running item paused goes back to the front of its priority, behind the extra connections")
    func enqueueAtFront() {
        var scheduler = AdmissionScheduler(maxConcurrent: 1)
        scheduler.enqueue(1, host: "a", priority: 0)
        #expect(scheduler.admit() == [1])
        scheduler.enqueue(2, host: "a", priority: 0)
        scheduler.enqueue(3, host: "b", priority: 5)
        scheduler.finish(1)
        scheduler.enqueueAtFront(1, host: "a", priority: 0, paused: true)
        #expect(scheduler.waitingOrder() == [3, 1, 2] && scheduler.position(of: 1) == 1)
        scheduler.isPaused = true
        scheduler.unpause(1)
        scheduler.enqueue(10, host: "a", priority: 0, ahead: true)
        scheduler.isPaused = false
        // The higher priority first, then the extra connection, then the download back at the front, then the rest.
        #expect(drain(&scheduler) == [3, 10, 1, 2])
        // Waiting, not paused: admitted at once.
        scheduler.enqueue(4, host: "a", priority: 0)
        #expect(scheduler.admit() == [4])
        scheduler.enqueue(5, host: "a", priority: 0)
        scheduler.finish(4)
        scheduler.isPaused = true
        scheduler.enqueueAtFront(4, host: "a", priority: 0, paused: false)
        scheduler.isPaused = false
        #expect(drain(&scheduler) == [4, 5])
    }

    @Test("moving an item in the waiting order: among its own priority, clamped, admitted in the new order")
    func reposition() {
        var scheduler = AdmissionScheduler(maxConcurrent: 1)
        scheduler.isPaused = true
        for id in 1...5 { scheduler.enqueue(UInt64(id), host: ["a", "b", "c"][id % 3], priority: 0) }
        scheduler.enqueue(9, host: "a", priority: 1)
        #expect(scheduler.waitingOrder() == [9, 1, 2, 3, 4, 5])
        #expect(scheduler.reposition(5, to: 1) == 1)
        #expect(scheduler.waitingOrder() == [9, 5, 1, 2, 3, 4])
        // Before its priority's first place: first among them, not ahead of the higher priority.
        #expect(scheduler.reposition(3, to: 0) == 1)
        #expect(scheduler.reposition(1, to: 100) == 5)
        #expect(scheduler.waitingOrder() == [9, 3, 5, 2, 4, 1])
        scheduler.pause(2)
        #expect(scheduler.reposition(2, to: 1) == 1)  // a paused item moves too
        #expect(scheduler.waitingOrder() == [9, 2, 3, 5, 4, 1])
        #expect(scheduler.reposition(42, to: 0) == nil)
        scheduler.isPaused = false
        #expect(drain(&scheduler) == [9, 3, 5, 4, 1])
        #expect(scheduler.waitingOrder() == [2])
    }

    @Test("moving under a per-host limit: the heap's old entries for a host are skipped, nothing admitted twice")
    func repositionWithLimits() {
        var scheduler = AdmissionScheduler(maxConcurrent: 2, perHostLimit: 1)
        for id in 1...6 { scheduler.enqueue(UInt64(id), host: id <= 3 ? "a" : "b", priority: 0) }
        #expect(scheduler.admit() == [1, 4])
        #expect(scheduler.reposition(3, to: 0) == 0 && scheduler.reposition(6, to: 0) == 0)
        #expect(scheduler.waitingOrder() == [6, 3, 2, 5])
        scheduler.finish(1)
        scheduler.finish(4)
        #expect(scheduler.admit() == [6, 3])
        scheduler.finish(6)
        scheduler.finish(3)
        #expect(scheduler.admit() == [2, 5])
        #expect(scheduler.waitingCount == 0 && scheduler.candidateCount <= 2)
    }

    @Test("a paused item is removed by a cancellation, and a priority change keeps it paused")
    func pausedRemoveAndPriority() {
        var scheduler = AdmissionScheduler(maxConcurrent: 1)
        scheduler.isPaused = true
        for id in 1...3 { scheduler.enqueue(UInt64(id), host: "a", priority: 0) }
        scheduler.pause(1)
        #expect(scheduler.setPriority(5, of: 1) && scheduler.isPaused(1))
        #expect(scheduler.waitingOrder() == [1, 2, 3])
        #expect(scheduler.remove(1) && !scheduler.isWaiting(1) && scheduler.waitingCount == 2)
        scheduler.isPaused = false
        #expect(drain(&scheduler) == [2, 3])
    }

    @Test("a host's own limit: 0 holds it back, a number lets that many run, nil returns it to the per-host limit")
    func hostLimits() {
        var scheduler = AdmissionScheduler(maxConcurrent: 10, perHostLimit: 3)
        scheduler.setLimit(0, forHost: "a")
        for id in 1...4 { scheduler.enqueue(UInt64(id), host: "a", priority: 0) }
        for id in 5...6 { scheduler.enqueue(UInt64(id), host: "b", priority: 0) }
        #expect(scheduler.admit() == [5, 6])
        #expect(
            scheduler.hostLoads() == [
                .init(host: "a", running: 0, waiting: 4, limit: 0),
                .init(host: "b", running: 2, waiting: 0, limit: nil),
            ])
        scheduler.setLimit(1, forHost: "a")
        #expect(scheduler.admit() == [1])
        #expect(scheduler.admit() == [])
        scheduler.setLimit(nil, forHost: "a")
        #expect(scheduler.admit() == [2, 3])
        scheduler.finish(1)
        #expect(scheduler.admit() == [4])
        #expect(scheduler.hostLoads().map(\.running) == [3, 2])
    }
}
