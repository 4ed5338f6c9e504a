package import Haul

/// A journal that passes everything to `base` but can hold its commit of a completed record until `release` yields:
/// two downloaders over one store (two processes on one directory) publishing one file, in a chosen interleaving.
package final class HeldCommitJournal: Journal {
    let base: any Journal
    let holds: Bool
    let reached: AsyncStream<Void>.Continuation
    let release: AsyncStream<Void>

    /// With `holds`, a commit of a completed record yields to `reached` and waits for `release`.
    package init(
        _ base: any Journal, holds: Bool, reached: AsyncStream<Void>.Continuation, release: AsyncStream<Void>
    ) {
        self.base = base
        self.holds = holds
        self.reached = reached
        self.release = release
    }

    package func record(for key: JournalKey) -> JournalRecord? { base.record(for: key) }
    package func store(_ record: JournalRecord) { base.store(record) }
    package func remove(_ key: JournalKey) { base.remove(key) }
    package func allRecords() -> [JournalRecord] { base.allRecords() }
    package func records(forFileAt path: String) -> [JournalRecord] { base.records(forFileAt: path) }
    package func commit(_ record: JournalRecord) async {
        if holds, case .completed = record.state {
            reached.yield()
            for await _ in release { break }
        }
        await base.commit(record)
    }
}
