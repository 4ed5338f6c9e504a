import Foundation
import Haul
import HaulDaemon
import HaulTestServer
import HaulTestSupport
import Testing

/// The dashboard in real headless browsers, Debian's Chromium (through chromedriver) and Firefox ESR (through its
/// Marionette), each test in both, against a daemon and a test server on loopback: what a user does in the page, checked on the daemon, on the test server's own counters and on disk.
@Suite("Dashboard in a browser", .serialized, .timeLimit(.minutes(3)))
struct DashboardBrowserTests {
    /// Every download row shown: gid, name, status, percent.
    private static let rowsScript = """
        return [...document.querySelectorAll('#downloads tbody tr')].map((row) => ({
          gid: row.dataset.gid, name: row.querySelector('.detail').textContent,
          status: row.querySelector('.status').textContent,
          percent: Number(row.querySelector('.bar').getAttribute('aria-valuenow')) }));
        """

    private struct Row: Equatable {
        var gid: String
        var name: String
        var status: String
        var percent: Int
    }

    private func rows(_ browser: Browser) async throws -> [Row] {
        let list = try await browser.run(Self.rowsScript) as? [[String: Any]] ?? []
        return list.map {
            Row(
                gid: $0["gid"] as? String ?? "", name: $0["name"] as? String ?? "",
                status: $0["status"] as? String ?? "", percent: ($0["percent"] as? NSNumber)?.intValue ?? -1)
        }
    }

    @Test(
        "sign in: a wrong secret is refused and says so, the right one shows the downloads; signing out ends it",
        arguments: Browser.Kind.allCases)
    func signingIn(_ browser: Browser.Kind) async throws {
        try await withDashboard(browser, signedIn: false) { harness, _, browser in
            // By keyboard: the secret typed, Enter to send it.
            try await browser.type("wrong-secret", into: "#secret")
            try await browser.press("\u{E007}")
            try await browser.waitUntil(
                "the refusal shown", "return !document.getElementById('signin-error').hidden")
            #expect(try await browser.text("#signin-error").contains("not the daemon's secret"))
            try await browser.screenshot("sign-in")
            #expect(try await browser.run("return document.getElementById('app').hidden") as? Bool == true)
            try await browser.signIn()
            // The state tabs by keyboard: the arrow moves to the next tab and shows it.
            try await browser.run("document.querySelector('#states [aria-selected=true]').focus()")
            try await browser.press("\u{E014}")
            try await browser.waitUntil(
                "the next tab shown",
                "return document.activeElement.dataset.state === 'active' && document.activeElement.getAttribute('aria-selected') === 'true'"
            )
            // Light, and dark when the system is.
            let light =
                try await browser.run("return getComputedStyle(document.documentElement).backgroundColor") as? String
            try await browser.prefersDarkColors()
            let dark =
                try await browser.run("return getComputedStyle(document.documentElement).backgroundColor") as? String
            #expect(light == "rgb(253, 253, 252)" && dark == "rgb(21, 23, 26)", "\(light ?? "") / \(dark ?? "")")
            // The secret is nowhere in the page, its storage or its cookies (the session cookie is HttpOnly).
            let visible = try await browser.run(
                "return document.documentElement.outerHTML + document.cookie + JSON.stringify(localStorage)")
            #expect((visible as? String)?.contains(DaemonHarness.secret) == false)
            #expect((visible as? String)?.contains("haul_session") == false)
            // Reloaded, the page is still signed in; signed out, it is not, even reloaded.
            try await browser.open("http://\(harness.host)/")
            try await browser.waitUntil("still signed in", "return !document.getElementById('app').hidden")
            try await browser.click("#signout")
            try await browser.waitUntil("signed out", "return !document.getElementById('signin').hidden")
            try await browser.open("http://\(harness.host)/")
            try await browser.waitUntil("the sign-in form again", "return !document.getElementById('signin').hidden")
        }
    }

    @Test(
        "a daemon restarted under the page: the page says it was signed out, and is live again once signed in",
        arguments: Browser.Kind.allCases)
    func restart(_ browser: Browser.Kind) async throws {
        try await withDashboard(browser) { harness, server, browser in
            // The RPC server restarted on its port (its sessions, kept in memory, are gone), the daemon kept.
            try await harness.restartServer {
                // Asked for something while it is down, the page says so (a refused fetch is no script error).
                try await browser.waitUntil(
                    "told it is reconnecting",
                    "return document.getElementById('connection').textContent === 'reconnecting…'")
                try await browser.click("#states button[data-state=complete]")
                try await browser.waitUntil(
                    "told it cannot be reached",
                    "return document.getElementById('connection').textContent === 'the daemon cannot be reached'")
            }
            try await browser.waitUntil(
                "told to sign in again",
                "return !document.getElementById('signin').hidden && document.getElementById('signin-error').textContent.includes('Signed out')"
            )
            try await browser.signIn()
            // While the port was closed, a call or the WebSocket may have found it so, or found the server going as
            // it connected (the browser logs both itself; Chromium the latter in three wordings, one a reset of a
            // connection still in the stopped listener's backlog); nothing else may be in the console, no script
            // error above all. The server started again is stopped only after `withDashboard` has read the console
            // once more: stopped here, the live page's next call would be refused and logged.
            let errors = try await browser.consoleErrors().filter {
                !$0.contains("net::ERR_CONNECTION_REFUSED") && !$0.contains("net::ERR_SOCKET_NOT_CONNECTED")
                    && !$0.contains("Connection closed before receiving a handshake response")
                    && !$0.contains("Error during WebSocket handshake: net::ERR_CONNECTION_RESET")
                    && !$0.contains("Firefox can’t establish a connection to the server at ws://")
            }
            #expect(errors.isEmpty, "console errors: \(errors)")
            let url = server.url(path: "/bytes/after.bin", query: ["size": "1000"]).absoluteString
            let gid = try #require(try await harness.call("aria2.addUri", [[.string(url)]]).string)
            try await browser.waitUntil(
                "the new download shown done",
                "const r = document.querySelector(arguments[0]); return !!r && r.className === 'complete'",
                ["tr[data-gid='\(gid)']"])
        }
    }

    /// Has the page's `fetch` fail as it does for a daemon stopped, for every address with `part` in it (none when
    /// `part` is empty): the same failure, at the moment the test chooses.
    private func refuse(_ browser: Browser, _ part: String) async throws {
        try await browser.run(
            """
            window.reachingFetch = window.reachingFetch || window.fetch;
            const part = arguments[0];
            window.fetch = (input, init) => part !== '' && String(input).includes(part)
              ? Promise.reject(new TypeError('refused by the test')) : window.reachingFetch(input, init);
            """, [part])
    }

    @Test(
        "a call that cannot reach the daemon, from a button, signing in or out, is said in the page; no console error",
        arguments: Browser.Kind.allCases)
    func unreachable(_ browser: Browser.Kind) async throws {
        try await withDashboard(browser) { harness, server, browser in
            let url = server.url(path: "/bytes/held.bin", query: ["size": "1000", "hold": "held"])
            let gid = try #require(try await harness.call("aria2.addUri", [[.string(url.absoluteString)]]).string)
            try await eventually("the download held") { server.heldCount(at: "held") == 1 }
            let row = "tr[data-gid='\(gid)']"
            try await browser.waitUntil("the download shown", "return !!document.querySelector(arguments[0])", [row])
            let unreachable =
                "return document.getElementById('connection').textContent === 'the daemon cannot be reached'"
            func refused(_ what: String, _ press: () async throws -> Void) async throws {
                try await browser.run("document.getElementById('connection').textContent = ''")
                try await press()
                try await browser.waitUntil("\(what) said unreachable", unreachable)
            }
            try await refuse(browser, "/jsonrpc")
            try await refused("pause") { try await browser.click("\(row) button[data-action=pause]") }
            try await refused("the detail") { try await browser.click("\(row) button.detail") }
            try await refused("a pause of the selected") {
                try await browser.click("\(row) input.select")
                try await browser.click("#bulk button[data-bulk=pause]")
            }
            try await refuse(browser, "")
            try await browser.click("nav button[data-view=hosts]")
            try await browser.waitUntil(
                "the host listed", "return document.querySelectorAll('#hosts tbody tr').length === 1")
            try await refuse(browser, "/jsonrpc")
            try await refused("a host's pause") { try await browser.click("#hosts .pause-host") }
            // Signing out needs the daemon to end the session: the page stays signed in and says why.
            try await refuse(browser, "/session")
            try await refused("signing out") { try await browser.click("#signout") }
            #expect(try await browser.run("return document.getElementById('app').hidden") as? Bool == false)
            try await refuse(browser, "")
            try await browser.click("#signout")
            try await browser.waitUntil("signed out", "return !document.getElementById('signin').hidden")
            try await refuse(browser, "/session")
            try await browser.type(DaemonHarness.secret, into: "#secret")
            try await browser.click("#signin-form button[type=submit]")
            try await browser.waitUntil(
                "signing in said unreachable",
                "return document.getElementById('signin-error').textContent === 'The daemon cannot be reached.'")
            // A refusal the daemon makes in plain text, before it looks at the session (a request too large, a wrong
            // Host), is said as its answer.
            try await browser.run(
                """
                window.fetch = (input, init) => String(input).includes('/session')
                  ? Promise.resolve(new Response('refused\\n', { status: 413 })) : window.reachingFetch(input, init);
                """)
            try await browser.click("#signin-form button[type=submit]")
            try await browser.waitUntil(
                "the plain refusal said",
                "return document.getElementById('signin-error').textContent === 'The daemon answered 413.'")
            // Signed in with every call refused: the version, the limits and the page each fail.
            try await refuse(browser, "/jsonrpc")
            try await browser.signIn()
            try await browser.waitUntil("the signed-in page said unreachable", unreachable)
            #expect(try await browser.consoleErrors() == [])
            // Nothing was done: what the presses asked for never reached the daemon; reached again, the page is live.
            try await refuse(browser, "")
            #expect(try await harness.call("aria2.tellStatus", [.string(gid)]).object?["status"] == "active")
            try await browser.click("nav button[data-view=downloads]")
            server.openGate("held")
            try await browser.waitUntil(
                "the download shown done",
                "const r = document.querySelector(arguments[0]); return !!r && r.className === 'complete'", [row])
        }
    }

    @Test(
        "two URLs added through the dialog: both bars move and reach done, the files on disk",
        arguments: Browser.Kind.allCases)
    func addTwo(_ browser: Browser.Kind) async throws {
        try await withDashboard(browser) { harness, server, browser in
            let urls = ["one", "two"].map {
                server.url(path: "/bytes/\($0).bin", query: ["size": "300000", "rate": "100000"]).absoluteString
            }
            try await browser.click("#add-open")
            try await browser.type(urls.joined(separator: "\n"), into: "#add-urls")
            try await browser.type("2", into: "#add-split")
            try await browser.click("#add-form button[type=submit]")
            var seen: [String: Set<Int>] = [:]
            let deadline = ContinuousClock.now + .seconds(30)
            while ContinuousClock.now < deadline {
                let shown = try await rows(browser)
                for row in shown { seen[row.name, default: []].insert(row.percent) }
                if shown.count == 2, shown.allSatisfy({ $0.status == "complete" && $0.percent == 100 }) { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            let shown = try await rows(browser)
            #expect(Set(shown.map(\.name)) == ["one.bin", "two.bin"])
            #expect(shown.allSatisfy { $0.status == "complete" && $0.percent == 100 }, "\(shown)")
            for name in ["one.bin", "two.bin"] {
                #expect(
                    seen[name, default: []].contains { (1...99).contains($0) }, "\(name)'s bar never moved: \(seen)")
                let file = harness.root.url.appendingPathComponent(name)
                #expect((try? FileManager.default.attributesOfItem(atPath: file.path)[.size] as? Int) == 300_000)
            }
            #expect(try await browser.run("return document.getElementById('add-dialog').open") as? Bool == false)
            try await browser.screenshot("downloads")
        }
    }

    @Test(
        "pause and resume from the page: the server is asked for the rest with Range; remove from the page",
        arguments: Browser.Kind.allCases)
    func pauseResumeRemove(_ browser: Browser.Kind) async throws {
        // The journal keeps what a resume needs (the partial's validator), as the daemon's own does.
        try await withDashboard(browser, journal: MemoryJournal()) { harness, server, browser in
            let url = server.url(path: "/bytes/paused.bin", query: ["size": "400000", "rate": "100000"])
            let gid = try #require(try await harness.call("aria2.addUri", [[.string(url.absoluteString)]]).string)
            let row = "tr[data-gid='\(gid)']"
            try await browser.waitUntil(
                "some of it received",
                "const r = document.querySelector(arguments[0]); return !!r && Number(r.querySelector('.bar').getAttribute('aria-valuenow')) > 0",
                [row])
            try await browser.click("\(row) button[data-action=pause]")
            try await harness.waitFor(gid, status: "paused")
            try await browser.waitUntil(
                "shown paused", "return document.querySelector(arguments[0] + ' .status').textContent === 'paused'",
                [row])
            try await browser.click("\(row) button[data-action=resume]")
            try await harness.waitFor(gid, status: "complete")
            let asked = server.stats.requests.filter { $0.path == "/bytes/paused.bin" }
            #expect(asked.count == 2)
            let range = try #require(asked.last?.range)
            let from = try #require(Int(range.dropFirst("bytes=".count).prefix { $0 != "-" }))
            #expect(from > 0 && from < 400_000, "\(range)")
            // Its detail tells the resume in words, and where its bytes came from.
            try await browser.click("\(row) button.detail")
            try await browser.waitUntil(
                "the detail open", "return document.getElementById('detail-dialog').open")
            try await browser.waitUntil(
                "the resume told",
                "return document.getElementById('detail-events').textContent.includes('resuming at byte ' + arguments[0])",
                [String(from)])
            #expect(try await browser.text("#detail-events").contains("paused, its partial file kept"))
            #expect(try await browser.text("#detail-uris").contains("/bytes/paused.bin"))
            try await browser.screenshot("detail")
            try await browser.click("#detail-close")

            let held = server.url(path: "/bytes/removed.bin", query: ["size": "1000", "hold": "r"])
            let removed = try #require(try await harness.call("aria2.addUri", [[.string(held.absoluteString)]]).string)
            try await eventually("held") { server.heldCount(at: "r") == 1 }
            try await browser.click("tr[data-gid='\(removed)'] button[data-action=remove]")
            try await harness.waitFor(removed, status: "removed")
            try await browser.waitUntil(
                "shown removed",
                "const r = document.querySelector(arguments[0]); return !!r && r.className === 'removed'",
                ["tr[data-gid='\(removed)']"])
            server.openGate("r")
        }
    }

    @Test(
        "a host's limit set in the page holds on the test server's own in-flight count",
        arguments: Browser.Kind.allCases)
    func hostLimit(_ browser: Browser.Kind) async throws {
        try await withDashboard(browser, maxConcurrent: 6) { harness, server, browser in
            func add(_ name: String, gate: String) async throws {
                let url = server.url(path: "/bytes/\(name)", query: ["size": "1000", "hold": gate])
                _ = try await harness.call("aria2.addUri", [[.string(url.absoluteString)]])
            }
            try await add("first", gate: "first")
            try await eventually("the first held") { server.heldCount(at: "first") == 1 }
            try await browser.click("nav button[data-view=hosts]")
            try await browser.waitUntil(
                "the host listed", "return document.querySelectorAll('#hosts tbody tr').length === 1")
            try await browser.type("2", into: "#hosts .limit")
            try await browser.click("#hosts .host-limit button")
            try await eventuallyAsync("the limit taken") {
                let hosts = try? await harness.call("haul.getHosts")
                return hosts?.array?.first?.object?["maxConnections"] == "2"
            }
            try await browser.waitUntil(
                "the limit shown", "return document.querySelector('#hosts .running').textContent.endsWith('of 2')")
            try await browser.screenshot("hosts")
            for index in 0..<5 { try await add("h\(index)", gate: "h") }
            try await eventually("a second held") { server.heldCount(at: "h") == 1 }
            server.openGate("first")
            server.openGate("h")
            try await eventuallyAsync("all six done", within: .seconds(20)) {
                let stat = try? await harness.call("aria2.getGlobalStat")
                return stat?.object?["numStopped"] == "6"
            }
            #expect(server.stats.maxInFlightByHost.values.max() == 2)
            #expect(server.stats.requestCount == 6)
            // The global limits, edited in the page, are the daemon's at once.
            try await browser.type("3", into: "#max-concurrent")
            try await browser.type("1M", into: "#max-overall")
            try await browser.click("#limits button[type=submit]")
            try await browser.waitUntil(
                "saved", "return document.getElementById('limits-message').textContent === 'Saved.'")
            let options = try await harness.call("aria2.getGlobalOption").object
            #expect(options?["max-concurrent-downloads"] == "3")
            #expect(options?["max-overall-download-limit"] == "1048576")
        }
    }

    @Test(
        "the search finds one download among 10,000 waiting, counted and paged on the daemon",
        arguments: Browser.Kind.allCases)
    func search(_ browser: Browser.Kind) async throws {
        try await withDashboard(browser) { harness, server, browser in
            var calls: [JSON] = []
            for index in 0..<10_000 {
                let name = index == 6_789 ? "needle-report.pdf" : String(format: "file-%05d.bin", index)
                let url = server.url(path: "/bytes/\(name)", query: ["size": "10"]).absoluteString
                calls.append([
                    "methodName": "aria2.addUri",
                    "params": [.string("token:\(DaemonHarness.secret)"), [.string(url)], ["pause": "true"]],
                ])
            }
            _ = try await harness.call("system.multicall", [.array(calls)], token: nil)
            try await browser.waitUntil(
                "10,000 counted", "return document.getElementById('range').textContent === '1–50 of 10000'")
            #expect(try await rows(browser).count == 50)
            // Sorted on the daemon, across all 10,000: the one name after every "file-" comes first.
            try await browser.click("#sort option[value='-name']")
            try await browser.waitUntil(
                "sorted",
                "return document.querySelector('#downloads tbody tr .detail').textContent === 'needle-report.pdf'")
            try await browser.click("#sort option[value='name']")
            try await browser.waitUntil(
                "sorted back",
                "return document.querySelector('#downloads tbody tr .detail').textContent === 'file-00000.bin'")
            try await browser.type("NEEDLE", into: "#search")
            try await browser.waitUntil(
                "one found", "return document.getElementById('range').textContent === '1–1 of 1'")
            let found = try await rows(browser)
            #expect(found.map(\.name) == ["needle-report.pdf"])
            #expect(found.first?.status == "paused")
            try await browser.click("#states button[data-state=complete]")
            try await browser.waitUntil("none complete", "return !document.getElementById('empty').hidden")
        }
    }

    @Test(
        "a page of another origin cannot drive the API: its POSTs and WebSocket are refused, nothing is added",
        arguments: Browser.Kind.allCases)
    func anotherOrigin(_ browser: Browser.Kind) async throws {
        try await withDashboard(browser) { harness, _, browser in
            // A page of another origin on the same site (127.0.0.1, another port): SameSite lets the session
            // cookie go with its requests, so the daemon's Origin check and CSRF token are what stop it.
            let site = try TemporaryDirectory()
            try Data("<!doctype html><title>elsewhere</title>".utf8).write(
                to: site.url.appendingPathComponent("x.html"))
            let port = try freeLoopbackPort()
            let other = try ChildProcess(
                "python3", ["-m", "http.server", "--bind", "127.0.0.1", "--directory", site.path, String(port)],
                signalsAtDefault: true)
            defer { other.send(SIGTERM) }
            try await eventuallyAsync("the other site up") {
                (try? await RawHTTP.send(port: port, method: "GET", path: "/x.html", headers: [("Host", "127.0.0.1")]))?
                    .status == 200
            }
            try await browser.open("http://127.0.0.1:\(port)/x.html")
            let outcome =
                try await browser.runAsync(
                    """
                    const [daemon, done] = arguments;
                    (async () => {
                    const call = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "aria2.addUri",
                      params: [["http://127.0.0.1:9/evil"]] });
                    const results = {};
                    // A blind write, as a form would send it: no preflight, the answer unread.
                    await fetch(daemon + "/jsonrpc", { method: "POST", mode: "no-cors", credentials: "include",
                      headers: { "Content-Type": "text/plain" }, body: call });
                    try {
                      const session = await fetch(daemon + "/session", { credentials: "include" });
                      results.session = "read " + (await session.text());
                    } catch (error) { results.session = "refused"; }
                    try {
                      await fetch(daemon + "/jsonrpc", { method: "POST", credentials: "include",
                        headers: { "Content-Type": "application/json", "X-Haul-CSRF": "guess" }, body: call });
                      results.post = "answered";
                    } catch (error) { results.post = "refused"; }
                    results.socket = await new Promise((resolve) => {
                      const socket = new WebSocket(daemon.replace("http", "ws") + "/jsonrpc");
                      socket.onopen = () => resolve("opened");
                      socket.onerror = () => resolve("refused");
                    });
                    done(results);
                    })();
                    """, ["http://\(harness.host)"]) as? [String: String]
            #expect(outcome == ["session": "refused", "post": "refused", "socket": "refused"])
            let queued = try await harness.call("haul.tellQueue", [0, 10])
            let stopped = try await harness.call("haul.tellHistory", [0, 10])
            #expect(queued.object?["total"] == "0" && stopped.object?["total"] == "0")
            // The other page's refused loads are in its console (which shows the console is read at all); the
            // dashboard's is checked clean after this.
            let refusals = try await browser.consoleErrors()
            #expect(!refusals.isEmpty)
            try await browser.open("http://\(harness.host)/")
            try await browser.waitUntil("still signed in", "return !document.getElementById('app').hidden")
        }
    }
}
