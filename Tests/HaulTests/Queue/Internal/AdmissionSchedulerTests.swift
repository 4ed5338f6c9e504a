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
}

/// Admits and finishes one item at a time until nothing is left; returns the admission order.
private func admitOneAtATime(_ scheduler: inout AdmissionScheduler) -> [UInt64] {
    var order: [UInt64] = []
    while let id = scheduler.admit().first {
        order.append(id)
        scheduler.finish(id)
    }
    return order
}
