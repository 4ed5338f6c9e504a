import Haul

/// What a journal has written that the database may not have yet: for each of its logs not folded, the keys it
/// changed there and their newest record (`nil` for a removal, or for any change when the journal does not remember
/// its writes), newest log last. A log's entries go once the log is folded, when the database answers for them, so
/// the memory held is bounded by the fold threshold, not by the number of records.
///
/// A value, with no I/O: the journal keeps it under its lock and tells it when it starts a log and when one is folded.
struct UnfoldedWrites {
    /// What one log changed.
    private struct Generation {
        let number: Int
        var records: [SQLiteJournal.CacheKey: JournalRecord?] = [:]
        /// The keys that got a partial or completed record in this log, by its path (a key may have changed since).
        var files: [String: [SQLiteJournal.CacheKey]] = [:]
    }

    /// Oldest first; the last is the log being written. Only a log whose fold failed stays ahead of the one folded
    /// last.
    private var generations: [Generation]

    /// Starts with the log numbered `generation`.
    init(generation: Int) {
        generations = [Generation(number: generation)]
    }

    /// The newest change this journal made to `key` in a log not folded yet: `.some(nil)` when it was removed (or not
    /// remembered), `nil` when there is none and the database has the answer.
    func change(for key: SQLiteJournal.CacheKey) -> JournalRecord?? {
        for generation in generations.reversed() {
            if let change = generation.records[key] { return change }
        }
        return nil
    }

    /// Notes a change to `key` in the log being written.
    mutating func note(_ record: JournalRecord?, at key: SQLiteJournal.CacheKey) {
        generations[generations.count - 1].records.updateValue(record, forKey: key)
        if let record, record.state.isFile {
            generations[generations.count - 1].files[record.path, default: []].append(key)
        }
    }

    /// The newest records of partial and completed files at `path` among the changes held.
    func fileRecords(at path: String) -> [JournalRecord] {
        var seen = Set<SQLiteJournal.CacheKey>()
        var records: [JournalRecord] = []
        for generation in generations {
            for key in generation.files[path] ?? [] where seen.insert(key).inserted {
                if case let record?? = change(for: key), record.path == path, record.state.isFile {
                    records.append(record)
                }
            }
        }
        return records
    }

    /// Starts noting changes for the log numbered `generation`, which the journal now writes.
    mutating func start(_ generation: Int) {
        generations.append(Generation(number: generation))
    }

    /// Forgets the changes of the log numbered `generation`, now in the database. A log whose fold failed is older
    /// and stays (the database lacks its changes), less the keys this one changed: the database has their newer
    /// record. Returns what it forgot, for the caller to free after it lets go of its lock.
    mutating func folded(_ generation: Int) -> [SQLiteJournal.CacheKey: JournalRecord?] {
        guard let index = generations.firstIndex(where: { $0.number == generation }) else { return [:] }
        let records = generations[index].records
        // The log being written stays last (emptied: `finish()` folds it), so that a change always has a place.
        if index == generations.count - 1 {
            generations[index].records = [:]
        } else {
            generations.remove(at: index)
        }
        for older in 0..<index {
            for key in records.keys { generations[older].records.removeValue(forKey: key) }
        }
        return records
    }

    /// How many changes are held, for tests: bounded by the logs not folded yet.
    var count: Int { generations.reduce(0) { $0 + $1.records.count } }
}
