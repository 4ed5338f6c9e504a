import Foundation
import Haul

/// aria2's input and session files (``Aria2Files``): downloads added from one, and the daemon's written as one.
extension Daemon {
    /// Adds the downloads of an aria2 input or session file (`-i`), each as `addUri` would with its options (`gid=`,
    /// `pause=true`, `dir=`, `out=`...), in the file's order. A download whose `gid` the daemon already knows (a
    /// session file read again at the next start) is left as it is. Every entry is checked before any is added: a
    /// file with a bad one adds nothing.
    ///
    /// - Parameters:
    ///   - entries: the file's downloads, as ``Aria2Files/readInput(_:name:)`` read them.
    ///   - name: the file as errors name it.
    /// - Returns: how many downloads were added.
    /// - Throws: ``RPCError`` naming the file and line of every entry that is wrong.
    @discardableResult
    public func add(_ entries: [Aria2Files.Entry], from name: String) throws(RPCError) -> Int {
        var plans: [DownloadPlan] = []
        var lines: [Int] = []
        var problems: [String] = []
        var seen: Set<GID> = []
        for entry in entries {
            do throws(RPCError) {
                let plan = try plan(uris: entry.uris, options: entry.options)
                if let gid = plan.gid {
                    if try item(gid) != nil { continue }
                    guard seen.insert(gid).inserted else { throw RPCError("GID \(gid) is given twice") }
                }
                plans.append(plan)
                lines.append(entry.line)
            } catch {
                problems.append("\(name):\(entry.line): \(error.message)")
            }
        }
        guard problems.isEmpty else { throw RPCError(problems.joined(separator: "\n")) }
        // Their directories are made (and checked: no file in the way, no link leading out) before any is added, so
        // that a file whose entry would fail there adds nothing either.
        var made: Set<String> = []
        for (plan, line) in zip(plans, lines) {
            let directory = plan.directory
            guard !made.contains(directory) else { continue }
            do throws(RPCError) {
                try makeDirectories(directory)
                made.insert(directory)
            } catch {
                problems.append("\(name):\(line): \(error.message)")
            }
        }
        guard problems.isEmpty else { throw RPCError(problems.joined(separator: "\n")) }
        var listing = DestinationSnapshot.Listing(budget: 4 * plans.count)
        for result in add(plans.map { ($0, nil) }, listing: &listing) { _ = try result.get() }
        return plans.count
    }

    /// The daemon's downloads as aria2 writes its session file: the failed ones, then the active ones and the waiting
    /// ones in their order, each as its URIs (tab-separated) and its options (`gid=`, `pause=true` for a paused one,
    /// then the options it was added with). Completed and removed downloads are not written, as in aria2. Secrets are
    /// not written: a URI's user and password are left out, with a comment saying so.
    public func session() -> String {
        let statuses = queue.statuses()
        // With a store, the failed ones of the whole history are read from it.
        let stored = configuration.store.flatMap { try? $0.failed().map(stoppedItem) }
        let items = state.withLock { state -> [(Item, paused: Bool)] in
            let failed =
                stored ?? state.stopped.compactMap { state.items[$0] }.filter { $0.ending?.status == "error" }
            // One being removed is not written: it ends removed (a restart ends it so too).
            let unfinished = statuses.compactMap { status in
                state.byDownload[status.id].flatMap { state.items[$0] }.flatMap { item in
                    item.removing ? nil : (item, status.state == .paused)
                }
            }
            return failed.map { ($0, false) } + unfinished
        }
        var text = ""
        for (item, paused) in items {
            let withoutUserInfo = item.uris.map(Self.withoutUserInfo)
            if withoutUserInfo != item.uris || item.withheldSecrets {
                text += "# \(item.gid): its credentials are not written here; give them again\n"
            }
            text += withoutUserInfo.map { $0 + "\t" }.joined() + "\n"
            text += " gid=\(item.gid)\n"
            if paused { text += " pause=true\n" }
            for (name, value) in DownloadPlan.withoutCredentials(item.options).sorted(by: { $0.key < $1.key })
            where name != "gid" && name != "pause" {
                for line in value.split(separator: "\n", omittingEmptySubsequences: false) {
                    text += " \(name)=\(line)\n"
                }
            }
        }
        return text
    }

    /// `saveSession()`: writes ``session()`` to the configuration's ``Configuration/sessionFile``, replacing it whole.
    func saveSession() throws(RPCError) -> JSON {
        guard let file = configuration.sessionFile else { throw RPCError("Filename is not given.") }
        try Aria2Files.save(session(), to: file.path)
        return "OK"
    }

    /// Writes ``session()`` to the configuration's ``Configuration/sessionFile``, if there is one (at shutdown, as
    /// aria2 does with `--save-session`).
    public func saveSessionFile() throws(RPCError) {
        guard configuration.sessionFile != nil else { return }
        _ = try saveSession()
    }

    static func withoutUserInfo(_ uri: String) -> String {
        guard let url = URL(string: uri), url.user != nil || url.password != nil,
            var components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        else { return uri }
        components.user = nil
        components.password = nil
        return components.url?.absoluteString ?? uri
    }
}
