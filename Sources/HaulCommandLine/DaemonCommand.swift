import ArgumentParser
import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulDaemon
import HaulMetrics
import HaulOperations
import HaulPostgres
import HaulSQLite
import Logging
import Prometheus

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `haul daemon`: downloads as a service, driven over aria2's JSON-RPC.
struct DaemonCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "daemon",
        abstract: "Run downloads as a service, driven by aria2's JSON-RPC (aria2p, AriaNg, webui-aria2...).",
        discussion: """
            Serves aria2's JSON-RPC 2.0 over HTTP POST at http://HOST:PORT/jsonrpc, and a dashboard for a \
            browser at http://HOST:PORT/ (sign in with the secret). Every call carries the secret as its first \
            parameter, "token:SECRET". Without --rpc-secret-file or $HAUL_RPC_SECRET the \
            daemon makes one on its first start, keeps it in DIR/.haul/rpc-secret (readable by you only) and \
            prints it once. A secret is never taken as an option's value: other users see a command line.

            It listens on loopback by default. Another address needs TLS (--rpc-certificate and \
            --rpc-private-key) or an explicit --rpc-insecure-listen. A request must name the daemon in its Host \
            header (a page of another site reaching it through DNS rebinding names its own): a loopback name, an \
            address it listens on, or a name given with --rpc-allow-host. A browser page's call is refused \
            unless its Origin is the daemon's own or one given with --rpc-allow-origin. A download's dir \
            and out stay inside DIR: no '..', no absolute path outside it, no symbolic link leading out, no name \
            starting with a dot.

            Downloads, their order and their history are kept in DIR/.haul/daemon.sqlite, each change before \
            the call that made it is answered: a restart (even after a SIGKILL) brings every download back, the \
            active ones waiting again, the paused ones paused, the finished ones in the history, and the journal \
            resumes their partial files. Passwords and secret headers are never written there: a download that \
            needed them comes back failed, saying so. SIGINT or SIGTERM (or aria2.shutdown) stops the daemon, \
            exiting 0 at any stage: running downloads stop and keep their partial files. One daemon serves a \
            DIR at a time (it holds DIR/.haul/daemon.lock); a second is refused, naming the first one's PID.

            With --db postgres://..., the daemon drives the shared queue that `haul worker`s work on, on any \
            machine: addUri enqueues (dir and out name the file's place under each worker's directory), the lists \
            and tellStatus read the queue (a running download names its worker), pause, resume and remove reach \
            every worker, and the dashboard shows the fleet: each worker with its lease, the hosts across the \
            fleet, the throughput over time, and the failures to retry. -j 0 makes it a control plane that \
            downloads nothing itself; -j N also runs a worker of N connections writing into DIR.

            On the same port it serves Prometheus metrics at /metrics to a request bearing the secret as \
            'Authorization: Bearer SECRET' (Prometheus: authorization.credentials_file DIR/.haul/rpc-secret), and \
            /healthz (alive) and /readyz (the store and the journal can be read; with --db, the database answers) \
            to anyone whose Host names the daemon. --log-format json writes one JSON object per log line, each \
            download's start and end among them with its gid and URL.
            """
    )

    @OptionGroup
    var destination: DirectoryOptions

    @Option(
        name: .customLong("rpc-listen"),
        help: ArgumentHelp(
            "Address and port to serve the RPC on; an address other than loopback needs --rpc-certificate or "
                + "--rpc-insecure-listen.",
            valueName: "HOST:PORT"))
    var listen = Self.defaultListen

    @Option(
        name: .customLong("rpc-certificate"),
        help: ArgumentHelp(
            "PEM certificate (chain) to serve the RPC over TLS with (https://, wss://).", valueName: "FILE"))
    var certificate: String?

    @Option(
        name: .customLong("rpc-private-key"),
        help: ArgumentHelp("PEM private key of --rpc-certificate (no other user may read it).", valueName: "FILE"))
    var privateKey: String?

    @Flag(
        name: .customLong("rpc-insecure-listen"),
        help: "Listen on an address other than loopback without TLS: the secret crosses the network in clear.")
    var insecureListen = false

    @Option(
        name: .customLong("rpc-allow-host"),
        help: ArgumentHelp(
            "A name other machines reach the daemon by, accepted in a request's Host header; repeatable.",
            valueName: "NAME"))
    var allowedHosts: [String] = []

    static let defaultListen = "127.0.0.1:6800"

    @Option(
        name: .customLong("rpc-secret-file"),
        help: ArgumentHelp("File holding the RPC secret (its first line).", valueName: "FILE"))
    var secretFile: String?

    @Flag(
        name: .customLong("rpc-no-secret"),
        help: "Serve without a secret (for local tools that cannot send one); the Host and Origin checks stay on.")
    var noSecret = false

    @Option(
        name: .customLong("rpc-allow-origin"),
        help: ArgumentHelp(
            "An origin (scheme://host:port) whose pages may call the RPC; repeatable.", valueName: "ORIGIN"))
    var allowedOrigins: [String] = []

    @Option(
        name: .customLong("conf-path"),
        help: ArgumentHelp(
            "aria2's configuration file (name=value lines): its download options become the defaults, its dir, "
                + "rpc-listen-port, rpc-secret, input-file, save-session and rpc-secure (with rpc-certificate and "
                + "rpc-private-key) apply where no flag gives them.",
            valueName: "FILE"))
    var confPath: String?

    @Option(
        name: [.customShort("i"), .customLong("input-file")],
        help: ArgumentHelp(
            "aria2's input or session file to add downloads from at start (URIs, tab-separated mirrors, indented "
                + "options); a download whose gid the daemon knows is left as it is.",
            valueName: "FILE"))
    var inputFile: String?

    @Option(
        name: .customLong("save-session"),
        help: ArgumentHelp(
            "Where aria2.saveSession, and the daemon at shutdown, write aria2's session file of the unfinished "
                + "downloads.",
            valueName: "FILE"))
    var saveSession: String?

    // Not ConcurrencyOptions: 0 is a value here (with --db, a control plane that downloads nothing).
    @Option(
        name: [.customShort("j"), .customLong("max-concurrent")], parsing: .unconditional,
        help: ArgumentHelp(
            "Downloads at once (default 4); with --db, 0 downloads nothing here (a control plane).", valueName: "N"))
    var maxConcurrent: Int?

    /// -j as the other commands read it.
    var concurrency: ConcurrencyOptions {
        var options = ConcurrencyOptions()
        options.maxConcurrent = maxConcurrent
        return options
    }

    @OptionGroup(title: "A fleet on PostgreSQL")
    var database: DatabaseOptions

    @Option(
        name: .customLong("per-host"),
        help: ArgumentHelp("Connections at once per host (default: no limit).", valueName: "N"))
    var perHost: Int?

    @Option(help: ArgumentHelp("Retries of transient failures (0 = none).", valueName: "N"))
    var retries: Int = 3

    @OptionGroup
    var journal: JournalOptions

    @OptionGroup
    var connection: ConnectionOptions

    @OptionGroup(title: "Proxies, credentials and cookies")
    var network: NetworkOptions

    @OptionGroup(title: "Running as a service")
    var logging: LogOptions

    /// How long a stop may take before the downloads are cancelled outright.
    static let shutdownBound = Duration.seconds(30)

    /// The environment variable a secret may come from.
    static let secretVariable = "HAUL_RPC_SECRET"

    func validate() throws {
        try connection.validate(with: network)
        if let maxConcurrent, maxConcurrent < (database.database == nil ? 1 : 0) {
            throw ValidationError(
                "-j/--max-concurrent must be at least \(database.database == nil ? "1" : "0 (with --db)"), not "
                    + "\(maxConcurrent)")
        }
        if database.database != nil {
            if inputFile != nil || saveSession != nil {
                throw ValidationError(
                    "\(inputFile != nil ? "-i/--input-file" : "--save-session") is not available with --db: the "
                        + "shared queue is the session (add downloads with haul enqueue or aria2.addUri)")
            }
            try database.checkURL()
        }
        if let perHost, perHost < 1 { throw ValidationError("--per-host must be at least 1, not \(perHost)") }
        if retries < 0 { throw ValidationError("--retries must be 0 or more, not \(retries)") }
        let (host, _) = try Self.parseListen(listen)
        if (certificate == nil) != (privateKey == nil) {
            throw ValidationError("--rpc-certificate and --rpc-private-key go together: give both, or neither")
        }
        if !Self.isLoopback(host) {
            guard certificate != nil || insecureListen else {
                throw ValidationError(
                    "--rpc-listen '\(listen)' is not a loopback address: serve it over TLS (--rpc-certificate and "
                        + "--rpc-private-key) or, knowing the secret then crosses the network in clear, add "
                        + "--rpc-insecure-listen")
            }
            guard !noSecret else {
                throw ValidationError(
                    "--rpc-no-secret serves loopback only; --rpc-listen '\(listen)' is reached from other machines")
            }
        }
        for name in allowedHosts {
            guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || "-.:[]".contains($0) }) else {
                throw ValidationError("--rpc-allow-host '\(name)' is not a host name such as nas.local")
            }
        }
        if network.user != nil {
            throw ValidationError(
                "-u/--user applies to haul get; give a download its own http-user and http-passwd options, or use "
                    + "--netrc")
        }
        if noSecret && secretFile != nil {
            throw ValidationError("--rpc-no-secret and --rpc-secret-file cannot be combined")
        }
        for origin in allowedOrigins {
            guard let url = URL(string: origin), let scheme = url.scheme, ["http", "https"].contains(scheme),
                url.host != nil, url.path.isEmpty || url.path == "/"
            else {
                throw ValidationError("--rpc-allow-origin '\(origin)' is not an origin such as http://127.0.0.1:8080")
            }
        }
    }

    /// Whether `host` (a name or address of --rpc-listen) is this machine's loopback only.
    static func isLoopback(_ host: String) -> Bool {
        ["::1", "localhost"].contains(host.lowercased())
            || (host.hasPrefix("127.") && host.split(separator: ".").count == 4)
    }

    /// `HOST:PORT` (`[::1]:6800` for IPv6), the port from 0 (any free one) to 65535.
    static func parseListen(_ text: String, option: String = "--rpc-listen") throws -> (host: String, port: Int) {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (0...65535).contains(port)
        else { throw ValidationError("\(option) '\(text)' is not HOST:PORT") }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { throw ValidationError("\(option) '\(text)' has no host") }
        return (host, port)
    }

    mutating func run() async throws {
        // Stopped by a signal before it serves, as after: exit 0 (a service manager's clean stop).
        Interruption.install(earlyExitStatus: 0)
        let log = logging.log(label: "haul.daemon")
        var conf = try confPath.map(AriaConfiguration.init(path:)) ?? AriaConfiguration()
        // A flag given wins over the configuration file, as in aria2.
        if maxConcurrent != nil { conf.globalOptions["max-concurrent-downloads"] = nil }
        for note in conf.notes { log.line(.notice, "haul daemon: \(note)") }
        if destination.directory == ".", let dir = conf.daemon["dir"] { destination.directory = dir }
        if listen == Self.defaultListen, let port = conf.daemon["rpc-listen-port"] {
            guard let number = Int(port), (1...65535).contains(number) else {
                throw ValidationError("\(confPath ?? ""): rpc-listen-port must be a port number, not '\(port)'")
            }
            listen = "127.0.0.1:\(number)"
        }
        if certificate == nil, conf.daemon["rpc-secure"] == "true" {
            guard let file = conf.daemon["rpc-certificate"], let key = conf.daemon["rpc-private-key"] else {
                throw ValidationError("\(confPath ?? ""): rpc-secure=true needs rpc-certificate and rpc-private-key")
            }
            (certificate, privateKey) = (file, key)
        }
        let directory = destination.url
        try FileManager.default.createDirectory(
            at: directory.appendingPathComponent(".haul"), withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        // Held until the process ends: two daemons on one DIR would run the same stored downloads into the same files.
        let lock = try Self.lockDirectory(directory)
        defer { withExtendedLifetime(lock) {} }
        let secret = try loadSecret(directory: directory, conf: conf, log: log)
        var configuration = Downloader.Configuration.commandLine
        // A client's `dir` is checked to be inside DIR; no link under DIR may lead a file out of it either.
        configuration.containingDirectory = directory
        _ = try network.apply(to: &configuration, transport: connection.transport)
        configuration.tls = try connection.tlsSettings(checkingFiles: true)
        let journal = try self.journal.apply(
            to: &configuration, directory: directory, summary: "haul daemon did not start")
        connection.apply(to: &configuration)
        configuration.retryPolicy.maxRetries = retries
        if database.database != nil {
            try await runFleet(
                secret: secret, directory: directory, configuration: configuration, journal: journal, log: log)
        }
        var queueConfiguration = DownloadQueue.Configuration(perHostLimit: perHost, recordsRequests: false)
        concurrency.apply(to: &queueConfiguration, split: 1)
        let engine = connection.makeEngine(
            configuration: configuration, maxConcurrent: queueConfiguration.maxConcurrentDownloads)
        let queue = DownloadQueue(
            downloader: Downloader(transport: engine.transport, configuration: engine.configuration),
            configuration: queueConfiguration)
        let store: DaemonStore
        let storePath = directory.appendingPathComponent(".haul/daemon.sqlite").path
        do {
            store = try DaemonStore(path: storePath)
        } catch {
            throw ValidationError("cannot open the daemon's store '\(storePath)': \(error)")
        }
        var daemonConfiguration = Daemon.Configuration(
            root: directory, version: HaulCommand.version, globalOptions: conf.globalOptions, store: store)
        daemonConfiguration.sessionFile = (saveSession ?? conf.daemon["save-session"]).map {
            URL(fileURLWithPath: $0)
        }
        daemonConfiguration.onStoreError = { message in log.line(.warning, "haul daemon: warning: \(message)") }
        daemonConfiguration.logger = log.logger
        let daemon: Daemon
        do {
            daemon = try Daemon(queue: queue, configuration: daemonConfiguration)
        } catch let error as RPCError {
            throw ValidationError("\(confPath ?? "haul daemon"): \(error.message)")
        } catch {
            // What else it throws is a read of the store failing (a value damaged, or of the wrong type).
            throw ValidationError("cannot read the daemon's store '\(storePath)': \(error)")
        }
        if let input = inputFile ?? conf.daemon["input-file"] {
            let text = try Self.readTextFile(input, option: "-i")
            do {
                let added = try daemon.add(Aria2Files.readInput(text, name: input), from: input)
                log.line(.info, "haul daemon: added \(added) download\(added == 1 ? "" : "s") from \(input)")
            } catch {
                log.line(.error, "haul daemon: nothing added from \(input):\n\(error.message)")
                Foundation.exit(1)
            }
        }
        let registry = PrometheusCollectorRegistry()
        let metrics = QueueMetrics(
            queue: queue, factory: PrometheusMetricsFactory(registry: registry), depth: { daemon.depth() })
        metrics.start()
        var readiness = [MonitoringEndpoint.ReadinessCheck.store(store)]
        if let journal { readiness.append(.journal(journal)) }
        let monitoring = MonitoringEndpoint(
            registry: registry, bearerToken: secret?.value, readiness: readiness, refresh: { await metrics.refresh() })
        let (server, origin) = try await serve(daemon.endpoint(secret: secret), monitoring: monitoring, log: log)
        daemon.onNotification { method, gid in server.notify(method, gid: gid) }
        let stop = ResultBox<Void>()
        daemon.onShutdown { _ in stop.resolve(()) }
        log.line(
            .info,
            "haul daemon: serving aria2 JSON-RPC on \(origin)/jsonrpc and the dashboard on \(origin)/, downloading "
                + "into \(directory.path)")
        // SIGTERM and SIGINT (or aria2.shutdown) stop it: admission first (the server), then the downloads.
        try await CommandService.run(main: .until(stop), log: log, bound: Self.shutdownBound)
        await server.stop()
        metrics.stop()
        do {
            try daemon.saveSessionFile()
        } catch {
            log.line(.error, "haul daemon: --save-session: \(error.message)")
        }
        // Running downloads stop and keep their partial files (resumable through the journal); the daemon does not
        // record them as ended, so the next start brings them back.
        await daemon.stop()
        try? await engine.ownedTransport?.shutdown()
        journal?.finish()
        if let cookies = configuration.cookies, let path = network.cookieJar {
            do {
                try cookies.write(to: URL(fileURLWithPath: path))
            } catch {
                log.line(.error, "haul daemon: --cookie-jar: \(error)")
                Foundation.exit(1)
            }
        }
        Foundation.exit(0)
    }

    /// Starts serving `endpoint` where --rpc-listen says, over TLS when it is set up; says why and exits 1 when it
    /// cannot. Returns the server and its origin (`http://127.0.0.1:6800`).
    func serve(_ endpoint: RPCEndpoint, monitoring: MonitoringEndpoint, log: ServiceLog) async throws -> (
        server: RPCServer, origin: String
    ) {
        let (host, port) = try Self.parseListen(listen)
        let tls = try loadTLS()
        if !Self.isLoopback(host) && tls == nil {
            log.line(
                .warning,
                "haul daemon: warning: --rpc-insecure-listen: the RPC secret and every call cross the network in "
                    + "clear on \(listen)")
        }
        let server: RPCServer
        do {
            server = try await RPCServer.start(
                endpoint: endpoint, host: host, port: port,
                access: RPCAccess(
                    allowedOrigins: Set(allowedOrigins.map { $0.lowercased() }), allowedHosts: Set(allowedHosts)),
                tls: tls, monitoring: monitoring)
        } catch {
            log.line(.error, "haul daemon: cannot listen on \(listen): \(error)")
            Foundation.exit(1)
        }
        let shown = "\(host.contains(":") ? "[\(host)]" : host):\(server.port)"
        return (server, "\(tls == nil ? "http" : "https")://\(shown)")
    }

    /// `haul daemon --db`: the RPC and the dashboard over the shared queue, with a worker of -j connections writing
    /// into `directory` unless -j is 0. Returns only by exiting: 0 once stopped by a signal, 1 when the database
    /// cannot be reached.
    func runFleet(
        secret: RPCSecret?, directory: URL, configuration: Downloader.Configuration, journal: SQLiteJournal?,
        log: ServiceLog
    ) async throws -> Never {
        var configuration = configuration
        configuration.computesSHA256 = true
        let connections = concurrency.connections()
        let engine = connection.makeEngine(configuration: configuration, maxConcurrent: max(1, connections))
        let perHost = perHost
        try await database.withQueue(maximumConnections: 8) { queue in
            if let perHost {
                var settings = try await queue.hostSettings()
                settings.maxConnectionsPerHost = perHost
                try await queue.setHostSettings(settings)
            }
            let registry = PrometheusCollectorRegistry()
            var workerConfiguration = SharedQueueWorker.Configuration(directory: directory, maxConcurrent: connections)
            workerConfiguration.metricsFactory = PrometheusMetricsFactory(registry: registry)
            workerConfiguration.logger = log.logger
            let worker =
                connections == 0
                ? nil
                : SharedQueueWorker(
                    queue: queue, transport: engine.transport, downloaderConfiguration: engine.configuration,
                    configuration: workerConfiguration)
            let monitoring = WorkerCommand.monitoringEndpoint(
                registry: registry, token: secret?.value, worker: worker, queue: queue, journal: journal)
            let (server, origin) = try await serve(
                Fleet(queue: queue, version: HaulCommand.version).endpoint(secret: secret), monitoring: monitoring,
                log: log)
            log.line(
                .info,
                "haul daemon: serving aria2 JSON-RPC on \(origin)/jsonrpc and the fleet's dashboard on \(origin)/, for "
                    + "the queue '\(queue.name)' on \(queue.databaseURL)"
                    + (worker == nil ? " (downloading nothing here: -j 0)" : ", downloading into \(directory.path)"))
            // A stop ends the worker's run (its downloads go back to the queue, their partial files kept for a
            // resume) while the RPC still answers; the RPC stops after it.
            try await CommandService.run(
                main: .until(ResultBox()),
                helpers: worker.map { worker in [.cancelled(onShutdown: { _ = await worker.run() })] } ?? [], log: log,
                bound: Self.shutdownBound)
            await server.stop()
        }
        try? await engine.ownedTransport?.shutdown()
        journal?.finish()
        Foundation.exit(0)
    }

    /// The secret: from --rpc-secret-file, else $HAUL_RPC_SECRET, else DIR/.haul/rpc-secret (made on the first start
    /// and printed once); none with --rpc-no-secret, said at every start.
    /// Takes DIR/.haul/daemon.lock for this process (an exclusive `flock`, released when the process ends however it
    /// ends) and writes its PID there; refuses when another process holds it, naming that process.
    static func lockDirectory(_ directory: URL) throws -> FileHandle {
        let path = directory.appendingPathComponent(".haul/daemon.lock").path
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else {
            throw ValidationError("cannot open '\(path)': \(String(cString: strerror(errno)))")
        }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let holder = (try? handle.readToEnd()).flatMap { String(decoding: $0, as: UTF8.self) }?
                .trimmingCharacters(in: .whitespacesAndNewlines)
            throw ValidationError(
                "another haul daemon is serving '\(directory.path)'"
                    + (holder.map { $0.isEmpty ? "" : " (pid \($0))" } ?? "") + ": it holds '\(path)'")
        }
        let pid = Array("\(getpid())\n".utf8)
        guard ftruncate(descriptor, 0) == 0, pwrite(descriptor, pid, pid.count, 0) == pid.count else {
            throw ValidationError("cannot write '\(path)': \(String(cString: strerror(errno)))")
        }
        return handle
    }

    func loadSecret(directory: URL, conf: AriaConfiguration, log: ServiceLog) throws -> RPCSecret? {
        if noSecret {
            log.line(
                .warning,
                "haul daemon: warning: --rpc-no-secret: any program of any user on this machine can drive the "
                    + "downloads")
            return nil
        }
        if let secretFile { return try Self.readSecret(at: secretFile, option: "--rpc-secret-file") }
        if let value = ProcessInfo.processInfo.environment[Self.secretVariable] {
            guard let secret = RPCSecret(value) else { throw ValidationError("$\(Self.secretVariable) is empty") }
            return secret
        }
        if let value = conf.daemon["rpc-secret"], let confPath {
            // Kept in clear there, as aria2 keeps it: only a file its owner alone can read may hold it.
            try Self.checkOwnerOnly(confPath, named: "--conf-path '\(confPath)', which holds rpc-secret,")
            guard let secret = RPCSecret(value) else { throw ValidationError("\(confPath): rpc-secret is empty") }
            return secret
        }
        let store = directory.appendingPathComponent(".haul")
        let path = store.appendingPathComponent("rpc-secret").path
        if FileManager.default.fileExists(atPath: path) { return try Self.readSecret(at: path, option: nil) }
        try FileManager.default.createDirectory(at: store, withIntermediateDirectories: true)
        let value = RPCSecret.randomValue(bytes: 24)
        // Created readable by the owner only, and never over an existing file (O_EXCL).
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw ValidationError("cannot create '\(path)': \(String(cString: strerror(errno)))")
        }
        let line = Array((value + "\n").utf8)
        let written = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        guard written == line.count else { throw ValidationError("cannot write '\(path)'") }
        // Shown once on a terminal; never into a JSON log, which a log shipper copies elsewhere.
        log.line(
            .notice,
            "haul daemon: made an RPC secret, kept in \(path)"
                + (log.format == .json ? " (readable by you only)" : " (shown this once): \(value)"))
        return RPCSecret(value)
    }

    /// The certificate and key of --rpc-certificate and --rpc-private-key, `nil` without them.
    func loadTLS() throws -> RPCTLS? {
        guard let certificate, let privateKey else { return nil }
        // A group may share a key (Debian's ssl-cert group reads /etc/ssl/private), every user may not.
        try Self.checkOwnerOnly(privateKey, named: "--rpc-private-key '\(privateKey)'", others: 0o007)
        do {
            return try RPCTLS(certificateFile: certificate, privateKeyFile: privateKey)
        } catch {
            let option = error.file == certificate ? "--rpc-certificate" : "--rpc-private-key"
            throw ValidationError("\(option) \(error)")
        }
    }

    /// Refuses the file at `path`, which holds a secret, when users other than its owner can read it (`others`: the
    /// mode bits no one else may have).
    static func checkOwnerOnly(_ path: String, named: String, others: mode_t = 0o077) throws {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw ValidationError("\(named): \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & others == 0 else {
            throw ValidationError(
                "\(named) can be read by other users (mode \(String(info.st_mode & 0o777, radix: 8))); chmod 600 it")
        }
    }

    /// The text of the file at `path` a user handed with `option` (`--conf-path`, `-i`): a regular file of UTF-8
    /// text, a byte order mark first left out. Anything else is refused saying what it is (a directory, a FIFO, a
    /// line that is not UTF-8, by its number), not with Foundation's "The operation could not be completed".
    static func readTextFile(_ path: String, option: String) throws -> String {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw ValidationError("\(option) '\(path)': \(String(cString: strerror(errno)))")
        }
        switch info.st_mode & S_IFMT {
        case S_IFREG: break
        case S_IFDIR: throw ValidationError("\(option) '\(path)' is a directory")
        default: throw ValidationError("\(option) '\(path)' is not a regular file (a FIFO, a device...)")
        }
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw ValidationError("\(option) '\(path)': \(String(cString: strerror(errno)))")
        }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        var bytes: [UInt8]
        do {
            bytes = [UInt8](try handle.readToEnd() ?? Data())
        } catch {
            throw ValidationError("\(option) '\(path)' cannot be read: \(error.localizedDescription)")
        }
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }
        if let text = String(validating: bytes, as: UTF8.self) { return text }
        var line = 1
        var start = 0
        for (index, byte) in bytes.enumerated() where byte == UInt8(ascii: "\n") {
            if String(validating: bytes[start..<index], as: UTF8.self) == nil { break }
            line += 1
            start = index + 1
        }
        throw ValidationError("\(path):\(line): is not UTF-8 text")
    }

    /// The first line of the file at `path`, which only its owner may read.
    static func readSecret(at path: String, option: String?) throws -> RPCSecret {
        let named = option.map { "\($0) '\(path)'" } ?? "'\(path)'"
        try checkOwnerOnly(path, named: named)
        guard let text = try? String(contentsOfFile: path, encoding: .utf8),
            let line = text.split(whereSeparator: \.isNewline).first.map(String.init),
            let secret = RPCSecret(line.trimmingCharacters(in: .whitespaces))
        else { throw ValidationError("\(named) holds no secret") }
        return secret
    }
}

/// What an aria2 configuration file (`--conf-path`) says to `haul daemon`.
struct AriaConfiguration {
    /// The settings of the daemon itself: `dir`, `rpc-listen-port`, `rpc-secret`, `input-file`, `save-session`, and
    /// `rpc-secure` with `rpc-certificate` and `rpc-private-key`.
    var daemon: [String: String] = [:]
    /// The global options (download defaults, `max-concurrent-downloads`, `max-overall-download-limit`), a cumulative
    /// one's values joined by newlines.
    var globalOptions: [String: String] = [:]
    /// What to tell the user: options of aria2 that change nothing here.
    var notes: [String] = []

    static let daemonSettings: Set<String> = [
        "dir", "rpc-listen-port", "rpc-secret", "input-file", "save-session", "rpc-secure", "rpc-certificate",
        "rpc-private-key",
    ]

    init() {}

    /// Reads the file at `path`; an option aria2 does not know is an error naming its line.
    init(path: String) throws {
        let text = try DaemonCommand.readTextFile(path, option: "--conf-path")
        var unused: [String] = []
        do {
            for setting in try Aria2Files.readConfiguration(text, name: path) {
                if Self.daemonSettings.contains(setting.name) {
                    daemon[setting.name] = setting.value
                    continue
                }
                switch (setting.name, Aria2Files.role(of: setting.name)) {
                case ("rpc-listen-all", _), ("rpc-allow-origin-all", _):
                    if setting.value == "true" {
                        notes.append(
                            "\(path):\(setting.line): \(setting.name)=true is not followed: haul daemon listens on "
                                + "loopback unless --rpc-listen names another address (with TLS), and answers pages "
                                + "of other origins only when --rpc-allow-origin names them")
                    }
                case (_, .globalOption):
                    if let earlier = globalOptions[setting.name], setting.name == "header" {
                        globalOptions[setting.name] = earlier + "\n" + setting.value
                    } else {
                        globalOptions[setting.name] = setting.value
                    }
                case (_, .unused):
                    unused.append(setting.name)
                case (_, .unknown):
                    throw ValidationError("\(path):\(setting.line): no such option of aria2: \(setting.name)")
                }
            }
        } catch let error as RPCError {
            throw ValidationError(error.message)
        }
        if !unused.isEmpty {
            notes.append("\(path): not used by haul daemon: \(unused.joined(separator: ", "))")
        }
    }
}
