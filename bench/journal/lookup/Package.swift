// swift-tools-version: 6.1
// Look-ups of the SQLite journal against the number of records it holds (bench/journal/lookup.sh). A package of its
// own on the public API, so that it builds against any checkout of Haul: HAUL_ROOT (default: this repository).
import Foundation
import PackageDescription

let root = ProcessInfo.processInfo.environment["HAUL_ROOT"] ?? "../../.."

let package = Package(
    name: "bench-journal-lookup",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "Haul", path: root)],
    targets: [
        .executableTarget(
            name: "bench-journal-lookup",
            dependencies: [.product(name: "Haul", package: "Haul"), .product(name: "HaulSQLite", package: "Haul")])
    ]
)
