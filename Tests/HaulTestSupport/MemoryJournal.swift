import Foundation
package import Haul

/// A journal in memory: what a later process would find, without the storage.
package final class MemoryJournal: Journal {
    /// The records, and their keys in the order first stored.
    private let records = Locked<(byKey: [JournalKey: JournalRecord], order: [JournalKey])>(([:], []))
    package var all: [JournalRecord] { allRecords() }
    package func record(for key: JournalKey) -> JournalRecord? { records.withLock { $0.byKey[key] } }
    package func store(_ record: JournalRecord) {
        records.withLock { records in
            if records.byKey.updateValue(record, forKey: record.key) == nil { records.order.append(record.key) }
        }
    }
    package func remove(_ key: JournalKey) {
        records.withLock { records in
            if records.byKey.removeValue(forKey: key) != nil { records.order.removeAll { $0 == key } }
        }
    }
    package func allRecords() -> [JournalRecord] {
        records.withLock { records in records.order.compactMap { records.byKey[$0] } }
    }
    package func records(forFileAt path: String) -> [JournalRecord] {
        allRecords().filter { $0.path == path && $0.state.isFile }
    }

    package init() {}

    /// A journal holding what `other` holds.
    package init(copying other: some Journal) {
        for record in other.allRecords() { store(record) }
    }
}
