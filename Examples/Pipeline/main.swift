// Seed 003's pipeline — fetch -> parse -> save — with each step's typed result handed to the next, no
// delegates and no force-unwraps. A failure anywhere stops the steps after it with a clear error.
// (The fetch is a stand-in async step here; the download examples use Haul's real engine.)
import Foundation
import HaulOperations

struct Quote: Sendable, Equatable {
    let author: String
    let text: String
}

/// Stand-in for an HTTP GET of the quotes JSON.
@Sendable func fetchQuotesJSON(failing: Bool) async throws -> Data {
    try await Task.sleep(for: .milliseconds(10))
    if failing { throw URLError(.badServerResponse) }
    return Data(#"[{"author":"Knuth","text":"Premature optimization..."},{"author":"Hoare","text":"Simplicity"}]"#.utf8)
}

func pipeline(failing: Bool, on queue: OperationQueue) -> AsyncBlockOperation<Int> {
    let fetch = AsyncBlockOperation(name: "fetch") { try await fetchQuotesJSON(failing: failing) }
    let parse = AsyncBlockOperation(name: "parse", consuming: fetch) { data in
        let objects = try JSONSerialization.jsonObject(with: data) as? [[String: String]] ?? []
        return objects.compactMap { object -> Quote? in
            guard let author = object["author"], let text = object["text"] else { return nil }
            return Quote(author: author, text: text)
        }
    }
    let save = AsyncBlockOperation(name: "save", consuming: parse) { quotes in
        for quote in quotes { print("  saved: \(quote.author) — \(quote.text)") }
        return quotes.count
    }
    queue.addOperations([fetch, parse, save])
    return save
}

let queue = OperationQueue()
print("pipeline that works:")
let saved = try await pipeline(failing: false, on: queue).value
print("  \(saved) quotes saved")

print("pipeline whose fetch fails:")
do {
    _ = try await pipeline(failing: true, on: queue).value
    print("FAILED: expected an error")
    exit(1)
} catch let error as OperationError {
    print("  save did not run: \(error)")
    print("  root cause: \(error.rootCause)")
}
print(saved == 2 ? "OK" : "FAILED")
exit(saved == 2 ? 0 : 1)
