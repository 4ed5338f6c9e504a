import Foundation
import Haul
import Testing

@testable import HaulCommandLine

/// The name a download is shown by (its lines, its failure in the summary, even with `-q`).
@Suite("Display names (no I/O)")
struct DisplayNameTests {
    @Test(
        "a download into a directory is named as its planned file, whatever its URL holds, else by its URL",
        arguments: [
            "https://h.test/a/file.bin", "https://h.test/a/b%20c.txt", "https://h.test/100%25", "https://h.test/a/",
            "https://h.test/caf%C3%A9?x=1#f", "https://h.test/a/%3F%23%3B", "https://h.test/semi;colon",
            "https://h.test/dir/..%2F..%2Fetc%2Fpasswd", "https://h.test/%2E%2E",
        ])
    func directory(url: String) throws {
        let request = DownloadRequest(
            url: try #require(URL(string: url)), destination: .directory(URL(fileURLWithPath: "/tmp/some dir")))
        // The planned file's last component, else the URL's name, else the URL.
        let expected =
            request.plannedFileURL?.lastPathComponent ?? DownloadRequest.fileName(for: request.url)
            ?? request.url.redactedString
        #expect(displayName(of: request) == expected)
    }

    @Test("a named file is shown by its name; with no safe name the URL is shown, without its credentials")
    func fileAndFallback() throws {
        let file = DownloadRequest(
            url: try #require(URL(string: "https://h.test/x")),
            destination: .file(URL(fileURLWithPath: "/tmp/d/out.bin")))
        #expect(displayName(of: file) == "out.bin")
        let nameless = DownloadRequest(
            url: try #require(URL(string: "https://user:pw@h.test/..")),
            destination: .directory(URL(fileURLWithPath: "/tmp/d")))
        #expect(
            nameless.plannedFileURL == nil || displayName(of: nameless) == nameless.plannedFileURL?.lastPathComponent)
        #expect(!displayName(of: nameless).contains("pw"))
        let fromResponse = DownloadRequest(
            url: try #require(URL(string: "https://h.test/get?id=7")),
            destination: .directory(URL(fileURLWithPath: "/tmp/d"), useContentDisposition: true))
        #expect(displayName(of: fromResponse) == DownloadRequest.fileName(for: fromResponse.url))
    }
}
