import Foundation
package import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Debian's Chromium, headless, driven through Debian's chromedriver by the W3C WebDriver protocol (JSON over HTTP,
/// what Selenium sends) on a free loopback port: a real browser running the dashboard's page, its script and its
/// security rules (CSP, SameSite cookies, CORS).
///
/// A missing `chromium` or `chromedriver` fails the test (`scripts/test` installs both).
package final class Browser: Sendable {
    /// The browser's executable.
    package static let chromium = "/usr/bin/chromium"
    /// The driver's executable.
    package static let chromedriver = "/usr/bin/chromedriver"

    private let driver: ChildProcess
    private let port: Int
    private let session: String
    private let profile: TemporaryDirectory

    /// A WebDriver error (`no such element`, `javascript error`...), with the driver's message.
    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    private init(driver: ChildProcess, port: Int, session: String, profile: TemporaryDirectory) {
        self.driver = driver
        self.port = port
        self.session = session
        self.profile = profile
    }

    /// Starts chromedriver and a headless Chromium session with its console recorded.
    package static func start() async throws -> Browser {
        for tool in [chromium, chromedriver] where !FileManager.default.isExecutableFile(atPath: tool) {
            throw Failure(description: "\(tool) is missing: scripts/test installs chromium and chromium-driver")
        }
        let port = try freeLoopbackPort()
        let driver = try ChildProcess(
            chromedriver, ["--port=\(port)", "--allowed-ips=127.0.0.1"], signalsAtDefault: true)
        do {
            try await eventuallyAsync("chromedriver answering on port \(port)", within: .seconds(30)) {
                let status = try? await request(port: port, "GET", "/status")
                return ((status?["value"] as? [String: Any])?["ready"] as? Bool) == true
            }
            let profile = try TemporaryDirectory()
            let options: [String: Any] = [
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", "--disable-extensions", "--window-size=1280,900",
                    "--user-data-dir=\(profile.path)",
                ],
            ]
            let capabilities: [String: Any] = [
                "capabilities": [
                    "alwaysMatch": [
                        "browserName": "chrome", "goog:chromeOptions": options,
                        "goog:loggingPrefs": ["browser": "ALL"],
                    ]
                ]
            ]
            let answer = try await request(port: port, "POST", "/session", capabilities)
            guard let value = answer["value"] as? [String: Any], let session = value["sessionId"] as? String else {
                throw Failure(description: "chromedriver started no session: \(answer)")
            }
            return Browser(driver: driver, port: port, session: session, profile: profile)
        } catch {
            driver.send(SIGTERM)
            _ = await driver.finish()
            throw error
        }
    }

    /// Ends the session (the browser quits) and stops the driver.
    package func close() async {
        _ = try? await Self.request(port: port, "DELETE", "/session/\(session)")
        driver.send(SIGTERM)
        _ = await driver.finish()
    }

    /// Opens `url` and waits for it to load.
    package func open(_ url: String) async throws {
        _ = try await command("POST", "url", ["url": url])
    }

    /// Runs `script` (a function body; `arguments` is its arguments) in the page and returns what it returns.
    @discardableResult
    package func run(_ script: String, _ arguments: [Any] = []) async throws -> Any? {
        try await command("POST", "execute/sync", ["script": script, "args": arguments])
    }

    /// Runs `script`, whose last argument is the callback it calls with its result, and waits for that result.
    package func runAsync(_ script: String, _ arguments: [Any] = []) async throws -> Any? {
        try await command("POST", "execute/async", ["script": script, "args": arguments])
    }

    /// The WebDriver reference of the first element `selector` (CSS) matches, waiting up to 10 s for one to be
    /// there (a page that draws what the daemon pushes draws it a moment later), as Playwright's locators wait.
    package func element(_ selector: String) async throws -> String {
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            do {
                let found = try await command("POST", "element", ["using": "css selector", "value": selector])
                if let reference = (found as? [String: Any])?.values.first as? String { return reference }
                throw Failure(description: "no element for \(selector)")
            } catch let failure as Failure where ContinuousClock.now < deadline {
                _ = failure
                try await Task.sleep(for: .milliseconds(50))
            }
        }
    }

    /// Clicks the element `selector` matches, as a user does (it must be visible and not covered).
    package func click(_ selector: String) async throws {
        _ = try await command("POST", "element/\(try await element(selector))/click", [:])
    }

    /// Types `text` into the element `selector` matches, key by key, after clearing it.
    package func type(_ text: String, into selector: String) async throws {
        let reference = try await element(selector)
        _ = try await command("POST", "element/\(reference)/clear", [:])
        _ = try await command("POST", "element/\(reference)/value", ["text": text])
    }

    /// The text of the element `selector` matches, as shown.
    package func text(_ selector: String) async throws -> String {
        try await command("GET", "element/\(try await element(selector))/text") as? String ?? ""
    }

    /// Waits until `script` (a function body) returns `true` in the page.
    package func waitUntil(
        _ what: String, within limit: Duration = .seconds(20), _ script: String, _ arguments: [Any] = [],
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        try await eventuallyAsync(
            what, within: limit, { (try? await run(script, arguments)) as? Bool == true },
            sourceLocation: sourceLocation)
    }

    /// Runs the Chrome DevTools Protocol command `name` with `parameters` (through chromedriver's `goog/cdp/execute`):
    /// emulated media, for one.
    package func devTools(_ name: String, _ parameters: [String: Any]) async throws {
        _ = try await command("POST", "goog/cdp/execute", ["cmd": name, "params": parameters])
    }

    /// Sends `keys` (WebDriver's key codes: "\u{E007}" is Enter, "\u{E004}" Tab, "\u{E014}" the right arrow) to the
    /// element that has the focus, as a user's keyboard does.
    package func press(_ keys: String) async throws {
        let active = try await command("GET", "element/active")
        guard let reference = (active as? [String: Any])?.values.first as? String else {
            throw Failure(description: "no element has the focus")
        }
        _ = try await command("POST", "element/\(reference)/value", ["text": keys])
    }

    /// Saves what the window shows as `NAME.png` in the directory `$HAUL_SCREENSHOTS` names, which the README's
    /// pictures come from (`HAUL_SCREENSHOTS=docs/screenshots swift test --filter "Dashboard|Fleet page"`); does
    /// nothing without it.
    package func screenshot(_ name: String) async throws {
        guard let directory = ProcessInfo.processInfo.environment["HAUL_SCREENSHOTS"], !directory.isEmpty else {
            return
        }
        guard let text = try await command("GET", "screenshot") as? String, let png = Data(base64Encoded: text) else {
            throw Failure(description: "chromedriver sent no screenshot")
        }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try png.write(to: URL(fileURLWithPath: directory).appendingPathComponent(name + ".png"))
    }

    /// The console's messages at level SEVERE since the last call: script errors, failed loads, CSP refusals.
    package func consoleErrors() async throws -> [String] {
        let entries = try await command("POST", "se/log", ["type": "browser"]) as? [[String: Any]] ?? []
        return entries.filter { ($0["level"] as? String) == "SEVERE" }.compactMap { $0["message"] as? String }
    }

    private func command(_ method: String, _ path: String, _ body: [String: Any]? = nil) async throws -> Any? {
        let answer = try await Self.request(port: port, method, "/session/\(session)/\(path)", body)
        if let value = answer["value"] as? [String: Any], let error = value["error"] as? String {
            throw Failure(description: "\(path): \(error): \(value["message"] as? String ?? "")")
        }
        return answer["value"]
    }

    /// One WebDriver request, its answer read to its `Content-Length`: chromedriver keeps the connection open
    /// whatever the request's `Connection` says.
    private static func request(port: Int, _ method: String, _ path: String, _ body: [String: Any]? = nil)
        async throws -> [String: Any]
    {
        let bytes = try body.map { try [UInt8](JSONSerialization.data(withJSONObject: $0)) } ?? []
        let answer = try await onOwnThread { () throws -> [UInt8] in
            let fd = try connectedLoopbackSocket(port: port)
            defer { closeDescriptor(fd) }
            var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n"
            head += "Content-Type: application/json; charset=utf-8\r\nContent-Length: \(bytes.count)\r\n\r\n"
            writeAll(fd, Array(head.utf8) + bytes)
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            let separator = Array("\r\n\r\n".utf8)
            while true {
                if let end = received.indices.first(where: { received[$0...].starts(with: separator) }) {
                    let lines = String(decoding: received[..<end], as: UTF8.self).lowercased().split(separator: "\r\n")
                    let length = lines.first { $0.hasPrefix("content-length:") }
                        .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) }
                    if let length, received.count >= end + 4 + length {
                        return Array(received[(end + 4)..<(end + 4 + length)])
                    }
                }
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                guard count > 0 else {
                    throw Failure(description: "\(method) \(path): the driver closed the connection")
                }
                received += buffer[0..<count]
            }
        }
        guard let object = try JSONSerialization.jsonObject(with: Data(answer)) as? [String: Any] else {
            throw Failure(
                description: "\(method) \(path): not a WebDriver answer: \(String(decoding: answer, as: UTF8.self))")
        }
        return object
    }
}

/// `close(2)`, out of reach of ``Browser/close()``'s name.
private func closeDescriptor(_ descriptor: Int32) { close(descriptor) }
