import Foundation
import HaulOperations
import HaulTestSupport
import Testing

@testable import HaulSQLite

/// Group commit: who writes, what goes into one write, who is woken; the bookkeeping without I/O, then the real
/// thing with a write held at a gate, and callers on threads and in tasks at once.
@Suite("Group commit", .timeLimit(.minutes(1)))
struct GroupCommitTests {
    typealias Machine = GroupCommit<String>.Machine<String>

    /// The machine behind a reference, so that its mutating steps can be asserted on in place.
    final class MachineBox {
        private var machine = Machine()
        func queue(_ changes: [String]) -> UInt64 { machine.queue(changes) }
        func next(for batch: UInt64) -> Machine.Next { machine.next(for: batch) }
        func wait(_ batch: UInt64, _ waker: String, blocksThread: Bool) -> Bool {
            machine.wait(batch, waker, blocksThread: blocksThread)
        }
        func written(_ number: UInt64) -> [String] { machine.written(number) }
        var waiting: Int { machine.waiting }
    }

    @Test("the first caller writes at once; callers during a write wait for the next one, which takes them all")
    func machine() {
        let machine = MachineBox()
        let first = machine.queue(["a"])
        #expect(machine.next(for: first) == .write(["a"], number: 1))
        let second = machine.queue(["b"])
        let third = machine.queue(["c", "d"])
        #expect(second == 2 && third == 2)
        #expect(machine.next(for: second) == .wait)
        #expect(machine.wait(second, "second", blocksThread: false))
        #expect(machine.wait(third, "third", blocksThread: false))
        // The write ends: nobody waited for batch 1; one waiter of batch 2 is woken to write it.
        #expect(machine.written(1) == ["second"])
        #expect(machine.waiting == 1)
        #expect(machine.next(for: first) == .done)
        #expect(machine.next(for: second) == .write(["b", "c", "d"], number: 2))
        // Batch 2 being written: a new caller's changes are batch 3.
        let fourth = machine.queue(["e"])
        #expect(fourth == 3)
        #expect(machine.wait(fourth, "fourth", blocksThread: false))
        // Batch 2 written: its waiter is woken as served, and the fourth to write batch 3.
        #expect(machine.written(2) == ["third", "fourth"])
        #expect(machine.next(for: third) == .done)
        #expect(machine.next(for: fourth) == .write(["e"], number: 3))
        #expect(machine.written(3) == [])
    }

    @Test("the next writer is a blocked thread when there is one; a caller arriving with no write under way writes")
    func whoWritesNext() {
        let machine = MachineBox()
        let first = machine.queue(["a"])
        _ = machine.next(for: first)
        let task = machine.queue(["b"])
        #expect(machine.wait(task, "task", blocksThread: false))
        let thread = machine.queue(["c"])
        #expect(machine.wait(thread, "thread", blocksThread: true))
        #expect(machine.written(1) == ["thread"])
        // Before the woken thread asks, a new caller finds no write under way: it writes everything queued.
        let newcomer = machine.queue(["d"])
        #expect(machine.next(for: newcomer) == .write(["b", "c", "d"], number: 2))
        #expect(machine.next(for: thread) == .wait)
        #expect(machine.wait(thread, "thread", blocksThread: true))
        #expect(Set(machine.written(2)) == ["task", "thread"])
        #expect(machine.next(for: task) == .done)
        // A waiter that registers after the write it waited for ended asks again at once.
        let late = machine.queue(["e"])
        #expect(!machine.wait(late, "late", blocksThread: true))
    }

    @Test("changes queued during a held write go into the next write together, in order; each caller returns after")
    func groups() async throws {
        let (entered, gate) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        let writes = Locked<[[Int]]>([])
        let commit = GroupCommit<Int> { changes in
            if changes == [0] {
                entered.signal()
                gate.wait()
            }
            writes.withLock { $0.append(changes) }
        }
        let first = Task { await commit.commit([0]) }
        // The waits block a thread of their own, not one of the few that run every test's tasks.
        try await onOwnThread { entered.wait() }
        // Threads and tasks queue behind the held write.
        let threads = (1...4).map { index in
            let thread = Thread { commit.write([index * 10, index * 10 + 1]) }
            thread.start()
            return thread
        }
        let tasks = (5...8).map { index in Task { await commit.commit([index * 10]) } }
        while commit.waiting < 8 { try await Task.sleep(for: .milliseconds(1)) }
        gate.signal()
        await first.value
        for task in tasks { await task.value }
        while threads.contains(where: { !$0.isFinished }) { try await Task.sleep(for: .milliseconds(1)) }
        let batches = writes.withLock { $0 }
        #expect(batches.count == 2, "\(batches)")
        #expect(batches.first == [0])
        let grouped = batches.dropFirst().flatMap { $0 }
        #expect(Set(grouped) == Set([10, 11, 20, 21, 30, 31, 40, 41, 50, 60, 70, 80]))
        // One caller's changes stay together and in order.
        for index in 1...4 {
            let at = grouped.firstIndex(of: index * 10)
            #expect(at.map { grouped[$0 + 1] } == index * 10 + 1)
        }
    }

    @Test("many threads and tasks writing at once: every change written once, nobody left waiting")
    func manyAtOnce() async throws {
        let written = Locked<[Int: Int]>([:])
        let commit = GroupCommit<Int> { changes in
            usleep(50)  // a commit takes a while, so writers pile up behind it
            written.withLock { for change in changes { $0[change, default: 0] += 1 } }
        }
        let threads = (0..<16).map { thread in
            let thread = Thread {
                for index in 0..<50 { commit.write([thread * 1000 + index]) }
            }
            thread.start()
            return thread
        }
        await withTaskGroup(of: Void.self) { group in
            for task in 16..<48 {
                group.addTask {
                    for index in 0..<50 {
                        await commit.commit([task * 1000 + index])
                        #expect(written.withLock { $0[task * 1000 + index] } == 1)
                    }
                }
            }
        }
        while threads.contains(where: { !$0.isFinished }) { try await Task.sleep(for: .milliseconds(1)) }
        let counts = written.withLock { $0 }
        #expect(counts.count == 48 * 50)
        #expect(counts.values.allSatisfy { $0 == 1 })
        #expect(commit.waiting == 0)
    }
}
