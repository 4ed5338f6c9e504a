/// Which bytes of a file fetched over several connections are written, being written, and left, and which connection
/// works on what. A value type without I/O (the segmented transfer keeps it behind a lock), so its rules are tested
/// on their own.
///
/// A fresh file is cut into as many equal segments as it will have connections (``split(into:firstAtLeast:)``). A
/// connection fetches its segment in pieces, one closed range at a time (``requestPiece(_:size:)``), so that what it
/// has not asked for yet can be given to another without ending a response in flight: a connection with nothing left
/// takes an unowned segment, else half of what nobody has asked for of the largest one (its owner stops where that
/// half begins). Only a connection to a source dropped as much slower gives up a piece in flight
/// (``abandonRest(ownedBy:)``).
struct SegmentTable {
    struct Segment: Equatable {
        /// Bytes before this are on disk.
        var done: Int64
        /// Bytes before this are on disk or handed to a writer (`done <= reserved <= end`).
        var reserved: Int64
        /// Where the owner's request in flight ends (`reserved <= requested <= end`): a steal never moves ``end`` below it.
        var requested: Int64
        /// Where the segment ends (exclusive); a steal moves it down.
        var end: Int64
        /// The connection working on it.
        var owner: Int?

        var isFinished: Bool { done >= end }
        /// What nobody has started writing yet.
        var unreserved: Int64 { end - reserved }
        /// What nobody has asked a server for yet.
        var unrequested: Int64 { end - max(reserved, requested) }
    }

    let total: Int64
    private(set) var segments: [Segment]

    /// The bytes of `total` in `missing` are to be fetched; the rest are on disk.
    init(total: Int64, missing: [Range<Int64>]) {
        self.total = total
        segments = missing.filter { !$0.isEmpty }.sorted { $0.lowerBound < $1.lowerBound }.map {
            Segment(done: $0.lowerBound, reserved: $0.lowerBound, requested: $0.lowerBound, end: $0.upperBound)
        }
    }

    /// The ranges not on disk yet, in file order: what a journal records, and where a later run resumes.
    var missing: [Range<Int64>] {
        segments.filter { !$0.isFinished }.map { $0.done..<$0.end }.sorted { $0.lowerBound < $1.lowerBound }
    }

    /// Bytes on disk.
    var written: Int64 { total - segments.reduce(0) { $0 + ($1.end - $1.done) } }

    var isComplete: Bool { segments.allSatisfy(\.isFinished) }

    /// Whether a segment is unowned and unfinished, or some owned one has at least `2 * minimum` nobody asked for.
    func hasWork(splittingAbove minimum: Int64) -> Bool {
        segments.contains { !$0.isFinished && ($0.owner == nil || $0.unrequested >= 2 * minimum) }
    }

    /// Cuts the only segment, unowned and untouched, into `count` segments: the first at least `first` long (the
    /// piece the first response brings), the rest of equal length (the last takes the remainder). The first keeps its
    /// index 0.
    mutating func split(into count: Int, firstAtLeast first: Int64 = 0) {
        guard count > 1, segments.count == 1, segments[0].owner == nil, segments[0].reserved == segments[0].done
        else { return }
        let start = segments[0].done
        let end = segments[0].end
        let firstEnd = min(end, start + max(first, (end - start) / Int64(count)))
        let length = (end - firstEnd) / Int64(count - 1)
        guard length > 0 else { return }
        segments[0].end = firstEnd
        for part in 0..<(count - 1) {
            let lower = firstEnd + Int64(part) * length
            let upper = part == count - 2 ? end : lower + length
            segments.append(Segment(done: lower, reserved: lower, requested: lower, end: upper))
        }
    }

    /// Gives segment `index` to `connection` if nobody else owns it; returns whether it did.
    mutating func assign(_ index: Int, to connection: Int) -> Bool {
        guard segments.indices.contains(index), segments[index].owner ?? connection == connection,
            !segments[index].isFinished
        else { return false }
        segments[index].owner = connection
        segments[index].reserved = segments[index].done
        segments[index].requested = max(segments[index].requested, segments[index].done)
        return true
    }

    /// Gives `connection` a segment: the largest unowned one, else the second half of what nobody has asked for of
    /// the largest owned one when both halves are at least `minimum`. Returns its index, or `nil` when there is no such work.
    mutating func assign(to connection: Int, minimum: Int64) -> Int? {
        if let free = segments.indices.filter({ segments[$0].owner == nil && !segments[$0].isFinished })
            .max(by: { segments[$0].end - segments[$0].done < segments[$1].end - segments[$1].done })
        {
            segments[free].owner = connection
            segments[free].reserved = segments[free].done
            segments[free].requested = segments[free].done
            return free
        }
        guard
            let victim = segments.indices.filter({ segments[$0].owner != nil })
                .max(by: { segments[$0].unrequested < segments[$1].unrequested }),
            segments[victim].unrequested >= 2 * max(1, minimum)
        else { return nil }
        let middle = segments[victim].end - segments[victim].unrequested / 2
        let end = segments[victim].end
        segments[victim].end = middle
        segments.append(Segment(done: middle, reserved: middle, requested: middle, end: end, owner: connection))
        return segments.count - 1
    }

    /// Leaves the rest of every segment `loser` owns, in flight or not, to whoever takes it next (unowned): its
    /// connection is much slower than others, or its source is dropped. The loser stops at its next chunk. Returns how
    /// many segments it gave up.
    @discardableResult
    mutating func abandonRest(ownedBy loser: Int) -> Int {
        var given = 0
        for index in segments.indices where segments[index].owner == loser && segments[index].unreserved > 0 {
            let start = segments[index].reserved
            let end = segments[index].end
            segments[index].end = start
            segments[index].requested = start
            segments.append(Segment(done: start, reserved: start, requested: start, end: end))
            given += 1
        }
        return given
    }

    /// Asks for the next piece of segment `index`, at most `size` bytes from where its owner is: the range to
    /// request. Nobody can take those bytes from the owner any more, short of ``abandonRest(ownedBy:)``.
    mutating func requestPiece(_ index: Int, size: Int64) -> Range<Int64> {
        let start = segments[index].reserved
        let end = min(segments[index].end, start + min(max(1, size), segments[index].end - start))
        segments[index].requested = end
        return start..<end
    }

    /// Records that the owner of segment `index` asked for everything up to `end` (the first response's piece).
    mutating func requested(_ index: Int, upTo end: Int64) {
        segments[index].requested = min(segments[index].end, max(segments[index].requested, end))
    }

    /// Bytes handed to the writer of segment `index` so far (its next offset).
    func reserved(_ index: Int) -> Int64 { segments[index].reserved }

    /// Hands up to `count` bytes of segment `index` to its writer: the offset they go to and how many of them belong
    /// to the segment and lie before `limit` (fewer, or none, once a take-over moved its end).
    mutating func reserve(_ index: Int, count: Int, upTo limit: Int64 = .max) -> (offset: Int64, count: Int) {
        let offset = segments[index].reserved
        let granted = Int(min(Int64(count), max(0, min(segments[index].end, limit) - offset)))
        segments[index].reserved += Int64(granted)
        return (offset, granted)
    }

    /// Records that the `count` bytes reserved last for segment `index` are on disk.
    mutating func wrote(_ index: Int, count: Int) {
        segments[index].done += Int64(count)
    }

    /// Leaves segment `index` to whoever takes it next (its connection failed): what was reserved and not written goes
    /// back to it.
    mutating func release(_ index: Int) {
        segments[index].owner = nil
        segments[index].reserved = segments[index].done
        segments[index].requested = segments[index].done
    }

    /// Whether segment `index` is finished as far as its owner is concerned (all of it handed to the writer).
    func isExhausted(_ index: Int) -> Bool { segments[index].unreserved <= 0 }

    func range(of index: Int) -> Range<Int64> { segments[index].done..<segments[index].end }
}
