// swift-tools-version: 6.1
import PackageDescription

// Upcoming features switched on for every target, so the code base moves in one step when they become
// the default (the way swift-openapi-runtime does it).
let upcomingFeatures: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "Haul",
    // Mutex (Synchronization) needs these on Apple platforms; Linux has it with the toolchain.
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "HaulOperations", targets: ["HaulOperations"]),
        .library(name: "Haul", targets: ["Haul"]),
        .library(name: "HaulAsyncHTTPClient", targets: ["HaulAsyncHTTPClient"]),
        .library(name: "HaulTestServer", targets: ["HaulTestServer"]),
        .executable(name: "haul", targets: ["haul"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
    ],
    targets: [
        // The asynchronous Operation done right. Foundation only: no networking.
        .target(name: "HaulOperations"),
        .testTarget(name: "HaulOperationsTests", dependencies: ["HaulOperations"]),

        // The download engine: one download done right, the HTTPTransport protocol, URLSessionTransport.
        .target(
            name: "Haul",
            dependencies: [
                "HaulOperations",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "HTTPTypesFoundation", package: "swift-http-types"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                // The queue's waiting lists (Deque) and its host heap (Heap); NIO depends on them already.
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "HeapModule", package: "swift-collections"),
            ]
        ),
        // The Linux default transport. Kept apart so that AsyncHTTPClient/NIO stay out of `Haul`.
        .target(
            name: "HaulAsyncHTTPClient",
            dependencies: [
                "Haul",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),

        // Loopback HTTP/1.1 server with Range support and fault injection, for tests, bench and `haul serve`.
        .target(
            name: "HaulTestServer",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),

        .executableTarget(
            name: "haul",
            dependencies: [
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                "HaulTestServer",
            ]
        ),

        .testTarget(
            name: "HaulTestServerTests",
            dependencies: [
                "HaulTestServer",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "HaulTests",
            dependencies: ["Haul", "HaulAsyncHTTPClient", "HaulTestServer"]
        ),

        // The seeds' Operation scenarios, written with HaulOperations. Built and run by .ci/run.
        .executableTarget(
            name: "example-one-at-a-time", dependencies: ["HaulOperations"], path: "Examples/OneAtATime"),
        .executableTarget(
            name: "example-dependencies", dependencies: ["HaulOperations"], path: "Examples/Dependencies"),
        .executableTarget(
            name: "example-completion", dependencies: ["HaulOperations"], path: "Examples/CompletionAfterAll"),
        .executableTarget(
            name: "example-pipeline", dependencies: ["HaulOperations"], path: "Examples/Pipeline"),

        // Benchmarks, not tests: `swift run -c release bench-operations` (see bench/README.md).
        .executableTarget(name: "bench-operations", dependencies: ["HaulOperations"], path: "bench/Operations"),
        .executableTarget(
            name: "bench-download", dependencies: ["Haul", "HaulAsyncHTTPClient"], path: "bench/Download"),
    ]
)

for target in package.targets where target.type != .plugin {
    target.swiftSettings = (target.swiftSettings ?? []) + upcomingFeatures
}
