/// aria2's option names (its `src/prefs.cc`), for telling a typo from an option of a feature Haul does not have.
enum Aria2Options {
    /// Every option name aria2 1.37 knows.
    static let known: Set<String> = [
        "all-proxy", "all-proxy-passwd", "all-proxy-user", "allow-overwrite", "allow-piece-length-change",
        "always-resume", "async-dns", "async-dns-server", "auto-file-renaming", "auto-save-interval",
        "bt-detach-seed-only", "bt-enable-hook-after-hash-check", "bt-enable-lpd", "bt-exclude-tracker",
        "bt-external-ip", "bt-force-encryption", "bt-hash-check-seed", "bt-keep-alive-interval",
        "bt-load-saved-metadata", "bt-lpd-interface", "bt-max-open-files", "bt-max-peers", "bt-metadata-only",
        "bt-min-crypto-level", "bt-prioritize-piece", "bt-remove-unselected-file", "bt-request-peer-speed-limit",
        "bt-request-timeout", "bt-require-crypto", "bt-save-metadata", "bt-seed-unverified", "bt-stop-timeout",
        "bt-timeout", "bt-tracker", "bt-tracker-connect-timeout", "bt-tracker-interval", "bt-tracker-timeout",
        "ca-certificate", "certificate", "check-certificate", "check-integrity", "checksum", "conditional-get",
        "conf-path", "connect-timeout", "console-log-level", "content-disposition-default-utf8", "continue", "daemon",
        "deferred-input", "dht-entry-point", "dht-entry-point-host", "dht-entry-point-host6", "dht-entry-point-port",
        "dht-entry-point-port6", "dht-entry-point6", "dht-file-path", "dht-file-path6", "dht-listen-addr",
        "dht-listen-addr6", "dht-listen-port", "dht-message-timeout", "dir", "disable-ipv6", "disk-cache",
        "dns-timeout", "download-result", "dry-run", "dscp", "enable-async-dns6", "enable-color", "enable-dht",
        "enable-dht6", "enable-http-keep-alive", "enable-http-pipelining", "enable-mmap", "enable-peer-exchange",
        "enable-rpc", "event-poll", "file-allocation", "follow-metalink", "follow-torrent", "force-save",
        "force-sequential", "ftp-passwd", "ftp-pasv", "ftp-proxy", "ftp-proxy-passwd", "ftp-proxy-user",
        "ftp-reuse-connection", "ftp-type", "ftp-user", "gid", "hash-check-only", "header", "help", "http-accept-gzip",
        "http-auth-challenge", "http-no-cache", "http-passwd", "http-proxy", "http-proxy-passwd", "http-proxy-user",
        "http-user", "https-proxy", "https-proxy-passwd", "https-proxy-user", "human-readable", "index-out",
        "input-file", "interface", "keep-unfinished-download-result", "listen-port", "load-cookies", "log", "log-level",
        "lowest-speed-limit", "max-concurrent-downloads", "max-connection-per-server", "max-download-limit",
        "max-download-result", "max-downloads", "max-file-not-found", "max-http-pipelining", "max-mmap-limit",
        "max-overall-download-limit", "max-overall-upload-limit", "max-resume-failure-tries", "max-tries",
        "max-upload-limit", "metalink-base-uri", "metalink-enable-unique-protocol", "metalink-file",
        "metalink-language", "metalink-location", "metalink-os", "metalink-preferred-protocol", "metalink-version",
        "min-split-size", "min-tls-version", "multiple-interface", "netrc-path", "no-conf", "no-file-allocation-limit",
        "no-netrc", "no-proxy", "no-want-digest-header", "on-bt-download-complete", "on-download-complete",
        "on-download-error", "on-download-pause", "on-download-start", "on-download-stop",
        "optimize-concurrent-downloads", "out", "parameterized-uri", "pause", "pause-metadata", "peer-agent",
        "peer-connection-timeout", "peer-id-prefix", "piece-length", "private-key", "proxy-method", "quiet",
        "realtime-chunk-checksum", "referer", "remote-time", "remove-control-file", "retry-wait", "reuse-uri",
        "rlimit-nofile", "rpc-allow-origin-all", "rpc-certificate", "rpc-listen-all", "rpc-listen-port",
        "rpc-max-request-size", "rpc-passwd", "rpc-private-key", "rpc-save-upload-metadata", "rpc-secret", "rpc-secure",
        "rpc-user", "save-cookies", "save-not-found", "save-session", "save-session-interval", "seed-ratio",
        "seed-time", "select-file", "select-least-used-host", "server-stat-if", "server-stat-of", "server-stat-timeout",
        "show-console-readout", "show-files", "socket-recv-buffer-size", "split", "ssh-host-key-md",
        "startup-idle-time", "stderr", "stop", "stop-with-process", "stream-piece-selector", "summary-interval",
        "timeout", "torrent-file", "truncate-console-readout", "uri-selector", "use-head", "user-agent", "version",
    ]

    /// The options whose values are secrets: never answered, logged or stored in clear.
    static let secret: Set<String> = [
        "http-passwd", "all-proxy-passwd", "http-proxy-passwd", "https-proxy-passwd", "ftp-passwd", "ftp-proxy-passwd",
        "rpc-secret", "rpc-passwd",
    ]
}
