/// Which bytes of a file fetched over several connections are written, being written, and left, and which connection
/// works on what. A value type without I/O (the segmented transfer keeps it behind a lock), so its rules are tested
/// on their own.
///
/// The file is not cut up ahead: a connection that starts takes an unowned segment, else half of what is left of the
/// largest one (the owner of that one now stops where the half begins). So the first connection owns the whole file
/// until a second one arrives, and a connection that finishes early takes work from a slow one instead of idling.
struct SegmentTable {
    struct Segment: Equatable {
        /// Bytes before this are on disk.
        var done: Int64
        /// Bytes before this are on disk or handed to a writer (`done <= reserved <= end`).
        var reserved: Int64
        /// Where the segment ends (exclusive); a steal moves it down.
        var end: Int64
        /// The connection working on it.
        var owner: Int?

        var isFinished: Bool { done >= end }
        /// What nobody has started writing yet.
        var unreserved: Int64 { end - reserved }
    }

    let total: Int64
    private(set) var segments: [Segment]

    /// The bytes of `total` in `missing` are to be fetched; the rest are on disk.
    init(total: Int64, missing: [Range<Int64>]) {
        self.total = total
        segments = missing.filter { !$0.isEmpty }.sorted { $0.lowerBound < $1.lowerBound }.map {
            Segment(done: $0.lowerBound, reserved: $0.lowerBound, end: $0.upperBound)
        }
    }

    /// The ranges not on disk yet, in file order: what a journal records, and where a later run resumes.
    var missing: [Range<Int64>] {
        segments.filter { !$0.isFinished }.map { $0.done..<$0.end }.sorted { $0.lowerBound < $1.lowerBound }
    }

    /// Bytes on disk.
    var written: Int64 { total - segments.reduce(0) { $0 + ($1.end - $1.done) } }

    var isComplete: Bool { segments.allSatisfy(\.isFinished) }

    /// Whether a segment is unowned and unfinished, or some owned one has at least `2 * minimum` left to split.
    func hasWork(splittingAbove minimum: Int64) -> Bool {
        segments.contains { !$0.isFinished && ($0.owner == nil || $0.unreserved >= 2 * minimum) }
    }

    /// Gives `connection` a segment: the largest unowned one, else the second half of what is left of the largest
    /// owned one when both halves are at least `minimum`. Returns its index, or `nil` when there is no such work.
    mutating func assign(to connection: Int, minimum: Int64) -> Int? {
        if let free = segments.indices.filter({ segments[$0].owner == nil && !segments[$0].isFinished })
            .max(by: { segments[$0].end - segments[$0].done < segments[$1].end - segments[$1].done })
        {
            segments[free].owner = connection
            segments[free].reserved = segments[free].done
            return free
        }
        guard
            let victim = segments.indices.filter({ segments[$0].owner != nil })
                .max(by: { segments[$0].unreserved < segments[$1].unreserved }),
            segments[victim].unreserved >= 2 * max(1, minimum)
        else { return nil }
        let middle = segments[victim].reserved + segments[victim].unreserved / 2
        let end = segments[victim].end
        segments[victim].end = middle
        segments.append(Segment(done: middle, reserved: middle, end: end, owner: connection))
        return segments.count - 1
    }

    /// Takes over the largest owned segment whole for `connection` (its owner stops at the next chunk): for a
    /// connection with nothing to split when the one still working is much slower. Returns the index of the new
    /// segment and the connection that lost it.
    mutating func takeOver(for connection: Int, from loser: Int) -> Int? {
        guard
            let victim = segments.indices.filter({ segments[$0].owner == loser && segments[$0].unreserved > 0 })
                .max(by: { segments[$0].unreserved < segments[$1].unreserved })
        else { return nil }
        let start = segments[victim].reserved
        let end = segments[victim].end
        segments[victim].end = start
        segments.append(Segment(done: start, reserved: start, end: end, owner: connection))
        return segments.count - 1
    }

    /// Where segment `index` goes on, and how much is left of it for its owner.
    func position(of index: Int) -> (offset: Int64, left: Int64) {
        (segments[index].reserved, segments[index].unreserved)
    }

    /// Hands up to `count` bytes of segment `index` to its writer: the offset they go to and how many of them belong
    /// to the segment (fewer, or none, once a steal moved its end).
    mutating func reserve(_ index: Int, count: Int) -> (offset: Int64, count: Int) {
        let offset = segments[index].reserved
        let granted = Int(min(Int64(count), max(0, segments[index].end - offset)))
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
    }

    /// Whether segment `index` is finished as far as its owner is concerned (all of it handed to the writer).
    func isExhausted(_ index: Int) -> Bool { segments[index].unreserved <= 0 }

    func range(of index: Int) -> Range<Int64> { segments[index].done..<segments[index].end }
}
