// swift-tools-version: 6.1
import PackageDescription

// Upcoming features switched on for every target, so the code base moves in one step when they become
// the default (the way swift-openapi-runtime does it).
let upcomingFeatures: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let downloadExampleDependencies: [Target.Dependency] = [
    "Haul", "HaulAsyncHTTPClient", "HaulTestServer", "ExampleSupport",
]

let package = Package(
    name: "Haul",
    // Mutex (Synchronization) needs these on Apple platforms; Linux has it with the toolchain.
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "HaulOperations", targets: ["HaulOperations"]),
        .library(name: "Haul", targets: ["Haul"]),
        .library(name: "HaulURLSession", targets: ["HaulURLSession"]),
        .library(name: "HaulAsyncHTTPClient", targets: ["HaulAsyncHTTPClient"]),
        .library(name: "HaulNIO", targets: ["HaulNIO"]),
        .library(name: "HaulCombine", targets: ["HaulCombine"]),
        .library(name: "HaulSQLite", targets: ["HaulSQLite"]),
        .library(name: "HaulPostgres", targets: ["HaulPostgres"]),
        .library(name: "HaulTestServer", targets: ["HaulTestServer"]),
        .library(name: "HaulDaemon", targets: ["HaulDaemon"]),
        .library(name: "HaulMetrics", targets: ["HaulMetrics"]),
        .executable(name: "haul", targets: ["haul"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // Certificates made at run time for the TLS test server, and read to explain a refused one.
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        // Ordered stores into the journal's mapped log (HaulSQLite); already in the graph through swift-nio.
        .package(url: "https://github.com/apple/swift-atomics", from: "1.2.0"),
        .package(url: "https://github.com/OpenCombine/OpenCombine", from: "0.14.0"),
        // SQLite: the journal (HaulSQLite) and the quotes example.
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        // PostgreSQL: the queue many workers share (HaulPostgres).
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // Metrics (`/metrics`): swift-metrics' API, exposed in Prometheus's text format by swift-prometheus.
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        // `haul daemon` and `haul worker` as services: SIGTERM becomes a graceful shutdown, bounded in time.
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        // `swift package generate-documentation` for the DocC catalogs (.ci/run builds them).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // The asynchronous Operation done right. Foundation only: no networking.
        .target(name: "HaulOperations"),
        .testTarget(name: "HaulOperationsTests", dependencies: ["HaulOperations", "HaulTestSupport"]),

        // The download engine: one download done right, the HTTPTransport protocol, URLSessionTransport.
        .target(
            name: "Haul",
            dependencies: [
                "HaulOperations",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                // The queue's waiting lists (Deque) and its host heap (Heap); NIO depends on them already.
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "HeapModule", package: "swift-collections"),
            ]
        ),
        // The Apple default transport. Kept apart so that FoundationNetworking (on Linux, libcurl and the libraries it
        // needs, loaded at every start of a program) stays out of `Haul` and of `haul` on Linux.
        .target(
            name: "HaulURLSession",
            dependencies: [
                "Haul", "HaulOperations",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "HTTPTypesFoundation", package: "swift-http-types"),
            ]
        ),
        // The Linux default transport. Kept apart so that AsyncHTTPClient/NIO stay out of `Haul`.
        .target(
            name: "HaulAsyncHTTPClient",
            dependencies: [
                "Haul", "HaulNIOSupport", "HaulOperations",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        // What the NIO-based transports share: TLS settings as swift-nio-ssl takes them, and SwiftNIO's errors
        // in words (a refused certificate explained). Not a product.
        .target(
            name: "HaulNIOSupport",
            dependencies: [
                "Haul",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ]
        ),

        // Haul's own HTTP/1.1 client on SwiftNIO, http and https: `haul get`'s default (HTTP/2 goes to a fallback).
        .target(
            name: "HaulNIO",
            dependencies: [
                "Haul", "HaulNIOSupport", "HaulOperations",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
            ]
        ),

        // The durable journal: SQLite through GRDB. Kept apart so that SQLite stays out of `Haul`.
        .target(
            name: "HaulSQLite",
            dependencies: [
                "Haul", .product(name: "GRDB", package: "GRDB.swift"),
                // SQLite's C interface for the write path (see SQLiteJournal's WriteStatements).
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Atomics", package: "swift-atomics"),
            ]
        ),
        .testTarget(
            name: "HaulSQLiteTests",
            dependencies: [
                "HaulSQLite", "HaulOperations", "HaulAsyncHTTPClient", "HaulTestServer", "HaulTestSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),

        // The queue many workers share, in PostgreSQL (postgres-nio). Kept apart so that PostgreSQL stays out of `Haul`.
        .target(
            name: "HaulPostgres",
            dependencies: [
                "Haul", "HaulOperations", "HaulNIOSupport",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOCore", package: "swift-nio"),
                // A worker's claims, claim latency, lease renewals and database errors, to a factory it is given.
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ]
        ),
        .testTarget(
            name: "HaulPostgresTests",
            dependencies: [
                "HaulPostgres", "Haul", "HaulOperations", "HaulNIO", "HaulTestServer", "HaulTestSupport",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),

        // Publishers over the queue: Combine on Apple platforms, OpenCombine elsewhere.
        .target(
            name: "HaulCombine",
            dependencies: [
                "Haul",
                .product(
                    name: "OpenCombine", package: "OpenCombine",
                    condition: .when(platforms: [.linux, .windows, .android, .wasi, .openbsd])),
            ]
        ),
        .testTarget(
            name: "HaulCombineTests",
            dependencies: ["HaulCombine", "HaulAsyncHTTPClient", "HaulTestServer", "HaulTestSupport"]),

        // Loopback HTTP/1.1 server (plain and TLS, with certificates made at run time) with Range support and fault
        // injection, for tests, bench and `haul serve`.
        .target(
            name: "HaulTestServer",
            dependencies: [
                "HaulOperations",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ]
        ),

        // Metrics and health of a running queue: what a DownloadQueue does, as swift-metrics counters and gauges in a
        // registry of its own, served in Prometheus's text format with `/healthz` and `/readyz` (MonitoringEndpoint)
        // by any HTTP server, or by MonitoringServer (swift-nio's HTTP/1.1) on a listener of its own.
        .target(
            name: "HaulMetrics",
            dependencies: [
                "Haul", "HaulOperations",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .testTarget(
            name: "HaulMetricsTests",
            dependencies: [
                "HaulMetrics", "Haul", "HaulNIO", "HaulTestServer", "HaulTestSupport",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ]
        ),

        // `haul`'s commands, option groups and displays; a library so that tests parse arguments in process.
        .target(
            name: "HaulCommandLine",
            dependencies: [
                // The commit `haul --version` names.
                "HaulBuildInfo",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                "Haul", "HaulAsyncHTTPClient", "HaulNIO", "HaulNIOSupport", "HaulSQLite", "HaulPostgres",
                "HaulTestServer", "HaulDaemon", "HaulMetrics",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                // `--transport urlsession` where URLSession is the system's own; on Linux it would bring libcurl in.
                .target(
                    name: "HaulURLSession",
                    condition: .when(platforms: [.macOS, .iOS, .tvOS, .watchOS, .visionOS])),
            ]
        ),
        // The commit the build's sources are at, written before every build by scripts/build-commit (a prebuild
        // command of the BuildCommit plugin): a plain `swift build` knows it as well as a release, with no flags.
        .target(name: "HaulBuildInfo", plugins: ["BuildCommit"]),
        .plugin(name: "BuildCommit", capability: .buildTool()),
        // `haul daemon`: downloads as a service behind aria2's JSON-RPC. Served with swift-nio's own HTTP/1.1 (already
        // the transport's and the test server's): a web framework would add a dozen packages for one endpoint.
        .target(
            name: "HaulDaemon",
            dependencies: [
                "Haul", "HaulOperations",
                // `haul daemon --db`: the control plane of a fleet of workers on the shared queue (Fleet).
                "HaulPostgres",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                // TLS for an RPC reached from other machines (--rpc-certificate), as the transport's TLS.
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                // The daemon's downloads and history across restarts (DaemonStore), as the journal keeps its files.
                .product(name: "GRDB", package: "GRDB.swift"),
                // The dashboard's session tokens are looked up by their digest.
                .product(name: "Crypto", package: "swift-crypto"),
                "HaulDashboardAssets",
                // `/metrics`, `/healthz` and `/readyz` on the RPC's listener.
                "HaulMetrics",
            ]
        ),
        // The dashboard's page, style and script, readable files under `assets/` compiled into the binary with C23's
        // `#embed`: a release binary serves them with nothing beside it, and no generator or plugin is built first.
        .target(name: "HaulDashboardAssets", exclude: ["assets"]),
        .testTarget(
            name: "HaulDaemonTests",
            dependencies: [
                "HaulDaemon", "Haul", "HaulMetrics", "HaulNIO", "HaulTestServer", "HaulTestSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                // The daemon's /metrics (MonitoringEndpoint) needs a registry.
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        // The command: HaulCommandLine's entry point and nothing else.
        .executableTarget(name: "haul", dependencies: ["HaulCommandLine"]),
        // Every command's arguments parsed in process into the library's configuration, and every usage error.
        .testTarget(
            name: "HaulCommandLineTests",
            dependencies: [
                "HaulCommandLine", "Haul", "HaulAsyncHTTPClient", "HaulNIO", "HaulPostgres", "HaulSQLite",
                "HaulTestServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),

        .testTarget(
            name: "HaulTestServerTests",
            dependencies: [
                "HaulTestServer", "HaulTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        // `haul get` / `haul demo` end to end: the built binary against a loopback server, and in a terminal.
        .testTarget(
            name: "HaulCLITests",
            dependencies: [
                "Haul", "HaulOperations", "HaulSQLite", "HaulPostgres", "HaulTestServer", "HaulTestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                // To make another program's database, which `--journal` must leave alone.
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        .testTarget(
            name: "HaulTests",
            dependencies: [
                "Haul", "HaulAsyncHTTPClient", "HaulNIO", "HaulURLSession", "HaulTestServer", "HaulTestSupport",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "HaulNIOTests",
            dependencies: [
                "Haul", "HaulNIO", "HaulOperations", "HaulTestServer", "HaulTestSupport",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "HTTPTypesFoundation", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        // Helpers the test targets share (scratch directories, bounded polling, a test configuration of the engine,
        // a raw-socket server that sends whatever bytes a test gives it).
        .target(
            name: "HaulTestSupport",
            dependencies: [
                "Haul", "HaulOperations", "HaulTestServer",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            path: "Tests/HaulTestSupport"),

        // The seeds' Operation scenarios, written with HaulOperations. Built and run by .ci/run.
        .executableTarget(
            name: "example-one-at-a-time", dependencies: ["HaulOperations"], path: "Examples/OneAtATime"),
        .executableTarget(
            name: "example-dependencies", dependencies: ["HaulOperations"], path: "Examples/Dependencies"),
        .executableTarget(
            name: "example-completion", dependencies: ["HaulOperations"], path: "Examples/CompletionAfterAll"),
        .executableTarget(
            name: "example-pipeline", dependencies: ["HaulOperations"], path: "Examples/Pipeline"),

        // The queue's scenarios against an in-process HaulTestServer; each checks its own claims and exits 1 if
        // one fails. Built and run by .ci/run, and by ExamplesTests.
        .target(name: "ExampleSupport", dependencies: ["HaulTestServer"], path: "Examples/Support"),
        .executableTarget(
            name: "example-loop-vs-queue", dependencies: downloadExampleDependencies, path: "Examples/LoopVersusQueue"),
        .executableTarget(
            name: "example-serial-downloads", dependencies: downloadExampleDependencies,
            path: "Examples/SerialDownloadOperations"),
        .executableTarget(
            name: "example-download-dependencies", dependencies: downloadExampleDependencies,
            path: "Examples/DownloadDependencies"),
        .executableTarget(
            name: "example-quotes-pipeline",
            dependencies: downloadExampleDependencies + [.product(name: "GRDB", package: "GRDB.swift")],
            path: "Examples/QuotesPipeline"),
        .executableTarget(
            name: "example-async-loop", dependencies: downloadExampleDependencies, path: "Examples/AsyncLoop"),
        .executableTarget(
            name: "example-combine", dependencies: downloadExampleDependencies + ["HaulCombine"],
            path: "Examples/CombineDownloads"),
        .testTarget(name: "ExamplesTests", dependencies: ["HaulTestSupport"]),

        // Benchmarks, not tests: `swift run -c release bench-operations` (see bench/README.md).
        .executableTarget(
            name: "bench-operations", dependencies: ["HaulOperations"], path: "bench/Sources/bench-operations"),
        .executableTarget(
            name: "bench-download", dependencies: ["Haul", "HaulNIO", "HaulAsyncHTTPClient", "HaulURLSession"],
            path: "bench/Sources/bench-download"),
        .executableTarget(
            name: "bench-queue", dependencies: ["Haul", "HaulURLSession"], path: "bench/Sources/bench-queue"),
        .executableTarget(
            name: "bench-floor",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
            ],
            path: "bench/Sources/bench-floor"),
    ]
)

for target in package.targets where target.type != .plugin {
    target.swiftSettings = (target.swiftSettings ?? []) + upcomingFeatures
}
