import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Debian's Prometheus on a free loopback port, scraping the targets a test gives it every second, and asked with
/// PromQL over its HTTP API.
package final class Prometheus: Sendable {
    /// A scrape job: its name, `HOST:PORT` targets, and the file of a bearer token to send (`credentials_file`).
    package struct Job: Sendable {
        package var name: String
        package var targets: [String]
        package var bearerTokenFile: String?

        package init(name: String, targets: [String], bearerTokenFile: String? = nil) {
            self.name = name
            self.targets = targets
            self.bearerTokenFile = bearerTokenFile
        }
    }

    /// One sample of a query's answer: its labels and value.
    package struct Sample: Sendable {
        package var labels: [String: String]
        package var value: Double
    }

    /// The port its HTTP API listens on (127.0.0.1).
    package let port: Int
    private let directory: String
    private let process: ChildProcess

    /// Starts Prometheus scraping `jobs` every second and waits until it answers.
    ///
    /// - Throws: ``FixtureError`` when Prometheus is not installed (`scripts/test` installs Debian's) or does not
    ///   start.
    package init(jobs: [Job]) async throws {
        let binary = try installedBinary("prometheus", package: "prometheus", at: ["/usr/bin/prometheus"])
        let directory = try makeDirectory("prometheus")
        self.directory = directory
        var configuration = "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n"
        for job in jobs {
            configuration += "  - job_name: \(job.name)\n"
            if let file = job.bearerTokenFile {
                configuration += "    authorization:\n      type: Bearer\n      credentials_file: \(file)\n"
            }
            configuration +=
                "    static_configs:\n      - targets: [\(job.targets.map { "'\($0)'" }.joined(separator: ", "))]\n"
        }
        try configuration.write(toFile: directory + "/prometheus.yml", atomically: true, encoding: .utf8)
        (port, process) = try await startOnFreePort(
            "prometheus", within: .seconds(30), log: { "" },
            launch: { port in
                try ChildProcess(
                    binary,
                    [
                        "--config.file=\(directory)/prometheus.yml", "--storage.tsdb.path=\(directory)/data",
                        "--web.listen-address=127.0.0.1:\(port)", "--log.level=warn",
                    ], signalsAtDefault: true)
            },
            cleanUp: { try? FileManager.default.removeItem(atPath: directory) })
    }

    /// Starts Prometheus (see ``init(jobs:)``), runs `body` with it, and stops it however `body` ends.
    package static func withRunning<Result>(jobs: [Job], _ body: (Prometheus) async throws -> Result) async throws
        -> Result
    {
        try await running(try await Prometheus(jobs: jobs), stop: { await $0.stop() }, body)
    }

    /// The answer to the PromQL `query` now: its samples (a vector), or an error saying what Prometheus said.
    package func query(_ query: String) async throws -> [Sample] {
        let encoded = query.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? query
        let answer = try await RawHTTP.send(
            port: port, method: "GET", path: "/api/v1/query?query=\(encoded)",
            headers: [("Host", "127.0.0.1:\(port)")])
        guard let object = try? JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any],
            object["status"] as? String == "success", let data = object["data"] as? [String: Any],
            let result = data["result"] as? [[String: Any]]
        else { throw FixtureError("Prometheus answered \(answer.status) to '\(query)': \(answer.text)") }
        return result.compactMap { sample in
            guard let value = sample["value"] as? [Any], value.count == 2, let text = value[1] as? String,
                let number = Double(text)
            else { return nil }
            return Sample(labels: sample["metric"] as? [String: String] ?? [:], value: number)
        }
    }

    /// The health of each target (`up`, `down`, `unknown`) by job, and the last scrape's error.
    package func targets() async throws -> [(job: String, health: String, error: String)] {
        let answer = try await RawHTTP.send(
            port: port, method: "GET", path: "/api/v1/targets", headers: [("Host", "127.0.0.1:\(port)")])
        guard let object = try? JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any],
            let data = object["data"] as? [String: Any], let active = data["activeTargets"] as? [[String: Any]]
        else { throw FixtureError("Prometheus answered \(answer.status) to /api/v1/targets: \(answer.text)") }
        return active.map { target in
            (
                (target["labels"] as? [String: String])?["job"] ?? "", target["health"] as? String ?? "",
                target["lastError"] as? String ?? ""
            )
        }
    }

    /// Stops Prometheus and removes its directory.
    package func stop() async {
        process.send(SIGTERM)
        _ = await process.finish()
        try? FileManager.default.removeItem(atPath: directory)
    }
}
