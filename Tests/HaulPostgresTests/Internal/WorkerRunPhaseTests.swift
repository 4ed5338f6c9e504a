import Testing

@testable import HaulPostgres

/// The phases of a worker's run, without a database.
@Suite("WorkerRun phases (no I/O)")
struct WorkerRunPhaseTests {
    typealias Phase = WorkerRun.Phase

    @Test("a lost lease is remembered through the drain; a drain keeps whether the lease was lost")
    func fencing() {
        #expect(Phase.running.fencing == .fenced)
        #expect(Phase.stopping.fencing == .fenced)
        #expect(Phase.fenced.fencing == .fenced)
        #expect(Phase.drained(fenced: false).fencing == .drained(fenced: true))
        #expect(Phase.drained(fenced: true).fencing == .drained(fenced: true))
    }

    @Test("only a fenced run, drained or not, counts as fenced; only a drained one as drained")
    func queries() {
        let phases: [Phase] = [.running, .stopping, .fenced, .drained(fenced: false), .drained(fenced: true)]
        #expect(phases.map(\.isFenced) == [false, false, true, false, true])
        #expect(phases.map(\.isDrained) == [false, false, false, true, true])
    }
}
