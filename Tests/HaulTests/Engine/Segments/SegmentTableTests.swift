import Testing

@testable import Haul

/// The segment table's rules without I/O: how a file is split among connections, and what a journal records.
@Suite("Segment table (no I/O)")
struct SegmentTableTests {
    @Test("the first connection owns the rest; each new one takes the second half of the largest segment's rest")
    func splitsInHalves() {
        var table = SegmentTable(total: 1000, missing: [0..<1000])
        #expect(table.assign(to: 0, minimum: 100) == 0)
        #expect(table.assign(to: 1, minimum: 100) == 1)
        #expect(table.range(of: 0) == 0..<500 && table.range(of: 1) == 500..<1000)
        #expect(table.assign(to: 2, minimum: 100) == 2)  // halves one of the two 500s
        #expect(table.segments.map(\.end).sorted() == [250, 500, 1000])
        // Halves of less than the minimum are not worth a connection.
        var small = SegmentTable(total: 150, missing: [0..<150])
        _ = small.assign(to: 0, minimum: 100)
        #expect(small.assign(to: 1, minimum: 100) == nil)
    }

    @Test("a fresh file is cut into equal parts ahead; the first connection takes the first, the others the rest")
    func splitAhead() {
        var table = SegmentTable(total: 1003, missing: [3..<1003])
        table.split(into: 4)
        #expect(table.segments.map { $0.done..<$0.end } == [3..<253, 253..<503, 503..<753, 753..<1003])
        let first = table.assign(0, to: 0)
        let other = table.assign(0, to: 1)
        let same = table.assign(0, to: 0)
        #expect(first && !other && same)
        #expect(table.assign(to: 1, minimum: 1000) != nil)  // an unowned part needs no split
        // Cut ahead only once: a table already split or begun is left as it is.
        table.split(into: 2)
        #expect(table.segments.count == 4)
    }

    @Test("a writer gets only the bytes of its segment; a steal moves its end below what it has not reserved")
    func reservationsRespectSteals() {
        var table = SegmentTable(total: 1000, missing: [0..<1000])
        _ = table.assign(to: 0, minimum: 1)
        let first = table.reserve(0, count: 300)
        #expect(first.offset == 0 && first.count == 300)
        table.wrote(0, count: 300)
        // The thief takes half of the 700 not yet handed to a writer: 650..<1000.
        #expect(table.assign(to: 1, minimum: 1) == 1)
        #expect(table.range(of: 1) == 650..<1000)
        let second = table.reserve(0, count: 400)
        #expect(second.offset == 300 && second.count == 350)
        table.wrote(0, count: 350)
        #expect(table.isExhausted(0))
        #expect(table.missing == [650..<1000])
        #expect(table.written == 650)
    }

    @Test("a failed connection's segment goes back whole from what is on disk; ranges resume as recorded")
    func releaseAndResume() {
        var table = SegmentTable(total: 1000, missing: [100..<400, 600..<1000])
        #expect(table.written == 300)
        let segment = table.assign(to: 0, minimum: 1)
        #expect(segment == 1)  // the larger one
        _ = table.reserve(1, count: 100)
        table.wrote(1, count: 50)  // 50 reserved and not written when it failed
        table.release(1)
        #expect(table.missing == [100..<400, 650..<1000])
        #expect(table.assign(to: 2, minimum: 1) == 1)  // the unowned one first, whole
        #expect(table.reserved(1) == 650)
    }

    @Test("a connection that gives up its rest leaves it unowned, and stops writing at once")
    func abandonRest() {
        var table = SegmentTable(total: 1000, missing: [0..<1000])
        _ = table.assign(to: 0, minimum: 1)
        _ = table.requestPiece(0, size: 400)
        _ = table.reserve(0, count: 100)
        table.wrote(0, count: 100)
        #expect(table.abandonRest(ownedBy: 0) == 1)
        #expect(table.reserve(0, count: 10).count == 0)
        #expect(table.isExhausted(0))
        #expect(table.assign(to: 1, minimum: 1000) == 1)  // unowned: taken whole, whatever the minimum
        #expect(table.range(of: 1) == 100..<1000)
        #expect(table.abandonRest(ownedBy: 0) == 0)
    }

    @Test("what is in flight is never split off: a steal halves what nobody asked for")
    func stealsSkipRequested() {
        var table = SegmentTable(total: 1000, missing: [0..<1000])
        _ = table.assign(to: 0, minimum: 1)
        #expect(table.requestPiece(0, size: 600) == 0..<600)
        #expect(table.assign(to: 1, minimum: 201) == nil)  // 400 unrequested: halves of 200
        #expect(table.assign(to: 1, minimum: 200) == 1)
        #expect(table.range(of: 1) == 800..<1000 && table.segments[0].end == 800)
    }
}
