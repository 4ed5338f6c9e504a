import Foundation
import Haul
import Testing

/// The settings most requests leave at their defaults (kept apart, on the heap once one is set): a request is equal to
/// another with the same settings however they were reached, and one set back to its defaults is a plain request.
@Suite("DownloadRequest: its rarely set fields (no I/O)")
struct DownloadRequestFieldsTests {
    // swift-format-ignore: NeverForceUnwrap
    static let url = URL(string: "https://example.test/a/file.bin")!
    static let plain = DownloadRequest(url: url, destination: .directory(URL(fileURLWithPath: "/tmp/d")))

    @Test("setting every field to its default leaves a plain request, equal and hashed alike")
    func defaultsChangeNothing() {
        var request = Self.plain
        request.maxBytesPerSecond = nil
        request.timeLimit = nil
        request.minimumSpeed = nil
        request.continuesExistingFile = false
        request.mirrors = []
        request.maxConnections = 1
        request.minimumSegmentSize = DownloadRequest.defaultMinimumSegmentSize
        request.retryPolicy = nil
        request.connectTimeout = nil
        request.stallTimeout = nil
        request.tls = nil
        request.proxy = nil
        request.revalidatesCompletedFile = nil
        request.usesRemoteModificationTime = nil
        #expect(request == Self.plain)
        #expect(request.hashValue == Self.plain.hashValue)
    }

    @Test("a field set is kept with the others; set back to its default, the request is plain again")
    func setAndReset() throws {
        var request = Self.plain
        request.maxConnections = 4
        request.mirrors = [try #require(URL(string: "https://user:secret@mirror.test/file.bin"))]
        request.maxBytesPerSecond = 1000
        #expect(request != Self.plain)
        #expect(request.maxConnections == 4 && request.maxBytesPerSecond == 1000)
        // A mirror's user info is not kept.
        #expect(request.mirrors.map(\.absoluteString) == ["https://mirror.test/file.bin"])
        // Setting a default while others are set changes that field alone.
        request.maxConnections = 1
        #expect(request.maxConnections == 1 && request.maxBytesPerSecond == 1000 && request.mirrors.count == 1)
        request.mirrors = []
        request.maxBytesPerSecond = nil
        #expect(request == Self.plain)
        #expect(request.hashValue == Self.plain.hashValue)
        // Clamped values are compared once clamped: 0 connections is 1, the default.
        request.maxConnections = 0
        #expect(request == Self.plain)
        request.minimumSegmentSize = 0
        #expect(request.minimumSegmentSize == 1 && request != Self.plain)
    }
}
