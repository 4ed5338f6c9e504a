import Foundation
import Haul
import HTTPTypes
import Testing

@testable import HaulPostgres

@Suite("DatabaseURL and SharedDownload: what the queue takes")
struct DatabaseURLTests {
    @Test("a postgres URL: user, password, host, port, database, sslmode; the password never in its description")
    func parses() throws {
        let url = try DatabaseURL("postgresql://app%40x:s%3Acret@db.example.org:6543/haul%20q?sslmode=verify-ca")
        #expect(url.user == "app@x" && url.password == "s:cret" && url.host == "db.example.org" && url.port == 6543)
        #expect(url.database == "haul q" && url.sslMode == .verifyCA)
        #expect(!url.description.contains("cret") && url.description.contains("db.example.org:6543"))
        let socket = try DatabaseURL("postgres://haul@/queue?host=/run/postgresql")
        #expect(socket.isUnixSocket && socket.host == "/run/postgresql" && socket.database == "queue")
        let defaults = try DatabaseURL("postgres://haul@localhost")
        #expect(defaults.port == 5432 && defaults.database == "haul" && defaults.sslMode == .prefer)
    }

    @Test(
        "bad URLs name what is wrong, never the password",
        arguments: [
            ("mysql://u:pw@h/d", "unsupported scheme 'mysql'"),
            ("postgres://u:pw@h/d?sslmode=sometimes", "sslmode='sometimes'"),
            ("postgres://u:pw@h:99999/d", "port 99999 is not a TCP port"),
            ("postgres://u:pw@h/d?sslrootcert=/nonexistent/ca.pem", "sslrootcert '/nonexistent/ca.pem'"),
        ])
    func refuses(text: String, expected: String) {
        let error = #expect(throws: SharedQueueError.self) { try DatabaseURL(text) }
        #expect(error?.code == .invalidDatabaseURL)
        #expect(error?.message.contains(expected) == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("pw") == false)
    }

    @Test("a download's path stays under the directory; credentials stay out of the database")
    func sharedDownload() throws {
        let request = DownloadRequest(
            url: URL(string: "https://example.org/a")!, destination: .directory(URL(fileURLWithPath: "/")))
        for path in ["", "/etc/x", "a/../b", "a//b", "./a", ".haul/x", "a/.haul"] {
            #expect(throws: SharedQueueError.self, "\(path)") { try SharedDownload(request: request, path: path) }
        }
        #expect(try SharedDownload(request: request, path: "d/e/f.iso").path == "d/e/f.iso")
        let withUser = DownloadRequest(
            url: URL(string: "https://u:p@example.org/a")!, destination: .directory(URL(fileURLWithPath: "/")))
        #expect(throws: SharedQueueError.self) { try SharedDownload(request: withUser, path: "a") }
        var withCookie = request
        withCookie.headerFields[.cookie] = "s=1"
        let error = #expect(throws: SharedQueueError.self) { try SharedDownload(request: withCookie, path: "a") }
        #expect(error?.message.contains("Cookie") == true && error?.message.contains("s=1") == false)
        // A token in a field of its own is as much a secret: it would be stored in clear, or dropped unsaid.
        var withToken = request
        withToken.headerFields[HTTPField.Name("PRIVATE-TOKEN")!] = "glpat-123"
        let tokenError = #expect(throws: SharedQueueError.self) { try SharedDownload(request: withToken, path: "a") }
        #expect(tokenError?.message.contains("PRIVATE-TOKEN") == true && tokenError?.message.contains("glpat") == false)
    }
}
