// Seed 003's Quotes pipeline on Linux: fetch the quotes JSON (a data request through the download queue, with
// its retries and limits) -> parse -> save into SQLite (GRDB), each step's typed result handed to the next.
// The group cancels every step at the first failure; a failed fetch never reaches the database.
import ExampleSupport
import Foundation
import GRDB
import Haul
import HaulAsyncHTTPClient
import HaulTestServer

struct Quote: Codable, Sendable {
    var author: String
    var text: String
}

let site = try makeExampleDirectory("quotes-site")
let quotes = [
    Quote(author: "Knuth", text: "Beware of bugs in the above code; I have only proved it correct."),
    Quote(author: "Hoare", text: "Simplicity is the unavoidable price of reliability."),
    Quote(author: "Dijkstra", text: "Simplicity is prerequisite for reliability."),
]
try JSONEncoder().encode(quotes).write(to: site.appendingPathComponent("quotes.json"))
let server = try await startExampleServer(root: site)

let database = try DatabaseQueue(
    path: try makeExampleDirectory("quotes-db").appendingPathComponent("quotes.sqlite").path)
try database.write { db in
    try db.create(table: "quote") { table in
        table.autoIncrementedPrimaryKey("id")
        table.column("author", .text).notNull()
        table.column("text", .text).notNull()
    }
}
let downloads = DownloadQueue(downloader: Downloader(transport: AsyncHTTPClientTransport.shared))

/// fetch -> parse -> save on `queue`; returns the save step (its value is the number of rows written) and the
/// group, which cancels every step at the first failure and remembers that failure.
func pipeline(_ url: URL, on queue: OperationQueue) -> (AsyncBlockOperation<Int>, OperationGroup) {
    let fetch = AsyncBlockOperation(name: "fetch") { try await downloads.data(from: url, maxSize: 1 << 20) }
    let parse = AsyncBlockOperation(name: "parse", consuming: fetch) { data in
        try JSONDecoder().decode([Quote].self, from: data)
    }
    let save = AsyncBlockOperation(name: "save", consuming: parse) { quotes in
        try await database.write { db in
            for quote in quotes {
                try db.execute(
                    sql: "INSERT INTO quote (author, text) VALUES (?, ?)", arguments: [quote.author, quote.text])
            }
        }
        return quotes.count
    }
    let group = OperationGroup([fetch, parse, save], failurePolicy: .cancelOthers)
    queue.addOperations([fetch, parse, save])
    return (save, group)
}

let queue = OperationQueue()
// The first request fails with 503 once; the queue's retry rules fetch it again.
let saved = try await pipeline(server.url(path: "/files/quotes.json", query: ["fail": "1"]), on: queue).0.value
print("saved \(saved) quotes")

var failedAsExpected = false
let (failingSave, failingGroup) = pipeline(server.url(path: "/files/missing.json"), on: queue)
do {
    _ = try await failingSave.value
} catch let error as OperationError {
    try? await failingGroup.finished()
    // Whichever step's failure the group saw first (fetch's own, or a step that found its input missing),
    // the root cause is the fetch's HTTP error; save either was cancelled or found its input missing.
    let firstFailure = failingGroup.firstFailure
    let cause = ((firstFailure as? OperationError)?.rootCause ?? firstFailure) as? DownloadError
    print("second run: save did not run (\(error)); root cause: HTTP \(cause?.status ?? 0)")
    failedAsExpected = cause?.status == 404
}
let rows = try database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM quote") ?? 0 }
let first = try database.read { db in try String.fetchOne(db, sql: "SELECT author FROM quote ORDER BY id") }
print("database holds \(rows) quotes, first by \(first ?? "nobody")")
try await server.shutdown()
check(
    saved == 3 && rows == 3 && first == "Knuth" && failedAsExpected,
    "fetch -> parse -> save, and a failed fetch saves nothing")
