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
        .executable(name: "haul", targets: ["haul"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2")
    ],
    targets: [
        // The asynchronous Operation done right. Foundation only: no networking.
        .target(name: "HaulOperations"),
        .testTarget(name: "HaulOperationsTests", dependencies: ["HaulOperations"]),

        .executableTarget(
            name: "haul",
            dependencies: [
                .product(name: "ArgumentParser", package: "swift-argument-parser")
            ]
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
    ]
)

for target in package.targets where target.type != .plugin {
    target.swiftSettings = (target.swiftSettings ?? []) + upcomingFeatures
}
