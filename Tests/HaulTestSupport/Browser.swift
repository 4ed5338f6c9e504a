import Foundation
package import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A real browser, headless, running the dashboard's page, its script and its security rules (CSP, SameSite cookies,
/// CORS), driven as Selenium drives one:
///
/// - Debian's Chromium through Debian's chromedriver, by the W3C WebDriver protocol (JSON over HTTP) on a free
///   loopback port;
/// - Debian's Firefox ESR through its own Marionette protocol (the one geckodriver speaks to it, which Debian does not
///   package), length-prefixed JSON on a free loopback port, with the same WebDriver commands.
///
/// A missing browser or driver fails the test (`scripts/test` installs them).
package final class Browser: Sendable {
    /// Which browser.
    package enum Kind: String, Sendable, CaseIterable, CustomTestStringConvertible {
        case chromium
        case firefox

        package var testDescription: String { rawValue }
    }

    /// Chromium's executable.
    package static let chromium = "/usr/bin/chromium"
    /// chromedriver's executable.
    package static let chromedriver = "/usr/bin/chromedriver"
    /// Firefox ESR's executable.
    package static let firefox = "/usr/bin/firefox-esr"

    /// Which browser this is.
    package let kind: Kind
    private let engine: Engine
    private let profile: TemporaryDirectory

    private enum Engine: Sendable {
        /// chromedriver, its port, the session.
        case webDriver(driver: ChildProcess, port: Int, session: String)
        /// Firefox itself, and its Marionette connection.
        case marionette(browser: ChildProcess, connection: Marionette)
    }

    /// A WebDriver error (`no such element`, `javascript error`...), with the driver's message.
    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    private init(kind: Kind, engine: Engine, profile: TemporaryDirectory) {
        self.kind = kind
        self.engine = engine
        self.profile = profile
    }

    /// Starts the browser `kind` with a profile of its own, its console recorded, its window 1280 x 900.
    package static func start(_ kind: Kind = .chromium) async throws -> Browser {
        switch kind {
        case .chromium: try await startChromium()
        case .firefox: try await startFirefox()
        }
    }

    private static func startChromium() async throws -> Browser {
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
            return Browser(
                kind: .chromium, engine: .webDriver(driver: driver, port: port, session: session), profile: profile)
        } catch {
            driver.send(SIGTERM)
            _ = await driver.finish()
            throw error
        }
    }

    private static func startFirefox() async throws -> Browser {
        guard FileManager.default.isExecutableFile(atPath: firefox) else {
            throw Failure(description: "\(firefox) is missing: scripts/test installs firefox-esr")
        }
        let port = try freeLoopbackPort()
        let profile = try TemporaryDirectory()
        // Marionette on the port chosen, and nothing of a first start: no default-browser check, no telemetry, no
        // update, no page of its own opened.
        let preferences = [
            ("marionette.port", "\(port)"), ("browser.shell.checkDefaultBrowser", "false"),
            ("datareporting.policy.dataSubmissionEnabled", "false"),
            ("toolkit.telemetry.reportingpolicy.firstRun", "false"),
            ("browser.startup.homepage_override.mstone", "\"ignore\""), ("browser.startup.page", "0"),
            ("app.update.disabledForTesting", "true"), ("network.proxy.type", "0"),
            ("browser.aboutwelcome.enabled", "false"),
        ]
        try preferences.map { "user_pref(\"\($0.0)\", \($0.1));\n" }.joined()
            .write(to: profile.url.appendingPathComponent("user.js"), atomically: true, encoding: .utf8)
        var environment = ProcessInfo.processInfo.environment
        environment["MOZ_HEADLESS"] = "1"
        environment["HOME"] = profile.path
        let browser = try ChildProcess(
            firefox,
            [
                "--marionette", "--remote-allow-system-access", "--headless", "--no-remote", "--profile", profile.path,
                "--window-size=1280,900",
            ],
            environment: environment, signalsAtDefault: true)
        do {
            var connection: Marionette?
            try await eventuallyAsync("Firefox's Marionette answering on port \(port)", within: .seconds(60)) {
                connection = try? await Marionette.connect(port: port)
                return connection != nil
            }
            guard let connection else { throw Failure(description: "Firefox's Marionette never answered") }
            _ = try await connection.send(
                "WebDriver:NewSession", ["capabilities": ["alwaysMatch": ["acceptInsecureCerts": false]]])
            return Browser(
                kind: .firefox, engine: .marionette(browser: browser, connection: connection), profile: profile)
        } catch {
            browser.send(SIGKILL)
            _ = await browser.finish()
            throw error
        }
    }

    /// Ends the session (the browser quits) and stops the driver.
    package func close() async {
        switch engine {
        case .webDriver(let driver, let port, let session):
            _ = try? await Self.request(port: port, "DELETE", "/session/\(session)")
            driver.send(SIGTERM)
            _ = await driver.finish()
        case .marionette(let browser, let connection):
            _ = try? await connection.send("Marionette:Quit", ["flags": ["eForceQuit"]])
            connection.close()
            if !browser.hasExited { browser.send(SIGTERM) }
            _ = await browser.finish()
        }
    }

    /// Opens `url` and waits for it to load.
    package func open(_ url: String) async throws {
        _ = try await command(.navigate, ["url": url])
    }

    /// Runs `script` (a function body; `arguments` is its arguments) in the page and returns what it returns.
    @discardableResult
    package func run(_ script: String, _ arguments: [Any] = []) async throws -> Any? {
        try await command(.execute, ["script": script, "args": arguments])
    }

    /// Runs `script`, whose last argument is the callback it calls with its result, and waits for that result.
    package func runAsync(_ script: String, _ arguments: [Any] = []) async throws -> Any? {
        try await command(.executeAsync, ["script": script, "args": arguments])
    }

    /// The WebDriver reference of the first element `selector` (CSS) matches, waiting up to 10 s for one to be
    /// there (a page that draws what the daemon pushes draws it a moment later), as Playwright's locators wait.
    package func element(_ selector: String) async throws -> String {
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            do {
                let found = try await command(.find, ["using": "css selector", "value": selector])
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
        _ = try await command(.click(try await element(selector)), [:])
    }

    /// Types `text` into the element `selector` matches, key by key, after clearing it.
    package func type(_ text: String, into selector: String) async throws {
        // A field the page's script shows once it has asked the daemon (the sign-in form) is in the page, hidden, at
        // the load event that `open` waits for; typing into it before then fails as "not interactable".
        try await waitUntil(
            "\(selector) shown",
            "const e = document.querySelector(arguments[0]); return !!e && e.getClientRects().length > 0", [selector])
        // A page that redraws what it shows (a table of hosts, every second) may replace the field between its
        // look-up and the keys, unless it has the focus, which typing gives it: the field is looked up again then,
        // as a user would click the new one.
        var attempts = 0
        while true {
            let reference = try await element(selector)
            do {
                _ = try await command(.clear(reference), [:])
                _ = try await command(.sendKeys(reference), ["text": text])
                return
            } catch let failure as Failure where failure.description.contains("stale element") && attempts < 5 {
                attempts += 1
            }
        }
    }

    /// The text of the element `selector` matches, as shown.
    package func text(_ selector: String) async throws -> String {
        try await command(.text(try await element(selector)), [:]) as? String ?? ""
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

    /// Makes the page see a system set to dark colours (`prefers-color-scheme: dark`): Chromium's emulated media
    /// (DevTools' `Emulation.setEmulatedMedia`), Firefox's own setting for the colours pages are told of.
    package func prefersDarkColors() async throws {
        switch engine {
        case .webDriver:
            _ = try await command(
                .devTools,
                [
                    "cmd": "Emulation.setEmulatedMedia",
                    "params": ["features": [["name": "prefers-color-scheme", "value": "dark"]]],
                ])
        case .marionette(_, let connection):
            _ = try await connection.privileged(
                "Services.prefs.setIntPref('layout.css.prefers-color-scheme.content-override', 0);")
        }
        // Firefox tells its page processes of the setting a moment later.
        try await waitUntil(
            "the page told of dark colours", within: .seconds(10),
            "return window.matchMedia('(prefers-color-scheme: dark)').matches")
    }

    /// Sends `keys` (WebDriver's key codes: "\u{E007}" is Enter, "\u{E004}" Tab, "\u{E014}" the right arrow) to the
    /// element that has the focus, as a user's keyboard does.
    package func press(_ keys: String) async throws {
        let active = try await command(.activeElement, [:])
        guard let reference = (active as? [String: Any])?.values.first as? String else {
            throw Failure(description: "no element has the focus")
        }
        _ = try await command(.sendKeys(reference), ["text": keys])
    }

    /// Saves what the window shows as `NAME.png` in the directory `$HAUL_SCREENSHOTS` names, which the README's
    /// pictures come from (`HAUL_SCREENSHOTS=docs/screenshots swift test --filter "Dashboard|Fleet page"`); does
    /// nothing without it, or in another browser than Chromium (one picture of each view).
    package func screenshot(_ name: String) async throws {
        guard kind == .chromium, let directory = ProcessInfo.processInfo.environment["HAUL_SCREENSHOTS"],
            !directory.isEmpty
        else { return }
        guard let text = try await command(.screenshot, [:]) as? String, let png = Data(base64Encoded: text) else {
            throw Failure(description: "the browser sent no screenshot")
        }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try png.write(to: URL(fileURLWithPath: directory).appendingPathComponent(name + ".png"))
    }

    /// The console's errors since the last call: script errors, failed loads, CSP and CORS refusals (Chromium's
    /// messages at level SEVERE; Firefox's errors of the page's process, not warnings, not the browser's own).
    package func consoleErrors() async throws -> [String] {
        switch engine {
        case .webDriver:
            let entries = try await command(.log, ["type": "browser"]) as? [[String: Any]] ?? []
            return entries.filter { ($0["level"] as? String) == "SEVERE" }.compactMap { $0["message"] as? String }
        case .marionette(_, let connection):
            // Read in the page's own process (each site has one), with the browser's privileges: the parent
            // process's console does not hold the pages' messages.
            let answer = try await connection.send(
                "WebDriver:ExecuteScript",
                [
                    "sandbox": "system", "args": [Any](),
                    "script": """
                    const messages = Services.console.getMessageArray() || [];
                    Services.console.reset();
                    return messages
                      .filter((message) => message instanceof Ci.nsIScriptError && message.innerWindowID !== 0
                        && !(message.flags & (Ci.nsIScriptError.warningFlag | Ci.nsIScriptError.infoFlag)))
                      .map((message) => `${message.sourceName} ${message.lineNumber} ${message.errorMessage}`);
                    """,
                ])
            return (answer as? [String: Any])?["value"] as? [String] ?? []
        }
    }

    /// A command of WebDriver's, as each driver names it.
    private enum Command {
        case navigate, execute, executeAsync, find, activeElement, screenshot, log, devTools
        case click(String), clear(String), sendKeys(String), text(String)

        /// chromedriver's method and path (under the session).
        var webDriver: (method: String, path: String) {
            switch self {
            case .navigate: ("POST", "url")
            case .execute: ("POST", "execute/sync")
            case .executeAsync: ("POST", "execute/async")
            case .find: ("POST", "element")
            case .activeElement: ("GET", "element/active")
            case .screenshot: ("GET", "screenshot")
            case .log: ("POST", "se/log")
            case .devTools: ("POST", "goog/cdp/execute")
            case .click(let element): ("POST", "element/\(element)/click")
            case .clear(let element): ("POST", "element/\(element)/clear")
            case .sendKeys(let element): ("POST", "element/\(element)/value")
            case .text(let element): ("GET", "element/\(element)/text")
            }
        }

        /// Marionette's name, and the element's id when the command takes one.
        var marionette: (name: String, element: String?) {
            switch self {
            case .navigate: ("WebDriver:Navigate", nil)
            case .execute: ("WebDriver:ExecuteScript", nil)
            case .executeAsync: ("WebDriver:ExecuteAsyncScript", nil)
            case .find: ("WebDriver:FindElement", nil)
            case .activeElement: ("WebDriver:GetActiveElement", nil)
            case .screenshot: ("WebDriver:TakeScreenshot", nil)
            case .log, .devTools: ("", nil)
            case .click(let element): ("WebDriver:ElementClick", element)
            case .clear(let element): ("WebDriver:ElementClear", element)
            case .sendKeys(let element): ("WebDriver:ElementSendKeys", element)
            case .text(let element): ("WebDriver:GetElementText", element)
            }
        }
    }

    private func command(_ command: Command, _ body: [String: Any]) async throws -> Any? {
        switch engine {
        case .webDriver(_, let port, let session):
            let (method, path) = command.webDriver
            let answer = try await Self.request(
                port: port, method, "/session/\(session)/\(path)", method == "GET" ? nil : body)
            if let value = answer["value"] as? [String: Any], let error = value["error"] as? String {
                throw Failure(description: "\(path): \(error): \(value["message"] as? String ?? "")")
            }
            return answer["value"]
        case .marionette(_, let connection):
            let (name, element) = command.marionette
            guard !name.isEmpty else { throw Failure(description: "Firefox has no \(command)") }
            var parameters = body
            if let element { parameters["id"] = element }
            let answer = try await connection.send(name, parameters)
            return (answer as? [String: Any]).map { $0["value"] ?? NSNull() } ?? answer
        }
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

/// A connection to Firefox's Marionette server: each message `LENGTH:JSON`, a command `[0, id, name, parameters]`,
/// its answer `[1, id, error, result]`; one command at a time.
final class Marionette: Sendable {
    private let descriptor: Int32
    /// Held while a command is sent and its answer read (answers come in order, one per command), and while
    /// `nextID` is read and moved on.
    private let turn = NSLock()
    private nonisolated(unsafe) var nextID = 1

    private init(descriptor: Int32) { self.descriptor = descriptor }

    /// Connects to the server on `port` and reads its greeting (`{"applicationType": "gecko", ...}`).
    static func connect(port: Int) async throws -> Marionette {
        try await onOwnThread {
            let descriptor = try connectedLoopbackSocket(port: port)
            let connection = Marionette(descriptor: descriptor)
            do {
                let greeting = try JSONSerialization.jsonObject(with: Data(try connection.readMessage()))
                guard (greeting as? [String: Any])?["applicationType"] as? String == "gecko" else {
                    throw Browser.Failure(description: "not Marionette on port \(port): \(greeting)")
                }
            } catch {
                connection.close()
                throw error
            }
            return connection
        }
    }

    /// Runs `name` with `parameters`; its result, or its error thrown.
    func send(_ name: String, _ parameters: [String: Any]) async throws -> Any? {
        // The command without its id, which is given under the lock: `[0, ID, NAME, PARAMETERS]`.
        let tail = try JSONSerialization.data(withJSONObject: [name, parameters] as [Any]).dropFirst()
        let bytes = try await onOwnThread { [self] () throws -> [UInt8] in
            turn.lock()
            defer { turn.unlock() }
            let body = Array("[0,\(nextID),".utf8) + tail
            nextID += 1
            writeAll(descriptor, Array("\(body.count):".utf8) + body)
            return try readMessage()
        }
        guard let answer = try JSONSerialization.jsonObject(with: Data(bytes)) as? [Any], answer.count == 4 else {
            throw Browser.Failure(description: "\(name): not a Marionette answer")
        }
        if let error = answer[2] as? [String: Any] {
            throw Browser.Failure(
                description: "\(name): \(error["error"] as? String ?? ""): \(error["message"] as? String ?? "")")
        }
        return answer[3]
    }

    /// Runs `script` (a function body) with the browser's own privileges, where `Services` and `Ci` are, and
    /// returns what it returns; the page's context is taken again after it.
    func privileged(_ script: String) async throws -> Any? {
        _ = try await send("Marionette:SetContext", ["value": "chrome"])
        do {
            let result = try await send("WebDriver:ExecuteScript", ["script": script, "args": [Any]()])
            _ = try await send("Marionette:SetContext", ["value": "content"])
            return (result as? [String: Any])?["value"]
        } catch {
            _ = try? await send("Marionette:SetContext", ["value": "content"])
            throw error
        }
    }

    func close() { closeDescriptor(descriptor) }

    /// Reads one message: its length up to the colon, then that many bytes of JSON, returned.
    private func readMessage() throws -> [UInt8] {
        var length = 0
        while true {
            let byte = try readBytes(1)[0]
            if byte == UInt8(ascii: ":") { break }
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte), length < 100_000_000 else {
                throw Browser.Failure(description: "Marionette sent no message length")
            }
            length = length * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return try readBytes(length)
    }

    private func readBytes(_ count: Int) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var filled = 0
        while filled < count {
            let count = bytes[filled...].withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            guard count > 0 else { throw Browser.Failure(description: "Marionette closed the connection") }
            filled += count
        }
        return bytes
    }
}
