// Drives the download engine for bench/download/run.sh and bench/queue/run.sh: one URL to one file, or a list of
// URLs into a directory through a DownloadQueue of the given width. Prints one line: `seconds=S bytes=B files=N maxrss_kib=K`.
//
//   bench-download --transport nio|async-http-client|urlsession --out FILE URL
//   bench-download --transport nio|async-http-client|urlsession --width 8 --dir DIR --list URLS.txt
import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulNIO
import HaulURLSession

#if canImport(Glibc)
import Glibc
let rusageSelf = RUSAGE_SELF.rawValue
#else
import Darwin
let rusageSelf = RUSAGE_SELF
#endif

struct Options {
    var transport = "nio"
    var out: String?
    var dir: String?
    var list: String?
    var width = 8
    var url: String?
}

func parse() -> Options {
    var options = Options()
    var arguments = CommandLine.arguments.dropFirst().makeIterator()
    while let argument = arguments.next() {
        switch argument {
        case "--transport": options.transport = arguments.next() ?? options.transport
        case "--out": options.out = arguments.next()
        case "--dir": options.dir = arguments.next()
        case "--list": options.list = arguments.next()
        case "--width": options.width = Int(arguments.next() ?? "") ?? options.width
        default: options.url = argument
        }
    }
    return options
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("bench-download: \(message)\n".utf8))
    exit(2)
}

let options = parse()
let transport: any HTTPTransport =
    switch options.transport {
    case "nio": NIOTransport()
    case "urlsession": URLSessionTransport()
    case "async-http-client": AsyncHTTPClientTransport.shared
    default: fail("unknown transport \(options.transport)")
    }
var configuration = Downloader.Configuration()
configuration.retryPolicy = .none
let downloader = Downloader(transport: transport, configuration: configuration)

var requests: [DownloadRequest] = []
if let list = options.list, let dir = options.dir {
    guard let text = try? String(contentsOfFile: list, encoding: .utf8) else { fail("cannot read \(list)") }
    for line in text.split(separator: "\n") where !line.isEmpty {
        guard let url = URL(string: String(line)) else { fail("bad URL \(line)") }
        requests.append(
            DownloadRequest(
                url: url, destination: .directory(URL(fileURLWithPath: dir)),
                conflictPolicy: .overwrite))
    }
} else if let out = options.out, let text = options.url, let url = URL(string: text) {
    requests.append(
        DownloadRequest(url: url, destination: .file(URL(fileURLWithPath: out)), conflictPolicy: .overwrite))
} else {
    fail("give --out FILE URL, or --dir DIR --list FILE")
}

let start = ContinuousClock.now
// The list goes through a DownloadQueue, as `haul get` does: its admission and bookkeeping are part of what is
// measured.
let queue = DownloadQueue(
    downloader: downloader, configuration: .init(maxConcurrentDownloads: max(1, options.width)))
var totalBytes: Int64 = 0
for outcome in await queue.downloadAll(requests) {
    switch outcome {
    case .success(let result): totalBytes += result.size
    case .failure(let error): fail("\(error)")
    }
}
let seconds = (ContinuousClock.now - start) / .seconds(1)
var usage = rusage()
getrusage(rusageSelf, &usage)
print(
    String(
        format: "seconds=%.4f bytes=%lld files=%d maxrss_kib=%ld", seconds, totalBytes, requests.count,
        usage.ru_maxrss))
