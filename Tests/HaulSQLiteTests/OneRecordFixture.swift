import Foundation
import GRDB
import Haul
import HaulTestSupport

@testable import HaulSQLite

/// One record's key, its rows and records by their failure message, and what the database holds for it: what the
/// suites on the order of changes and the pending logs write and read.
protocol OneRecordFixture {}

extension OneRecordFixture {
    var key: JournalKey { JournalKey(url: "http://h/a", destination: "/d/") }

    func row(_ failure: String) -> RecordRow {
        RecordRow(
            url: key.url, destination: key.destination, path: "/d/a", state: "failed", sequence: 0, failure: failure)
    }

    func record(_ failure: String) -> JournalRecord {
        JournalRecord(key: key, path: "/d/a", state: .failed(message: failure))
    }

    /// What the database itself holds for `key` (its `failure` column), read on a connection of the test's own.
    func committed(_ path: String) throws -> String? {
        try DatabaseQueue(path: path).read { db in
            try String.fetchOne(
                db, sql: "SELECT failure FROM record WHERE url = ? AND destination = ?",
                arguments: [key.url, key.destination])
        }
    }

    /// A new journal database at `j.sqlite` in `dir`, its schema made.
    func database(in dir: TemporaryDirectory) throws -> String {
        let path = dir.file("j.sqlite").path
        try SQLiteJournal(path: path).finish()
        return path
    }
}
