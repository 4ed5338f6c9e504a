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
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        // The asynchronous Operation done right. Foundation only: no networking.
        .target(name: "HaulOperations"),
        .testTarget(name: "HaulOperationsTests", dependencies: ["HaulOperations"]),

        .executableTarget(
            name: "haul",
            dependencies: [
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),

    ]
)

for target in package.targets where target.type != .plugin {
    target.swiftSettings = (target.swiftSettings ?? []) + upcomingFeatures
}
