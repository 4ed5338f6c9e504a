import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

/// A review of the files a user hands to haul: `haul get -i` lists and `haul daemon`'s aria2 files.
@Suite("input files under review", .timeLimit(.minutes(2)))
struct InputFilesReviewTests {
    @Test("haul get -i: out= with control characters (ESC, BEL, CR) is refused naming its entry, as the daemon does")
    func getOutWithControlCharacters() async throws {
        let dir = try TemporaryDirectory()
        let list = dir.file("list.txt")
        try "http://127.0.0.1:1/f\n out=a\u{1B}]0;pwned\u{07}b\nhttp://127.0.0.1:1/g\n out=c\rd\n".write(
            to: list, atomically: true, encoding: .utf8)
        let result = try await HaulProcess.run(["get", "-d", dir.path, "-i", list.path])
        #expect(result.status == 2, "\(result)")
        // Named by their entries' lines, as every problem with an entry is.
        #expect(result.stderr.contains("\(list.path):1:") && result.stderr.contains("\(list.path):3:"), "\(result)")
        #expect(result.stderr.contains("is not a file name"), "\(result)")
        #expect(!result.stderr.contains("\u{1B}"), "\(result)")
    }

    @Test("haul get -i: an option line that is not KEY=VALUE is named without the secret on it")
    func getBadOptionLineKeepsItsSecret() async throws {
        let dir = try TemporaryDirectory()
        let list = dir.file("list.txt")
        try "http://127.0.0.1:1/f\n header Authorization: Bearer tok-SECRET-9\n".write(
            to: list, atomically: true, encoding: .utf8)
        let result = try await HaulProcess.run(["get", "-d", dir.path, "-i", list.path])
        #expect(result.status == 2 && result.stderr.contains("\(list.path):2:"), "\(result)")
        #expect(!result.stderr.contains("tok-SECRET-9"), "\(result)")
    }

    @Test("haul daemon: a --conf-path or -i that is a directory, a FIFO or not UTF-8 is refused saying which")
    func daemonUnreadableFiles() async throws {
        let dir = try TemporaryDirectory()
        let folder = dir.file("folder")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let directory = try await HaulProcess.run([
            "daemon", "-d", dir.path, "-i", folder.path, "--rpc-listen", "127.0.0.1:0", "--rpc-no-secret",
        ])
        #expect(directory.status != 0 && directory.stderr.contains("is a directory"), "\(directory)")

        let fifo = dir.file("fifo")
        #expect(mkfifo(fifo.path, 0o600) == 0)
        let pipe = try await HaulProcess.run([
            "daemon", "-d", dir.path, "--conf-path", fifo.path, "--rpc-listen", "127.0.0.1:0", "--rpc-no-secret",
        ])
        #expect(pipe.status != 0 && pipe.stderr.contains("not a regular file"), "\(pipe)")
        #expect(!pipe.stderr.contains("permission"), "\(pipe)")

        let latin = dir.file("latin1.txt")
        try Data("http://127.0.0.1:1/a\nhttp://127.0.0.1:1/caf\u{E9}\n".utf8).write(to: latin)
        var bytes = try Data(contentsOf: latin)
        bytes.replaceSubrange(bytes.count - 3..<bytes.count - 1, with: [0xE9])  // é in Latin-1
        try bytes.write(to: latin)
        let notUTF8 = try await HaulProcess.run([
            "daemon", "-d", dir.path, "-i", latin.path, "--rpc-listen", "127.0.0.1:0", "--rpc-no-secret",
        ])
        #expect(notUTF8.status != 0 && notUTF8.stderr.contains("\(latin.path):2: is not UTF-8 text"), "\(notUTF8)")
    }
}
