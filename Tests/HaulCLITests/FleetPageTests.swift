import Foundation
import HaulTestServer
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The fleet as its users run it: PostgreSQL, a `haul daemon --db -j 0` that downloads nothing itself, two
/// `haul worker` processes, and the dashboard's fleet page in real headless Chromium and Firefox, checked against the test
/// server's own counters and the workers' directories.
@Suite(
    "Fleet page in a browser", .serialized, .timeLimit(.minutes(4)),
    .enabled(if: TestPlatform.isLinux, "runs Debian's PostgreSQL 15 and Chromium, which scripts/test installs"))
struct FleetPageTests {
    /// The rows of the downloads shown: file, status line, worker.
    private static let downloadsScript = """
        return [...document.querySelectorAll('#fleet-downloads tbody tr')].map((row) => ({
          gid: row.dataset.gid, name: row.querySelector('.name').firstChild.textContent,
          status: row.className, worker: row.querySelector('.worker').textContent }));
        """

    private func downloads(_ browser: Browser) async throws -> [String: (gid: String, status: String, worker: String)] {
        let list = try await browser.run(Self.downloadsScript) as? [[String: Any]] ?? []
        var rows: [String: (gid: String, status: String, worker: String)] = [:]
        for row in list {
            rows[row["name"] as? String ?? ""] = (
                row["gid"] as? String ?? "", row["status"] as? String ?? "", row["worker"] as? String ?? ""
            )
        }
        return rows
    }

    /// Waits until the page shows the worker `name` with `state` (its row's class) holding `running` downloads.
    private func waitForWorker(_ browser: Browser, _ name: String, _ state: String, running: Int) async throws {
        try await browser.waitUntil(
            "\(name) shown \(state) with \(running) running",
            """
            const row = document.querySelector(`#workers tr[data-name="${arguments[0]}"]`);
            return row !== null && row.className === arguments[1]
              && row.querySelector('.running').textContent === arguments[2];
            """, [name, state, String(running)])
    }

    /// Opens the dashboard of `daemon` in `browser`, signs in and waits for the fleet's view.
    private func openFleet(_ browser: Browser, _ daemon: DaemonCommandTests.Running) async throws {
        try await browser.open("http://127.0.0.1:\(daemon.port)/")
        try await browser.type(try #require(daemon.secret), into: "#secret")
        try await browser.click("#signin-form button[type=submit]")
        try await browser.waitUntil("the fleet's view", "return !document.getElementById('fleet-view').hidden")
    }

    private func showTab(_ browser: Browser, _ state: String) async throws {
        try await browser.click("#fleet-states [data-state=\(state)]")
    }

    @Test(
        "two workers shown with what each holds; a pause stops on its worker; a killed worker is lost, its work back",
        arguments: Browser.Kind.allCases)
    func fleet(_ kind: Browser.Kind) async throws {
        try await PostgresServer.withRunning { postgres in
            try await TestServer.withRunning { server in
                let root = try TemporaryDirectory()
                let daemonDirectory = try TemporaryDirectory()
                let daemon = try await DaemonCommandTests.start(daemonDirectory, ["--db", postgres.url, "-j", "0"])
                #expect(daemon.process.stderrSoFar.contains("downloading nothing here: -j 0"))
                var workers: [HaulProcess] = []
                let browser = try await Browser.start(kind)
                do {
                    try await openFleet(browser, daemon)
                    #expect(
                        try await browser.run("return document.getElementById('downloads-view').hidden") as? Bool
                            == true)

                    func add(_ name: String) async throws {
                        let url = server.url(path: "/bytes/\(name)", query: ["size": "40000", "hold": "fleet"])
                        try await browser.click("#add-open")
                        try await browser.type(url.absoluteString, into: "#add-urls")
                        try await browser.click("#add-form button[type=submit]")
                        try await browser.waitUntil(
                            "the add dialog closed", "return !document.getElementById('add-dialog').open")
                    }
                    func startWorker(_ name: String) throws -> HaulProcess {
                        let worker = try HaulProcess([
                            "worker", "--db", postgres.url, "-d", root.path + "/" + name, "-j", "1", "--lease", "3",
                            "--name", name,
                        ])
                        workers.append(worker)
                        return worker
                    }
                    // One download each: w1 takes the first before the second is added, and with one connection
                    // it claims no more while it runs it.
                    try await add("first")
                    let w1 = try startWorker("w1")
                    try await eventually("w1 holding the first", within: .seconds(30)) {
                        server.heldCount(at: "fleet") == 1
                    }
                    try await add("second")
                    _ = try startWorker("w2")
                    try await eventually("w2 holding the second", within: .seconds(30)) {
                        server.heldCount(at: "fleet") == 2
                    }
                    try await waitForWorker(browser, "w1", "active", running: 1)
                    try await waitForWorker(browser, "w2", "active", running: 1)
                    try await browser.waitUntil(
                        "both downloads shown active, each on its worker",
                        """
                        const rows = [...document.querySelectorAll('#fleet-downloads tbody tr')];
                        const worker = (name) => rows.find((row) => row.querySelector('.name').firstChild
                          .textContent === name)?.querySelector('.worker').textContent;
                        return worker('first') === 'w1' && worker('second') === 'w2';
                        """)
                    #expect(try await browser.text("#fleet-hosts tbody tr .running") == "2")
                    try await browser.screenshot("fleet")

                    // Paused from the page: w2 stops it at its next heartbeat (its connection closes).
                    let second = try #require(try await downloads(browser)["second"])
                    try await browser.click("#fleet-downloads tr[data-gid='\(second.gid)'] button[data-action=pause]")
                    try await eventually("the second's connection closed by w2", within: .seconds(20)) {
                        server.stats.inFlight == 1
                    }
                    try await waitForWorker(browser, "w2", "active", running: 0)
                    try await showTab(browser, "paused")
                    try await browser.waitUntil(
                        "the second shown paused, on no worker",
                        """
                        const row = document.querySelector(`#fleet-downloads tr[data-gid="${arguments[0]}"]`);
                        return row !== null && row.className === 'paused'
                          && row.querySelector('.worker').textContent === '—';
                        """, [second.gid])

                    // w1 killed: once its lease runs out w2 takes it for lost, and the first comes back to w2.
                    w1.send(SIGKILL)
                    _ = await w1.finish()
                    try await waitForWorker(browser, "w1", "lost", running: 0)
                    try await eventually("the first asked again", within: .seconds(30)) {
                        server.stats.inFlight == 1
                            && server.stats.requests.filter { $0.path == "/bytes/first" }.count == 2
                    }
                    try await showTab(browser, "active")
                    try await browser.waitUntil(
                        "the first shown on w2",
                        """
                        const row = [...document.querySelectorAll('#fleet-downloads tbody tr')]
                          .find((row) => row.querySelector('.name').firstChild.textContent === 'first');
                        return row !== undefined && row.querySelector('.worker').textContent === 'w2';
                        """)
                    #expect(try await browser.text("#workers tr.lost .lease").contains("lost"))

                    // Resumed from the page and let through: both end on w2.
                    server.openGate("fleet")
                    try await showTab(browser, "paused")
                    try await browser.click("#fleet-downloads tr[data-gid='\(second.gid)'] button[data-action=resume]")
                    try await showTab(browser, "complete")
                    try await browser.waitUntil(
                        "both complete", within: .seconds(30),
                        "return document.querySelectorAll('#fleet-downloads tbody tr.complete').length === 2")
                    for name in ["first", "second"] {
                        let size = try? FileManager.default.attributesOfItem(atPath: root.path + "/w2/" + name)[.size]
                        #expect(size as? Int == 40_000, "\(name) on w2")
                    }
                    let errors = try await browser.consoleErrors()
                    #expect(errors.isEmpty, "console errors: \(errors)")
                } catch {
                    await browser.close()
                    for worker in workers { worker.send(SIGKILL) }
                    daemon.process.send(SIGKILL)
                    throw error
                }
                await browser.close()
                for worker in workers where !worker.hasExited { worker.send(SIGINT) }
                for worker in workers { _ = await worker.finish() }
                daemon.process.send(SIGTERM)
                let ended = await daemon.process.finish()
                #expect(ended.status == 0, "\(ended)")
            }
        }
    }

    @Test("a page of downloads emptied by removing them shows the last page that still has any")
    func pageEmptied() async throws {
        try await PostgresServer.withRunning { postgres in
            let daemonDirectory = try TemporaryDirectory()
            let daemon = try await DaemonCommandTests.start(daemonDirectory, ["--db", postgres.url, "-j", "0"])
            // 51 waiting, with no worker to take them: two pages, the second of one.
            for index in 0..<51 { _ = try await daemon.result("aria2.addUri", [["http://127.0.0.1:9/f\(index)"]]) }
            let browser = try await Browser.start(.chromium)
            do {
                try await openFleet(browser, daemon)
                try await showTab(browser, "waiting")
                try await browser.waitUntil(
                    "the first page", "return document.getElementById('fleet-range').textContent === '1–50 of 51'")
                try await browser.click("#fleet-next")
                try await browser.waitUntil(
                    "the second page",
                    """
                    return document.getElementById('fleet-range').textContent === '51–51 of 51'
                      && document.querySelectorAll('#fleet-downloads tbody tr').length === 1;
                    """)
                try await browser.click("#fleet-downloads tbody tr button[data-action=remove]")
                try await browser.waitUntil(
                    "the first page again, its 50 shown",
                    """
                    return document.getElementById('fleet-range').textContent === '1–50 of 50'
                      && document.querySelectorAll('#fleet-downloads tbody tr').length === 50
                      && document.getElementById('fleet-empty').hidden
                      && document.getElementById('fleet-previous').disabled;
                    """)
                let errors = try await browser.consoleErrors()
                #expect(errors.isEmpty, "console errors: \(errors)")
            } catch {
                await browser.close()
                daemon.process.send(SIGKILL)
                throw error
            }
            await browser.close()
            daemon.process.send(SIGTERM)
            let ended = await daemon.process.finish()
            #expect(ended.status == 0, "\(ended)")
        }
    }

    @Test("haul daemon --db -j N is a worker too: an added download lands in its directory; -i is refused with --db")
    func daemonAsWorker() async throws {
        try await PostgresServer.withRunning { postgres in
            try await TestServer.withRunning { server in
                let directory = try TemporaryDirectory()
                let daemon = try await DaemonCommandTests.start(directory, ["--db", postgres.url, "-j", "2"])
                let url = server.url(path: "/bytes/here.bin", query: ["size": "5000"]).absoluteString
                let gid = try #require(
                    try await daemon.result("aria2.addUri", [[url], ["dir": "in/sub"]]) as? String)
                try await eventuallyAsync("the download complete", within: .seconds(30)) {
                    let status = try? await daemon.result("aria2.tellStatus", [gid, ["status"]]) as? [String: Any]
                    return status?["status"] as? String == "complete"
                }
                let size = try? FileManager.default.attributesOfItem(atPath: directory.path + "/in/sub/here.bin")[.size]
                #expect(size as? Int == 5000)
                let worker = try await daemon.result("aria2.tellStatus", [gid, ["worker"]]) as? [String: Any]
                #expect((worker?["worker"] as? String)?.hasSuffix(":\(daemon.process.pid)") == true, "\(worker ?? [:])")
                daemon.process.send(SIGTERM)
                let ended = await daemon.process.finish()
                #expect(ended.status == 0, "\(ended)")

                let refused = try await HaulProcess(["daemon", "--db", postgres.url, "-i", "list.txt"]).finish()
                #expect(refused.status != 0 && refused.stderr.contains("-i/--input-file is not available with --db"))
                let zero = try await HaulProcess(["daemon", "-j", "0"]).finish()
                #expect(zero.stderr.contains("-j/--max-concurrent must be at least 1, not 0"), "\(zero)")
            }
        }
    }
}
