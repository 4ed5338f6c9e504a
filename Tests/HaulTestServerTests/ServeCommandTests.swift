import Foundation
import HaulTestServer
import HaulTestSupport
import Synchronization
import Testing

/// End-to-end runs of the built `haul serve` binary.
@Suite(.timeLimit(.minutes(1)))
struct ServeCommandTests {
    static let binary = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent(".build/debug/haul")

    static var binaryExists: Bool { FileManager.default.isExecutableFile(atPath: binary.path) }

    @Test(.enabled(if: binaryExists, "haul binary not built at .build/debug/haul; run `swift build` first"))
    func servesADirectoryAndStopsCleanlyOnSIGINT() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-serve-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try Data("served by haul\n".utf8).write(to: directory.appendingPathComponent("hello.txt"))

        let process = Process()
        process.executableURL = Self.binary
        process.arguments = ["serve", directory.path, "--port", "0"]
        let output = Pipe()
        process.standardOutput = output
        let collected = Mutex("")
        output.fileHandleForReading.readabilityHandler = { handle in
            let text = String(decoding: handle.availableData, as: UTF8.self)
            collected.withLock { $0 += text }
        }
        let exited = Mutex<Int32?>(nil)
        process.terminationHandler = { process in exited.withLock { $0 = process.terminationStatus } }
        try process.run()
        defer { if process.isRunning { process.terminate() } }

        try await eventually("haul serve prints its URL or exits") {
            collected.withLock { $0.contains("\n") } || exited.withLock { $0 != nil }
        }
        let firstLine = collected.withLock { $0 }.split(separator: "\n").first.map(String.init) ?? ""
        #expect(firstLine.hasPrefix("Serving on http://127.0.0.1:"))
        let port = try #require(firstLine.split(separator: ":").last.flatMap { Int($0) })

        let file = try await RawHTTPClient.get("/hello.txt", port: port)
        #expect(file.status == 200)
        #expect(file.body == Array("served by haul\n".utf8))
        let generated = try await RawHTTPClient.get("/bytes/cli?size=100&cutAfter=10", port: port)
        #expect(generated.body == TestServer.expectedBytes(name: "cli", size: 10))

        process.interrupt()
        try await eventually("haul serve exits") { exited.withLock { $0 != nil } }
        #expect(exited.withLock { $0 } == 0)
        #expect(process.terminationReason == .exit)
        // 15 bytes of hello.txt and the 10 sent before the cut.
        try await eventually("haul serve prints what it served") { collected.withLock { $0.contains("Stopped") } }
        #expect(collected.withLock { $0 }.contains("Stopped after 2 requests; 25 body bytes sent; at most 1 in flight"))
        output.fileHandleForReading.readabilityHandler = nil
    }

    @Test(.enabled(if: binaryExists, "haul binary not built at .build/debug/haul; run `swift build` first"))
    func helpListsTheFaultParameters() async throws {
        let process = Process()
        process.executableURL = Self.binary
        process.arguments = ["serve", "--help"]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let help = String(decoding: data, as: UTF8.self)
        for name in Fault.queryParameterNames {
            #expect(help.contains("\(name)="), "help lacks \(name)")
        }
    }
}
