// The floor under `haul get`'s small files (issue "Small files at the cost of C"): the network and file steps of a
// download and nothing else, on SwiftNIO as `NIOTransport` uses it. Each of N keep-alive connections sends a GET,
// reads the response (status 200 and Content-Length required), writes the body into an unnamed file in the
// destination directory (`O_TMPFILE`), links it in under its name (`linkat`, as Haul publishes), then sends the next
// request. No queue, journal, events, retries, timeouts or checks: what a download costs beyond this is Haul's own.
//
//   bench-floor PORT PATHS DIRECTORY [LOOPS] [CONNECTIONS]
//
// PATHS holds one request path per line (`/small/f00001`), fetched from 127.0.0.1:PORT into DIRECTORY (which must
// exist) under the path's last component; LOOPS event loops (default 2), CONNECTIONS connections (default 8).
// bench/floor/run.sh runs it against `haul get` and curl. Linux only (O_TMPFILE).
import Foundation
import NIOCore
import NIOPosix
import Synchronization

#if os(Linux)
import Glibc

/// What every connection shares: the requests, where their files go, and the next one to send.
final class FloorRun: Sendable {
    let requests: [[UInt8]]
    let targets: [String]
    let directory: String
    private let next = Atomic<Int>(0)

    init(port: Int, paths: [String], directory: String) {
        requests = paths.map {
            Array("GET \($0) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUser-Agent: bench-floor\r\n\r\n".utf8)
        }
        targets = paths.map { directory + "/" + ($0.split(separator: "/").last.map(String.init) ?? $0) }
        self.directory = directory
    }

    /// The index of the next request to send, or `nil` once all are taken.
    func take() -> Int? {
        let index = next.wrappingAdd(1, ordering: .relaxed).oldValue
        return index < requests.count ? index : nil
    }
}

/// The failures a run stops at.
struct FloorError: Error, CustomStringConvertible {
    let description: String
}

/// One connection: a request, its response into a file, the next request.
final class FloorHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let run: FloorRun
    private let done: EventLoopPromise<Int>
    private var received = ByteBuffer()
    private var current: Int?
    private var files = 0
    private var ended = false

    init(run: FloorRun, done: EventLoopPromise<Int>) {
        self.run = run
        self.done = done
    }

    func channelActive(context: ChannelHandlerContext) {
        sendNext(context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        end(.failure(FloorError(description: "the server closed a connection after \(files) files")))
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        end(.failure(error))
        context.close(promise: nil)
    }

    private func end(_ result: Result<Int, any Error>) {
        guard !ended else { return }
        ended = true
        done.completeWith(result)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var incoming = unwrapInboundIn(data)
        received.writeBuffer(&incoming)
        do {
            while let (headLength, bodyLength) = try Self.head(in: received),
                received.readableBytes >= headLength + bodyLength, let index = current
            {
                received.moveReaderIndex(forwardBy: headLength)
                guard let body = received.readSlice(length: bodyLength) else { return }
                try publish(body, at: run.targets[index])
                files += 1
                received.discardReadBytes()
                sendNext(context)
            }
        } catch {
            errorCaught(context: context, error: error)
        }
    }

    private func sendNext(_ context: ChannelHandlerContext) {
        guard let index = run.take() else {
            current = nil
            end(.success(files))
            context.close(promise: nil)
            return
        }
        current = index
        var request = context.channel.allocator.buffer(capacity: run.requests[index].count)
        request.writeBytes(run.requests[index])
        context.writeAndFlush(wrapOutboundOut(request), promise: nil)
    }

    /// Writes `body` into an unnamed file of the destination directory and links it in at `path`.
    private func publish(_ body: ByteBuffer, at path: String) throws {
        let descriptor = open(run.directory, __O_TMPFILE | O_WRONLY | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw FloorError(description: "open(O_TMPFILE) failed: errno \(errno)") }
        defer { close(descriptor) }
        let written = body.withUnsafeReadableBytes { write(descriptor, $0.baseAddress, $0.count) }
        guard written == body.readableBytes else { throw FloorError(description: "short write to \(path)") }
        guard linkat(descriptor, "", AT_FDCWD, path, 0x1000) == 0 else {  // AT_EMPTY_PATH
            throw FloorError(description: "linkat to \(path) failed: errno \(errno)")
        }
    }

    /// The length of the response head at the start of `buffer` and its Content-Length, once the head is whole.
    private static func head(in buffer: ByteBuffer) throws -> (Int, Int)? {
        try buffer.withUnsafeReadableBytes { bytes -> (Int, Int)? in
            var lineStart = 0
            var length: Int?
            var index = 0
            while index + 1 < bytes.count {
                guard bytes[index] == 13, bytes[index + 1] == 10 else {
                    index += 1
                    continue
                }
                let line = bytes[lineStart..<index]
                if lineStart == 0 {
                    guard line.starts(with: "HTTP/1.1 200 ".utf8) else {
                        throw FloorError(description: "not a 200 response: \(String(decoding: line, as: UTF8.self))")
                    }
                } else if line.isEmpty {
                    guard let length else { throw FloorError(description: "a response without Content-Length") }
                    return (index + 2, length)
                } else if let colon = line.firstIndex(of: UInt8(ascii: ":")),
                    line[..<colon].elementsEqual("content-length".utf8, by: { $0 | 0x20 == $1 })
                {
                    length = line[(colon + 1)...].reduce(into: 0) { value, byte in
                        if (48...57).contains(byte) { value = value * 10 + Int(byte - 48) }
                    }
                }
                index += 2
                lineStart = index
            }
            return nil
        }
    }
}

let arguments = CommandLine.arguments
guard (4...6).contains(arguments.count), let port = Int(arguments[1]) else {
    FileHandle.standardError.write(Data("usage: bench-floor PORT PATHS DIRECTORY [LOOPS] [CONNECTIONS]\n".utf8))
    exit(2)
}
let loops = arguments.count > 4 ? Int(arguments[4]) ?? 0 : 2
let connections = arguments.count > 5 ? Int(arguments[5]) ?? 0 : 8
guard loops > 0, connections > 0 else {
    FileHandle.standardError.write(Data("bench-floor: LOOPS and CONNECTIONS must be numbers above 0\n".utf8))
    exit(2)
}
let paths: [String]
do {
    paths = try String(contentsOfFile: arguments[2], encoding: .utf8).split(separator: "\n").map(String.init)
} catch {
    FileHandle.standardError.write(Data("bench-floor: cannot read \(arguments[2]): \(error)\n".utf8))
    exit(2)
}
let run = FloorRun(port: port, paths: paths, directory: arguments[3])
let group = MultiThreadedEventLoopGroup(numberOfThreads: loops)
var results: [EventLoopFuture<Int>] = []
for _ in 0..<connections {
    let loop = group.next()
    let done = loop.makePromise(of: Int.self)
    results.append(done.futureResult)
    ClientBootstrap(group: loop)
        .channelOption(.tcpOption(.tcp_nodelay), value: 1)
        .channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(FloorHandler(run: run, done: done))
            }
        }
        .connect(host: "127.0.0.1", port: port)
        .whenFailure { done.fail($0) }
}
do {
    var files = 0
    for result in results { files += try result.wait() }
    guard files == paths.count else {
        throw FloorError(description: "\(files) files of \(paths.count)")
    }
} catch {
    FileHandle.standardError.write(Data("bench-floor: \(error)\n".utf8))
    exit(1)
}
#else
FileHandle.standardError.write(Data("bench-floor: Linux only (O_TMPFILE)\n".utf8))
exit(1)
#endif
