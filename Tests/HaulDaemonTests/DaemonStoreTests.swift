import Foundation
import GRDB
import HaulOperations
import HaulTestSupport
import Testing

@testable import HaulDaemon

/// The daemon's store on disk (no daemon, no server): its layout, and a store of the earlier layout opened again.
@Suite("haul daemon: the store")
struct DaemonStoreTests {
    /// A store file of the layout before rows were kept in the order they were added (keyed by the GID), with
    /// `rows` as (GID, state, rank, stopped order), recorded as migrated that far.
    func earlierStore(at path: String, rows: [(String, String, Int, Int?)]) throws {
        let database = try DatabaseQueue(path: path)
        try database.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
                    INSERT INTO grdb_migrations VALUES ('downloads'), ('global options'), ('hosts');
                    CREATE TABLE downloads (
                        gid TEXT PRIMARY KEY NOT NULL, uris TEXT NOT NULL, options TEXT NOT NULL, state TEXT NOT NULL,
                        rank INTEGER NOT NULL, path TEXT, length INTEGER NOT NULL DEFAULT 0,
                        completed INTEGER NOT NULL DEFAULT 0, error_code INTEGER NOT NULL DEFAULT 0,
                        error_message TEXT NOT NULL DEFAULT '', stopped_order INTEGER,
                        withheld_secrets INTEGER NOT NULL DEFAULT 0
                    ) WITHOUT ROWID;
                    CREATE INDEX downloads_stopped ON downloads(stopped_order);
                    CREATE TABLE global_options (name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;
                    CREATE TABLE hosts (
                        host TEXT PRIMARY KEY NOT NULL, max_connections INTEGER, paused INTEGER NOT NULL DEFAULT 0
                    ) WITHOUT ROWID;
                    """)
            for (gid, state, rank, stopped) in rows {
                try db.execute(
                    sql: """
                        INSERT INTO downloads (gid, uris, options, state, rank, path, length, stopped_order)
                        VALUES (?, ?, '{"dir":"/d"}', ?, ?, ?, 4, ?)
                        """,
                    arguments: [
                        gid, "[\"http://127.0.0.1:9/\(gid)\"]", state, rank, stopped.map { _ in "/d/\(gid)" }, stopped,
                    ])
            }
        }
    }

    /// The store's columns and whether its table of downloads has row numbers (is not `WITHOUT ROWID`).
    func layout(at path: String) throws -> (columns: [String], uniqueGID: Bool) {
        try DatabaseQueue(path: path).read { db in
            let columns = try String.fetchAll(db, sql: "SELECT name FROM pragma_table_info('downloads')")
            let unique = try Bool.fetchOne(
                db,
                sql: """
                    SELECT count(*) > 0 FROM pragma_index_list('downloads') AS list
                    JOIN pragma_index_info(list.name) AS info
                    WHERE list."unique" = 1 AND info.name = 'gid'
                    """)
            return (columns, unique ?? false)
        }
    }

    @Test("a store keyed by GID (the earlier layout) opens in the order rows were added, every row kept")
    func migratesEarlierLayout() throws {
        let root = try TemporaryDirectory()
        let path = root.file("daemon.sqlite").path
        let gids = ["f000000000000001", "0000000000000002", "a000000000000003", "1000000000000004"]
        try earlierStore(
            at: path,
            rows: [
                (gids[0], "waiting", 1, nil), (gids[1], "paused", 0, nil), (gids[2], "complete", 0, 2),
                (gids[3], "error", 0, 1),
            ])
        let store = try DaemonStore(path: path)
        #expect(try store.loadUnfinished().map(\.gid.description) == [gids[1], gids[0]])
        #expect(try store.loadUnfinished().map(\.state) == ["paused", "waiting"])
        let stopped = try store.stopped(offset: 0, limit: 10)
        #expect(stopped.map(\.gid.description) == [gids[3], gids[2]])
        #expect(stopped.map(\.path) == ["/d/\(gids[3])", "/d/\(gids[2])"])
        #expect(stopped.map(\.uris) == [["http://127.0.0.1:9/\(gids[3])"], ["http://127.0.0.1:9/\(gids[2])"]])
        #expect(try store.stoppedGIDs(prefix: "a", limit: 10).map(\.description) == [gids[2]])
        #expect(try store.stopped(#require(GID(hex: gids[0]))) == nil)
        let (columns, uniqueGID) = try layout(at: path)
        #expect(columns.first == "seq" && columns.contains("gid") && uniqueGID)
    }

    @Test("a row written again (its ending) changes where it is: rows keep the order they were added in")
    func endingKeepsPlace() throws {
        let root = try TemporaryDirectory()
        let path = root.file("daemon.sqlite").path
        let store = try DaemonStore(path: path)
        let gids = try [0xf1, 0x02, 0xa3].map { try #require(GID(UInt64($0) << 56)) }
        try store.save(
            gids.enumerated().map { rank, gid in
                DaemonStore.Row(
                    gid: gid, uris: ["http://127.0.0.1:9/\(rank)"], options: ["dir": "/d"], state: "waiting",
                    rank: rank)
            })
        var ended = DaemonStore.Row(
            gid: gids[0], uris: ["http://127.0.0.1:9/0"], options: ["dir": "/d"], state: "complete", rank: 0)
        ended.path = "/d/0"
        ended.stoppedOrder = 1
        store.saveSoon(ended) { message in Issue.record("\(message)") }
        store.flush()
        let order = try DatabaseQueue(path: path).read { db in
            try String.fetchAll(db, sql: "SELECT gid FROM downloads ORDER BY seq")
        }
        #expect(order == gids.map(\.description))
        #expect(try store.stopped(gids[0]) == ended)
        #expect(try store.loadUnfinished().map(\.gid) == [gids[1], gids[2]])
    }

    @Test("rows saved together keep each its own options, shared or not with the row before")
    func optionsOfEachRow() throws {
        let root = try TemporaryDirectory()
        let store = try DaemonStore(path: root.file("daemon.sqlite").path)
        let options: [[String: String]] = [
            ["dir": "/a"], ["dir": "/a"], ["dir": "/b", "split": "2"], [:], ["dir": "/a"],
        ]
        let rows = try options.enumerated().map { rank, options in
            DaemonStore.Row(
                gid: try #require(GID(UInt64(rank + 1))), uris: ["http://127.0.0.1:9/\(rank)"], options: options,
                state: "waiting", rank: rank)
        }
        try store.save(rows)
        #expect(try store.loadUnfinished() == rows)
    }

    @Test("an ending writes how the download ended over its row; an ending whose row is not stored is written whole")
    func endingOverRow() throws {
        let root = try TemporaryDirectory()
        let store = try DaemonStore(path: root.file("daemon.sqlite").path)
        let gids = try [1, 2].map { try #require(GID(UInt64($0))) }
        let added = DaemonStore.Row(
            gid: gids[0], uris: ["http://127.0.0.1:9/a", "http://127.0.0.1:9/mirror"], options: ["split": "2"],
            state: "waiting", rank: 0)
        try store.save([added])
        var failed = added
        failed.state = "error"
        failed.path = "/d/a"
        failed.length = 100
        failed.completed = 40
        failed.errorCode = 22
        failed.errorMessage = "HTTP 503 from 127.0.0.1"
        failed.stoppedOrder = 1
        var unknown = DaemonStore.Row(
            gid: gids[1], uris: ["http://127.0.0.1:9/b"], options: ["out": "b"], state: "complete", rank: 1)
        unknown.stoppedOrder = 2
        for row in [failed, unknown] { store.saveSoon(row) { message in Issue.record("\(message)") } }
        store.flush()
        #expect(try store.stopped(offset: 0, limit: 10) == [failed, unknown])
        #expect(try store.loadUnfinished() == [])
    }

    @Test("endings the store refuses are kept, told of once, written by a later try; none undoes a removal since")
    func refusedEndingsKept() async throws {
        let root = try TemporaryDirectory()
        let path = root.file("daemon.sqlite").path
        let store = try DaemonStore(path: path)
        let gids = try [1, 2, 3].map { try #require(GID(UInt64($0))) }
        let added = gids.enumerated().map { rank, gid in
            DaemonStore.Row(
                gid: gid, uris: ["http://127.0.0.1:9/\(rank)"], options: [:], state: "waiting", rank: rank)
        }
        try store.save(added)
        // Another connection makes the store refuse every ending (an UPDATE), as a full disk would.
        let other = try DatabaseQueue(path: path)
        try await other.write { db in
            try db.execute(
                sql: "CREATE TRIGGER refuse BEFORE UPDATE ON downloads BEGIN SELECT RAISE(ABORT, 'no room'); END")
        }
        let endings = added.prefix(2).enumerated().map { index, row in
            var ended = row
            ended.state = "complete"
            ended.path = "/d/\(index)"
            ended.stoppedOrder = index + 1
            return ended
        }
        let errors = Locked<[String]>([])
        for ending in endings { store.saveSoon(ending) { message in errors.withLock { $0.append(message) } } }
        let told = Locked<[String]>([])
        store.whenWritten { told.withLock { $0.append("ended") } }
        store.flush()
        #expect(store.failedWrites == 1)
        let first = errors.withLock { $0.first } ?? ""
        #expect(first.hasPrefix("cannot record how 2 downloads ended") && first.contains("no room"), "\(first)")
        #expect(first.hasSuffix("trying again"))
        // Nothing was told of endings not written (what was released has run once the queue is drained).
        store.afterWrites.sync {}
        #expect(told.withLock { $0 }.isEmpty)
        // Another use of the store tries them first; a removal of one of them then is not undone by its ending.
        try store.save([], removing: [gids[1]])
        #expect(store.failedWrites >= 2)
        store.afterWrites.sync {}
        #expect(told.withLock { $0 }.isEmpty)
        // The write gathered with the first ending fails too; once the store takes them again, the retry the first
        // failure scheduled writes what is left, unasked.
        try await eventually("the gathered write tried and refused") { store.failedWrites >= 3 }
        try await other.write { db in try db.execute(sql: "DROP TRIGGER refuse") }
        try await eventually("the endings written by a retry", within: .seconds(30)) { store.failedWrites == 0 }
        store.afterWrites.sync {}
        #expect(told.withLock { $0 } == ["ended"])
        #expect(try store.stopped(offset: 0, limit: 10) == [endings[0]])
        #expect(try store.loadUnfinished() == [added[2]])
        #expect(errors.withLock { $0 }.allSatisfy { $0.contains("no room") })
    }

    @Test("endings from many threads, writes refused now and then, removals meanwhile: each told once, once stored")
    func endingsUnderRefusals() async throws {
        let root = try TemporaryDirectory()
        let path = root.file("daemon.sqlite").path
        let store = try DaemonStore(path: path)
        let count = 400
        let rows = try (0..<count).map { rank in
            DaemonStore.Row(
                gid: try #require(GID(UInt64(rank + 1))), uris: ["http://127.0.0.1:9/\(rank)"], options: [:],
                state: "waiting", rank: rank)
        }
        try store.save(rows)
        // Another connection refuses every ending, then turns that off and on (it waits for the store's writes).
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        let other = try DatabaseQueue(path: path, configuration: configuration)
        try await other.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE refusing (refuse INTEGER NOT NULL);
                    INSERT INTO refusing VALUES (1);
                    CREATE TRIGGER refuse BEFORE UPDATE ON downloads WHEN (SELECT refuse FROM refusing) = 1
                    BEGIN SELECT RAISE(ABORT, 'no room'); END
                    """)
        }
        let told = Locked<[GID: Int]>([:])
        let ended = Locked<[GID]>([])
        let refusals = Locked(0)
        let removed = Locked<Set<GID>>([])
        let toldBeforeStored = Locked<[GID]>([])
        let ending: @Sendable (DaemonStore.Row) -> DaemonStore.Row = { row in
            var ended = row
            ended.state = "complete"
            ended.path = "/d/\(row.rank)"
            ended.stoppedOrder = row.rank + 1
            return ended
        }
        await withTaskGroup(of: Void.self) { group in
            for part in 0..<4 {
                group.addTask {
                    for row in rows where row.rank % 4 == part {
                        store.saveSoon(ending(row)) { _ in refusals.withLock { $0 += 1 } }
                        let gid = row.gid
                        if row.rank % 5 == 0 { ended.withLock { $0.append(gid) } }
                        store.whenWritten {
                            told.withLock { $0[gid, default: 0] += 1 }
                            // Read on another connection: an ending told is in the store, unless removed since.
                            let stored =
                                (try? other.read { db in
                                    try String.fetchOne(
                                        db, sql: "SELECT state FROM downloads WHERE gid = ?",
                                        arguments: [gid.description])
                                }) ?? nil
                            if stored != "complete", !removed.withLock({ $0.contains(gid) }) {
                                toldBeforeStored.withLock { $0.append(gid) }
                            }
                        }
                        if row.rank % 10 == 0 { store.flush() }
                        await Task.yield()
                    }
                }
            }
            group.addTask {
                // Every fifth download's result removed once it ended (as removeDownloadResult does, after the end is
                // gathered under the daemon's lock).
                var done = 0
                while done < count / 5 {
                    let next = ended.withLock { ended -> [GID] in
                        defer { ended = [] }
                        return ended
                    }
                    for gid in next {
                        removed.withLock { _ = $0.insert(gid) }
                        // Refused while the other connection writes (the store does not wait): asked again.
                        while (try? store.save([], removing: [gid])) == nil { await Task.yield() }
                    }
                    done += next.count
                    await Task.yield()
                }
            }
            group.addTask {
                for turn in 0..<40 {
                    try? await other.write { db in
                        try db.execute(sql: "UPDATE refusing SET refuse = ?", arguments: [(turn + 1) % 2])
                    }
                    try? await Task.sleep(for: .milliseconds(5))
                }
                try? await other.write { db in try db.execute(sql: "UPDATE refusing SET refuse = 0") }
            }
        }
        store.flush()
        try await eventually("every ending written or superseded", within: .seconds(90)) { store.failedWrites == 0 }
        store.flush()
        store.afterWrites.sync {}
        // The first writes were refused, and that was said.
        #expect(refusals.withLock { $0 } >= 1)
        #expect(told.withLock { $0.count } == count)
        #expect(told.withLock { $0.values.allSatisfy { $0 == 1 } })
        #expect(toldBeforeStored.withLock { $0 }.isEmpty)
        let gone = removed.withLock { $0 }
        #expect(gone.count == count / 5)
        let stopped = try store.stopped(offset: 0, limit: count)
        let expected = rows.filter { !gone.contains($0.gid) }.map(ending)
        #expect(stopped.count == expected.count)
        let difference = zip(stopped, expected).first { $0 != $1 }.map { "\($0)" } ?? "-"
        #expect(stopped == expected, "first difference: \(difference)")
        #expect(try store.loadUnfinished() == [])
    }
}
