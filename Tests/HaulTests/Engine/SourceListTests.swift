import Foundation
import Testing

@testable import Haul

/// The rules of a download's sources without I/O: which source the next attempt goes to, how retries count per
/// source, and what the error says when every source has failed.
@Suite("Sources of a download (no I/O)")
struct SourceListTests {
    let primary = Self.url("http://a.example/f.bin?token=1")
    let mirror = Self.url("http://b.example/f.bin")
    let last = Self.url("https://user:secret@c.example/f.bin")

    static func url(_ text: String) -> URL {
        guard let url = URL(string: text) else { preconditionFailure("not a URL: \(text)") }
        return url
    }

    func list(_ mirrors: [URL]) -> SourceList {
        var request = DownloadRequest(url: primary, destination: .file(URL(fileURLWithPath: "/tmp/f.bin")))
        request.mirrors = mirrors
        return SourceList(request)
    }

    func failure(_ code: DownloadError.Code, transient: Bool, _ message: String = "it failed") -> AttemptFailure {
        let error = DownloadError(code, message: message, status: code == .httpStatus ? 503 : nil)
        return transient ? .transient(error) : .permanent(error)
    }

    @Test("a permanent failure of a source drops it and the next source is asked at once")
    func permanentFailureMovesOn() {
        var sources = list([mirror])
        let next = sources.next(after: failure(.httpStatus, transient: false, "server answered 404"), maxRetries: 3)
        guard case .next(let dropped, let reason, let url) = next else {
            Issue.record("\(next)")
            return
        }
        #expect(dropped == primary && url == mirror && reason == "server answered 404")
        #expect(sources.url == mirror)
        #expect(sources.live == [mirror])
    }

    @Test("a transient failure is retried on the same source while its own retries last, then it is dropped")
    func retriesCountPerSource() {
        var sources = list([mirror])
        for expected in 1...2 {
            guard case .retry(let failures) = sources.next(after: failure(.truncated, transient: true), maxRetries: 2)
            else {
                Issue.record("not retried")
                return
            }
            #expect(failures == expected)
        }
        guard case .next(_, _, let url) = sources.next(after: failure(.truncated, transient: true), maxRetries: 2)
        else {
            Issue.record("not moved on")
            return
        }
        #expect(url == mirror)
        // The mirror has a budget of its own: its first failure is its first retry, not the fourth of the download.
        guard case .retry(1) = sources.next(after: failure(.stalled, transient: true), maxRetries: 2) else {
            Issue.record("the mirror's retries were used up by the first source")
            return
        }
    }

    @Test("the download fails when every source has failed, naming each source (without credentials) and its reason")
    func everySourceFailed() {
        var sources = list([mirror, last])
        _ = sources.next(after: failure(.httpStatus, transient: false, "server answered 404 Not Found"), maxRetries: 0)
        _ = sources.next(after: failure(.transport, transient: true, "connection refused"), maxRetries: 0)
        let end = sources.next(after: failure(.truncated, transient: true, "connection closed"), maxRetries: 0)
        guard case .giveUp(let error) = end else {
            Issue.record("\(end)")
            return
        }
        #expect(error.code == .truncated)
        #expect(
            error.message
                == "every source failed: http://a.example/f.bin?token=1: server answered 404 Not Found; "
                + "http://b.example/f.bin: connection refused; https://c.example/f.bin: connection closed")
        #expect(!error.message.contains("secret"))
    }

    @Test("one source: its failure is the download's, as it was")
    func singleSource() {
        var sources = list([])
        let end = sources.next(after: failure(.httpStatus, transient: false, "server answered 404"), maxRetries: 3)
        guard case .giveUp(let error) = end else {
            Issue.record("\(end)")
            return
        }
        #expect(error.message == "server answered 404")
    }

    @Test("a failure of the download itself (time limit, size limit, file system) tries no other source")
    func downloadsOwnFailures() {
        for code in [DownloadError.Code.timedOut, .sizeLimitExceeded, .fileSystem, .checksumMismatch] {
            var sources = list([mirror])
            guard case .giveUp = sources.next(after: failure(code, transient: false), maxRetries: 3) else {
                Issue.record("\(code) moved on to another source")
                continue
            }
        }
    }

    @Test("a mirror given twice, or equal to the URL, is one source")
    func duplicates() {
        let sources = list([primary, mirror, mirror])
        #expect(sources.live == [primary, mirror])
    }
}
