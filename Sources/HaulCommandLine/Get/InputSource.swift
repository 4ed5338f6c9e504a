import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where `haul get`'s entries come from: the command line's URLs, then the input file's. Read once to check
/// everything, and again to run: nothing of a long list is kept in between.
struct InputSource: Sendable {
    var arguments: [String]
    var file: (spool: InputSpool, name: String)?

    /// Reads the entries from the start.
    func makeReader() -> Reader {
        Reader(arguments: arguments, file: file.map { $0.spool.reader(name: $0.name) })
    }

    /// The entries of one pass, in order, each numbered (`ordinal`, from 0) in that order.
    struct Reader {
        let arguments: [String]
        var file: InputFile?
        var nextArgument = 0
        /// Entries returned so far.
        private(set) var entryCount = 0

        init(arguments: [String], file: InputFile?) {
            self.arguments = arguments
            self.file = file
        }

        /// The next entry or problem; `nil` at the end.
        /// - Throws: `UsageFailure` when the input file cannot be read.
        mutating func next() throws(UsageFailure) -> InputItem? {
            let item: InputItem?
            if nextArgument < arguments.count {
                defer { nextArgument += 1 }
                item = .entry(
                    InputEntry(
                        source: InputOrigin(source: "argument \(nextArgument + 1)"), url: arguments[nextArgument]))
            } else {
                do {
                    item = try file?.next()
                } catch {
                    throw UsageFailure([
                        InputProblem(origin: "-i/--input-file", message: "cannot read it: \(GetCommand.reason(error))")
                    ])
                }
            }
            if case .entry = item { entryCount += 1 }
            return item
        }
    }
}

/// The input file, readable as often as planning needs: a regular file is read in place, up to the size it had
/// when opened (lines appended later are not read); anything else (standard input, a pipe, a FIFO, a process
/// substitution) is first copied to an unlinked temporary file, which goes away with the process.
final class InputSpool: Sendable {
    let descriptor: Int32
    let length: Int64

    /// Opens `path` (standard input for `nil`), spooling it when it cannot be read twice.
    /// - Throws: `POSIXError` (a directory is `EISDIR`).
    init(path: String?) throws {
        let source = path.map { open($0, O_RDONLY | O_CLOEXEC) } ?? 0
        guard source >= 0 else { throw Self.lastError() }
        var info = stat()
        guard fstat(source, &info) == 0 else {
            let error = Self.lastError()
            if path != nil { close(source) }
            throw error
        }
        switch info.st_mode & S_IFMT {
        case S_IFDIR:
            if path != nil { close(source) }
            throw POSIXError(.EISDIR)
        case S_IFREG where path != nil:
            descriptor = source
            length = Int64(info.st_size)
        default:
            defer { if path != nil { close(source) } }
            (descriptor, length) = try Self.spool(source)
        }
    }

    deinit { close(descriptor) }

    /// A reader of the whole file, from its start.
    func reader(name: String) -> InputFile {
        InputFile(descriptor: descriptor, length: length, name: name)
    }

    /// Copies `source` to its end into a temporary file.
    private static func spool(_ source: Int32) throws -> (Int32, Int64) {
        let spool = try makeTemporaryFile()
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        var length: Int64 = 0
        do {
            while true {
                let count = buffer.withUnsafeMutableBytes { read(source, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                guard count >= 0 else { throw lastError() }
                if count == 0 { return (spool, length) }
                try writeAll(buffer[..<count], to: spool)
                length += Int64(count)
            }
        } catch {
            close(spool)
            throw error
        }
    }

    /// An unnamed file in the temporary directory (`TMPDIR`, else `/tmp`), owner-only: lists may carry credentials.
    static func makeTemporaryFile() throws -> Int32 {
        let directory = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array((directory + "/.haul-input-XXXXXX").utf8CString)
        let descriptor = template.withUnsafeMutableBufferPointer { buffer in buffer.baseAddress.map { mkstemp($0) } }
        guard let descriptor, descriptor >= 0 else { throw lastError() }
        unlink(String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self))
        _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
        return descriptor
    }

    static func writeAll(_ bytes: ArraySlice<UInt8>, to descriptor: Int32) throws {
        var rest = bytes
        while !rest.isEmpty {
            let written = rest.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written >= 0 else { throw lastError() }
            rest = rest.dropFirst(written)
        }
    }

    static func lastError() -> POSIXError { POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
}
