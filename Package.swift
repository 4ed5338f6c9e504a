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
        .library(name: "HaulTestServer", targets: ["HaulTestServer"]),
        .executable(name: "haul", targets: ["haul"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
    ],
    targets: [
        // The asynchronous Operation done right. Foundation only: no networking.
        .target(name: "HaulOperations"),

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

    ]
)

for target in package.targets where target.type != .plugin {
    target.swiftSettings = (target.swiftSettings ?? []) + upcomingFeatures
}
