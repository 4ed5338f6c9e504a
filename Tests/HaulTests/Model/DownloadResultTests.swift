import Foundation
import Testing

@testable import Haul

/// Results made by the engine keep the file's path and make its URL when asked.
@Suite("Download results")
struct DownloadResultTests {
    @Test("a result made from a path has that path's file URL and equals one made from the URL; fileURL can be set")
    func pathOrURL() {
        let finalURL = URL(string: "http://127.0.0.1:1/a%20b")!
        var fromPath = DownloadResult(
            path: "/tmp/dir/a b.bin", size: 3, sha256: "ab", finalURL: finalURL, attempts: 1, bytesTransferred: 3)
        let fromURL = DownloadResult(
            fileURL: URL(fileURLWithPath: "/tmp/dir/a b.bin"), size: 3, sha256: "ab", finalURL: finalURL, attempts: 1,
            bytesTransferred: 3)
        #expect(fromPath.fileURL == URL(fileURLWithPath: "/tmp/dir/a b.bin"))
        #expect(fromPath.fileURL.path == "/tmp/dir/a b.bin")
        #expect(fromPath == fromURL)
        var other = fromURL
        other.sha256 = "cd"
        #expect(fromPath != other)
        fromPath.fileURL = URL(fileURLWithPath: "/elsewhere")
        #expect(fromPath.fileURL.path == "/elsewhere")
        #expect(fromPath != fromURL)
    }
}
