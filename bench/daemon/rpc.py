"""The daemon's benchmark rows (bench/daemon/run.sh runs it): aria2 clients' calls against a running haul daemon.

python3 rpc.py PORT SECRET PID ROOT_URL MODE DIR
  lists:   10,000 addUri (paused) in one system.multicall; 1,000 of them removed (the history); then
           tellWaiting(0,1000) and tellStopped(-1,1000), each the median of 21 calls, all keys and AriaNg's keys;
           then four clients polling once a second as AriaNg does for 20 s: the daemon's CPU over that time.
  history: 100,000 downloads of ROOT_URL/small (4 bytes), added 1,000 at a time (one multicall each, once the
           previous thousand ended, as a client feeding a queue does) and run to the end; the daemon's peak RSS
           (VmHWM) then, with 100,000 finished downloads in its history, and the dashboard's pages of that history
           (newest, a search, two sorts). (The lists mode's peak RSS is that of
           10,000 downloads waiting at once.)
  throughput: ROOT_URL/m/ (200 x 1 MiB) and ROOT_URL/k/ (10,000 x 4 KiB) at width 8, through the daemon (one
           multicall, timed until a poll every 20 ms sees every download completed) and with
           `$HAUL get -q -j 8 -i LIST`, alternating, each run into a new directory under DIR (the daemon's root);
           medians of ROUNDS (default 9) after a warm-up, of the time and of the CPU per file (the daemon's from
           /proc, haul get's user + system time).
Prints one "row: value" line per measure.
"""
import http.client, json, os, resource, shutil, statistics, subprocess, sys, threading, time

port, secret, pid, root_url, mode = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
directory = sys.argv[6]
token = "token:" + secret
ARIANG_KEYS = ["gid", "totalLength", "completedLength", "uploadSpeed", "downloadSpeed", "connections", "numSeeders",
               "seeder", "status", "errorCode", "verifiedLength", "verifyIntegrityPending", "files", "bittorrent",
               "infoHash"]


class Client:
    def __init__(self):
        self.connection = http.client.HTTPConnection("127.0.0.1", port)

    @staticmethod
    def body(method, params):
        return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()

    def call(self, method, params, body=None):
        """The result of `method`; `body`, when given, is the request already encoded (`Client.body`)."""
        self.connection.request("POST", "/jsonrpc", body or Client.body(method, params),
                                {"Content-Type": "application/json"})
        answer = json.loads(self.connection.getresponse().read())
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]


def cpu_seconds():
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 1/100 s


def peak_rss_mib():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024


def median_ms(client, method, params, runs=21):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        client.call(method, [token] + params)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def add_many(client, count, start, options):
    calls = [{"methodName": "aria2.addUri",
              "params": [token, [f"{root_url}/small?n={start + i}"], dict(options, out=f"f{start + i:06d}")]}
             for i in range(count)]
    began = time.perf_counter()
    answers = client.call("system.multicall", [calls])
    elapsed = time.perf_counter() - began
    gids = [a[0] for a in answers if isinstance(a, list)]
    if len(gids) != count:
        raise RuntimeError(f"only {len(gids)} of {count} added: {answers[:3]}")
    return gids, elapsed


client = Client()
if mode == "lists":
    gids, elapsed = add_many(client, 10000, 0, {"pause": "true"})
    print(f"multicall of 10,000 addUri: {elapsed:.2f} s")
    removed = [{"methodName": "aria2.forceRemove", "params": [token, gid]} for gid in gids[:1000]]
    client.call("system.multicall", [removed])
    while int(client.call("aria2.getGlobalStat", [token])["numStopped"]) < 1000:
        time.sleep(0.05)
    print(f"tellWaiting(0,1000), 9,000 waiting: {median_ms(client, 'aria2.tellWaiting', [0, 1000]):.1f} ms")
    print(f"tellWaiting(0,1000), AriaNg's keys: {median_ms(client, 'aria2.tellWaiting', [0, 1000, ARIANG_KEYS]):.1f} ms")
    print(f"tellStopped(-1,1000), 1,000 stopped: {median_ms(client, 'aria2.tellStopped', [-1, 1000]):.1f} ms")
    print(f"getGlobalStat: {median_ms(client, 'aria2.getGlobalStat', []):.2f} ms")

    def poll(stop):
        own = Client()
        while not stop.is_set():
            began = time.perf_counter()
            own.call("system.multicall", [[
                {"methodName": "aria2.getGlobalStat", "params": [token]},
                {"methodName": "aria2.tellActive", "params": [token, ARIANG_KEYS]},
                {"methodName": "aria2.tellWaiting", "params": [token, 0, 1000, ARIANG_KEYS]},
                {"methodName": "aria2.tellStopped", "params": [token, -1, 1000, ARIANG_KEYS]}]])
            stop.wait(max(0, 1 - (time.perf_counter() - began)))

    stop = threading.Event()
    clients = [threading.Thread(target=poll, args=(stop,)) for _ in range(4)]
    before, began = cpu_seconds(), time.perf_counter()
    for thread in clients:
        thread.start()
    time.sleep(20)
    stop.set()
    for thread in clients:
        thread.join()
    share = (cpu_seconds() - before) / (time.perf_counter() - began) * 100
    print(f"four clients polling once a second: {share:.1f}% of a core")
    print(f"peak RSS, 10,000 downloads: {peak_rss_mib():.0f} MiB")
elif mode == "history":
    added_time = 0.0
    began = time.perf_counter()
    for batch in range(100):
        _, elapsed = add_many(client, 1000, batch * 1000, {})
        added_time += elapsed
        while True:
            stat = client.call("aria2.getGlobalStat", [token])
            if int(stat["numActive"]) + int(stat["numWaiting"]) == 0:
                break
            time.sleep(0.05)
    stopped = int(client.call("aria2.getGlobalStat", [token])["numStopped"])
    complete = int(client.call("haul.tellHistory", [token, 0, 1, {"status": ["complete"]}])["total"])
    if complete != 100000:
        raise RuntimeError(f"only {complete:,} of 100,000 downloads completed")
    print(f"100,000 downloads in 100 multicalls: {added_time:.1f} s adding, {time.perf_counter() - began:.1f} s in all")
    print(f"tellStopped(-1,1000), {stopped:,} stopped: {median_ms(client, 'aria2.tellStopped', [-1, 1000]):.1f} ms")
    print(f"peak RSS, {stopped:,} finished downloads in history: {peak_rss_mib():.0f} MiB")
    # What the dashboard asks for, a page of 50 at a time, over the whole history.
    page_keys = ["gid", "status", "totalLength", "completedLength", "downloadSpeed", "connections", "files"]
    for label, filter in [("newest", {}), ("search 'f099999'", {"query": "f099999"}),
                          ("largest first", {"sort": "-size"}), ("by path", {"sort": "path"})]:
        ms = median_ms(client, "haul.tellHistory", [0, 50, filter, page_keys])
        print(f"dashboard page haul.tellHistory(0,50,{label}), {stopped:,} stopped: {ms:.1f} ms")
elif mode == "throughput":
    rows = {"s2w8": ("m", 200, 1 << 20), "s3": ("k", 10000, 4096)}
    rounds = int(os.environ.get("ROUNDS", "9"))

    def through_daemon(urls, dest):
        calls = [{"methodName": "aria2.addUri", "params": [token, [url], {"dir": dest}]} for url in urls]
        # Encoded before the clock starts, as haul get's list is written before its run.
        body = Client.body("system.multicall", [calls])
        cpu = cpu_seconds()
        began = time.perf_counter()
        answers = client.call("system.multicall", None, body)
        gids = [a[0] for a in answers if isinstance(a, list)]
        if len(gids) != len(urls):
            raise RuntimeError(f"only {len(gids)} of {len(urls)} added: {answers[:3]}")
        # Polled every 20 ms: the end is seen at most 20 ms late (about 1% of s3). Each getGlobalStat also writes
        # the endings gathered so far (an answer that counts them comes after them): a poll every 2 ms costs a sixth
        # of s3's time on 2 cores.
        while True:
            stat = client.call("aria2.getGlobalStat", [token])
            if int(stat["numActive"]) + int(stat["numWaiting"]) == 0:
                break
            time.sleep(0.02)
        elapsed = time.perf_counter() - began
        used = cpu_seconds() - cpu
        client.call("aria2.purgeDownloadResult", [token])
        return elapsed, used

    def through_get(urls, dest):
        listing = dest + ".list"
        with open(listing, "w") as f:
            f.write("".join(url + "\n" for url in urls))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        subprocess.run([os.environ["HAUL"], "get", "-q", "-j", "8", "--retries", "0", "-d", dest, "-i", listing],
                       check=True)
        elapsed = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        os.remove(listing)
        return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    def check(dest, count, size):
        names = [n for n in os.listdir(dest) if not n.startswith(".")]
        if len(names) != count or any(os.path.getsize(os.path.join(dest, n)) != size for n in names):
            raise RuntimeError(f"{dest}: {len(names)} files, not {count} of {size} bytes")

    for key, (folder, count, size) in rows.items():
        urls = [f"{root_url}/{folder}/f{i:0{3 if folder == 'm' else 5}d}" for i in range(count)]
        times = {"daemon": [], "get": []}
        cpus = {"daemon": [], "get": []}
        for run in range(rounds + 1):  # the first is a warm-up
            order = [("daemon", through_daemon), ("get", through_get)]
            if run % 2:
                order.reverse()
            for name, how in order:
                dest = os.path.join(directory, f"{key}-{name}-{run}")
                os.makedirs(dest)
                elapsed, used = how(urls, dest)
                check(dest, count, size)
                shutil.rmtree(dest)
                if run > 0:
                    times[name].append(elapsed)
                    cpus[name].append(used)
        daemon, get = statistics.median(times["daemon"]), statistics.median(times["get"])
        # The daemon's CPU is counted in ticks of 10 ms: per file it is exact to a microsecond only for many files.
        per_file = {name: statistics.median(cpus[name]) / count * 1e6 for name in cpus}
        print(f"{key} ({count:,} files, width 8): daemon {daemon:.3f} s, haul get {get:.3f} s, "
              f"daemon at {get / daemon:.2f}x haul get; CPU per file: daemon {per_file['daemon']:.0f} µs, "
              f"haul get {per_file['get']:.0f} µs")
