#!/usr/bin/env python3
"""Haul against curl, wget2, aria2c and wget in one run (run it through `bench/compare`, which installs the tools
and builds `haul`).

Scenarios (RUNS repetitions after a warm-up, tools alternating, each into two places on the real disk: a newly made
ext4 per run, where every tool starts alike, and one directory reused from run to run and emptied before each, as a
user's download directory is; then each once more on tmpfs, where the file system costs least, to separate network
from file-system cost):
  s1  one 1 GiB file from nginx
  s2  200 x 1 MiB from nginx at width 1 (s2w1) and width 8 (s2w8)
  s3  10,000 x 4 KiB from nginx at width 8
  s4  50 x 4 MiB from `haul serve` throttled to 4 MiB/s per response, width 8: concurrency, not CPU, decides
  s5  s4 with 10% of the files failing once with 503 and 5% cut mid-body once; only correct files count,
      and the bytes the server sent beyond the total size are reported
  s1s, s2w1s, s2w8s, s3s  s1, s2 and s3 over HTTPS (nginx with TLS, HTTP/2 offered by ALPN; each tool trusts a
      bundle of the system's CA certificates and the run's CA, and otherwise keeps its defaults)
  seg8  one 512 MiB file from `haul serve` throttled to 8 MiB/s per response: `haul get -s 8` (8 connections, one
        segment each) against `aria2c -x 8 -s 8` and `haul get -s 1`
  seg-nginx  s1's 1 GiB file from nginx, unthrottled: `haul get -s 4` against `haul get -s 1`
  seg-mirrors  seg8's file from two `haul serve` processes, both URLs on one tab-separated input line (aria2's
        mirror convention, which haul reads too): `haul get -s 8` against `aria2c -x 8 -s 8`
  list100k, list1m  100,000 and 1,000,000 URLs of 64-byte generated files from `haul serve`, width 8 (issue 30: a
        million URLs in bounded memory): haul against curl and aria2c (`--deferred-input=true`), then the same `haul
        get` again into the same destination, which its journal makes skip every file. An ext4 with 2,500,000
        inodes (not the reused directory), then once on tmpfs (a page of memory per file: 4 GiB for list1m), one
        short warm-up list; HAUL_BENCH_LIST_SCALE (default 1) multiplies both counts, e.g. 0.02 for 2,000 and
        20,000 while developing

Every run starts from an empty destination and is checked byte for byte against the reference files (the list rows:
every file's name and size, and the bytes of a sample); a run that fails or leaves a wrong or missing file counts as
failed, never as a time. Figures: wall time, throughput (MB/s =
10^6 bytes/s, or files/s), CPU seconds (user + system of the tool's process) and peak RSS, both from GNU time.
"""

import argparse
import filecmp
import math
import os
import platform
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAUL = os.path.join(ROOT, ".build-static", "release", "haul")  # bench/compare builds it (bench/lib.sh build_haul)
MIB = 1 << 20

# s4/s5: the throttle and the faults. 50 files over 8 slots take ceil(50 / 8) = 7 rounds of SIZE / RATE seconds at
# best; that is the "throttle limit" the target measures against.
THROTTLED_FILES, THROTTLED_SIZE, THROTTLED_RATE = 50, 4 * MIB, 4 * MIB

# seg8/seg-mirrors: one file whose every response is throttled, so only more connections make it faster; its
# throttle limit is SIZE / (RATE x connections): 8 s on 8 connections, 64 s on one.
SEGMENTED_NAME, SEGMENTED_SIZE, SEGMENTED_RATE = "seg", 512 * MIB, 8 * MIB

# list100k/list1m: many tiny generated files, named f0000000, f0000001, ... (every URL distinct, and the name each
# tool gives the file: the path's last component, without the query). HAUL_BENCH_LIST_SCALE multiplies both counts,
# to try the rows in minutes rather than hours. Both rows get the same file system, with inodes for a million files
# and a margin (the default ratio gives an 8 GiB ext4 ~524,000), so their files/s and RSS compare like for like.
LIST_SCALE = float(os.environ.get("HAUL_BENCH_LIST_SCALE", "1"))
LIST_SIZE = 64  # bytes per file; under 64 KiB, where list_bytes() reproduces the server's generator
LIST_INODES = 2_500_000
LIST_WARMUP_FILES = 1000  # the warm-up runs on the first ones only: a full warm-up of list1m would take an hour
LIST_SAMPLES = 1000  # files compared byte for byte after each run (all are checked for name and size)
LIST_NAME = re.compile(r"f(\d{7,})")


def fails_once(index):
    """10% of the throttled files answer 503 to their first request."""
    return index % 10 == 3


def cut_once(index):
    """5% (rounded up: 3 of 50) are cut after half their body on their first request."""
    return index % 20 == 7


@dataclass
class Item:
    url: str
    name: str  # the file name every tool ends up with (wget and wget2 append the query; see find_output)
    reference: str  # path of the expected bytes


@dataclass
class Scenario:
    key: str
    title: str
    width: int
    tools: list
    unit: str  # "MB/s" or "files/s"
    server: str  # "nginx" or "haul-serve"
    timeout: float
    ca: str = None  # over HTTPS: the CA bundle every tool is told to trust
    split: int = 0  # segmented scenarios: connections per file (haul -s, aria2c -x and -s); 0: the tools' defaults
    mirrors: int = 1  # haul-serve scenarios: servers, each URL of the file a mirror on the same input line
    listed: bool = False  # list100k/list1m: `files` generated URLs, lists written once (see url_list)
    inodes: int = 0  # real-disk runs: mkfs.ext4 -N (0: its default)
    tmpfs: bool = True  # also once on tmpfs
    reused: bool = True  # also into the reused directory (ReusedDirectory)
    rerun: bool = False  # `haul get` again into the same destination after its run, timed as RERUN_TOOL
    inputs: object = None  # listed scenarios: the UrlList, once written
    total_bytes: int = 0
    files: int = 0
    items: list = field(default_factory=list)  # nginx scenarios: fixed; haul-serve: rebuilt per run (new port)


@dataclass
class Run:
    wall: float
    cpu: float
    rss_mib: float
    ok: bool
    extra_bytes: float = math.nan  # served beyond the total size (haul-serve scenarios only)
    why: str = ""
    served: tuple = ()  # body bytes each `haul serve` sent (one per mirror)
    requests: int = -1  # listed scenarios: requests `haul serve` received during the run
    rerun: "Run" = None  # listed scenarios: the same `haul get` again into the same destination


def log(message):
    print(message, file=sys.stderr, flush=True)


def measured(argv, timeout, stderr_path, interrupt=False):
    """Runs argv; returns (exit status, wall seconds, CPU seconds, peak RSS in MiB) of that process alone.

    CPU and RSS come from GNU time rather than from wait4 here: a child forked from this Python process would
    count Python's own pages (~20 MiB) in its peak RSS before it execs; time's are ~2 MiB. A run over `timeout`
    is killed and returns -9 and no figures; with `interrupt` it is first sent SIGINT, as a user's ^C, and given a
    minute to stop, so that GNU time still reports its CPU time and peak RSS (the list rows: what a tool holds
    after an hour on a million URLs says something even when it has not finished)."""
    usage_path = stderr_path + ".time"
    with open(stderr_path, "wb") as err:
        start = time.perf_counter()
        process = subprocess.Popen(["/usr/bin/time", "-o", usage_path, "-f", "%U %S %M", *argv],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        # A blocking wait, with the time limit kept by a timer: `Popen.wait(timeout=...)` polls, sleeping up to
        # 50 ms between looks, so every wall time came out rounded up to a step of ~50 ms (a 0.47 s run measured
        # 0.516 s, a 0.52 s one 0.566 s): two tools within 50 ms of each other measured the same.
        timed_out = threading.Event()

        def kill():
            timed_out.set()
            subprocess.run(["pkill", "-KILL", "-P", str(process.pid)])  # the tool, then time itself
            process.kill()

        def stop():
            timed_out.set()
            subprocess.run(["pkill", "-INT", "-P", str(process.pid)])  # the tool; time reports when it ends
            grace.start()

        grace = threading.Timer(60, kill)
        watchdog = threading.Timer(timeout, stop if interrupt else kill)
        watchdog.start()
        try:
            status = process.wait()
        finally:
            watchdog.cancel()
            grace.cancel()
        wall = time.perf_counter() - start
        if timed_out.is_set():
            try:
                with open(usage_path) as f:  # GNU time truncates it as it starts: empty if it was killed too
                    fields = f.read().split()[-3:]
                if interrupt:
                    return -9, math.nan, float(fields[0]) + float(fields[1]), float(fields[2]) / 1024
            except (OSError, ValueError, IndexError):
                pass
            return -9, math.nan, math.nan, math.nan
    with open(usage_path) as f:
        fields = f.read().split()[-3:]  # after "Command exited with non-zero status N", if any
    user, system, rss_kib = float(fields[0]), float(fields[1]), float(fields[2])
    return status, wall, user + system, rss_kib / 1024


# --- tools -------------------------------------------------------------------------------------------------------

BASELINE_TOOL = "haul baseline (NIO)"  # with --baseline: another haul binary, run like "haul (NIO)"
BASELINE = None

SINGLE_TOOL = "haul (NIO) -s 1"  # segmented scenarios: `haul get` on one connection, what -s N is measured against

RERUN_TOOL = "haul (NIO) rerun"  # list rows: the same `haul get` again into the destination its run just filled

TOOLS = {
    "haul (NIO)": "haul-nio",
    SINGLE_TOOL: "haul-nio-single",
    "haul (AsyncHTTPClient)": "haul-ahc",
    BASELINE_TOOL: "haul-baseline",
    "curl": "curl",
    "wget2": "wget2",
    "aria2c": "aria2c",
    "wget": "wget",
}
# `haul --transport urlsession` exists on Apple platforms only (bench/download/run.sh measures URLSession on Linux).
PARALLEL_TOOLS = ["haul (NIO)", "haul (AsyncHTTPClient)", "curl", "wget2", "aria2c"]
ALL_TOOLS = PARALLEL_TOOLS + ["wget"]  # wget -i is sequential only
HAUL_DEFAULT = "haul (NIO)"  # the ratios are to this one: `haul get`'s default transport
LIST_TOOLS = [HAUL_DEFAULT, "curl", "aria2c"]  # issue 30 names these; the rerun row comes with HAUL_DEFAULT's runs


# The real disk's places, as the results name them (the tmpfs pass is "tmpfs").
PLACE_NAMES = {"disk": "a fresh ext4", "reused": "the reused directory"}


def label(tool, scenario):
    """The tool's name in a table, with the flags a segmented scenario adds."""
    if scenario.split and tool in (HAUL_DEFAULT, BASELINE_TOOL):
        return f"{tool} -s {scenario.split}"
    if scenario.split and tool == "aria2c":
        return f"aria2c -x {scenario.split} -s {scenario.split}"
    return tool


def connections(tool, scenario):
    """Connections the tool fetches a segmented scenario's file over."""
    return 1 if tool == SINGLE_TOOL else scenario.split


def write_inputs(items, directory):
    """The URL list (haul, wget2, aria2c, wget) and curl's config (URL and output name pairs)."""
    urls = os.path.join(directory, "list.txt")
    with open(urls, "w") as f:
        f.writelines(item.url + "\n" for item in items)
    config = os.path.join(directory, "list.curl")
    with open(config, "w") as f:
        for item in items:
            f.write(f'url = "{item.url}"\noutput = "{item.name}"\n')
    return urls, config


def command(tool, width, dest, urls, config, ca=None, split=0, long_list=False):
    """Each tool as a user would run it for a batch, with retries on (the same flags in every scenario); over HTTPS
    each is told to trust `ca` and otherwise left to its defaults (HTTP/2 where it offers it). `split`: connections
    per file in the segmented scenarios (haul's -s, which counts against -j, so width is split there; aria2c's -s,
    with -x, its cap per server, as large). `long_list`: the list rows, where aria2c is told to read its input as
    it goes (`--deferred-input`; by default it parses the whole file into memory first), as its manual advises for
    a file with a lot of URIs; haul and curl have no such switch."""
    if tool.startswith("haul"):
        transport = "async-http-client" if tool == "haul (AsyncHTTPClient)" else "nio"
        binary = BASELINE if tool == BASELINE_TOOL else HAUL
        trust = ["--cacert", ca] if ca else []
        segments = ["-s", str(1 if tool == SINGLE_TOOL else split)] if split else []
        return [binary, "get", "-q", "-j", str(width), *segments, "-d", dest, "-i", urls, "--transport", transport,
                *trust]
    if tool == "curl":
        # --fail: without it a 503 body is saved as the file; --retry-all-errors: retry a cut body too.
        parallel = ["--parallel", "--parallel-max", str(width)] if width > 1 else []
        trust = ["--cacert", ca] if ca else []
        return ["curl", "-s", "--fail", "--retry", "5", "--retry-all-errors", *parallel, *trust,
                "--output-dir", dest, "-K", config]
    trust = [f"--ca-certificate={ca}"] if ca else []
    if tool == "wget2":
        return ["wget2", "-q", "--no-robots", "--tries", "5", "--max-threads", str(width), "-nd", "-P", dest,
                *trust, "-i", urls]
    if tool == "aria2c":
        # --retry-wait > 0 is what makes aria2c retry a 503.
        segments = ["-x", str(split), "-s", str(split)] if split else []
        deferred = ["--deferred-input=true"] if long_list else []
        return ["aria2c", "-q", "-j", str(width), *segments, "--max-tries=5", "--retry-wait=1", *deferred, "-d", dest,
                *trust, "-i", urls]
    if tool == "wget":
        return ["wget", "-q", "--tries=5", "--retry-on-http-error=503", "-nd", "-P", dest, *trust, "-i", urls]
    raise ValueError(tool)


def find_output(dest, name):
    """The file a tool wrote for `name`: wget and wget2 keep the URL's query in the file name."""
    exact = os.path.join(dest, name)
    if os.path.exists(exact):
        return exact
    for entry in os.listdir(dest):
        if entry.startswith(name + "?"):
            return os.path.join(dest, entry)
    return None


def verify(items, dest):
    """"" when every file is there and byte-identical, else what is wrong (first few)."""
    problems = []
    for item in items:
        path = find_output(dest, item.name)
        if path is None:
            problems.append(f"{item.name} missing")
        elif not filecmp.cmp(path, item.reference, shallow=False):
            problems.append(f"{item.name} differs ({os.path.getsize(path)} bytes)")
        if len(problems) >= 3:
            break
    return "; ".join(problems)


# --- servers -----------------------------------------------------------------------------------------------------

LIB = os.path.join(ROOT, "bench", "lib.sh")


class Nginx:
    """nginx on a free loopback port serving `root`, with the configuration every bench script uses (bench/lib.sh's
    start_nginx and stop_nginx)."""

    def __init__(self, work, root):
        self.work = work
        started = subprocess.run(
            ["bash", "-c",
             'source "$0" && WORK="$1" && start_nginx "$2" && echo "$NGINX_PORT $NGINX_TLS_PORT $NGINX_CA"',
             LIB, work, root],
            check=True, capture_output=True, text=True)
        port, tls_port, ca = started.stdout.split()[-3:]
        self.port, self.tls_port, self.ca = int(port), int(tls_port), ca

    def stop(self):
        subprocess.run(["bash", "-c", 'source "$0" && WORK="$1" && stop_nginx', LIB, self.work])


class HaulServe:
    """`haul serve` for one run: a fresh process, so every "fail once" and "cut once" fault fires again. `port`: the
    list rows' lists, written once, name a fixed one (the server sets SO_REUSEADDR, so each run's can take it)."""

    def __init__(self, port=0):
        # Port 0: the server picks a free one and says which ("Serving on http://127.0.0.1:PORT").
        self.process = subprocess.Popen([HAUL, "serve", "--port", str(port)], stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True)
        self.requests = -1
        self.peak_rss_mib = math.nan
        line = self.process.stdout.readline()
        match = re.match(r"Serving on http://127\.0\.0\.1:(\d+)", line)
        if not match:
            raise RuntimeError(f"haul serve did not start: {line!r}")
        self.port = int(match.group(1))

    def stop(self):
        """Stops it and returns the body bytes it sent; `requests` and `peak_rss_mib` tell the rest."""
        try:
            with open(f"/proc/{self.process.pid}/status") as f:
                self.peak_rss_mib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
        except (OSError, StopIteration):
            pass
        self.process.send_signal(2)
        output, _ = self.process.communicate(timeout=30)
        match = re.search(r"(\d+) body bytes sent", output)
        if not match:
            raise RuntimeError(f"haul serve printed no summary: {output!r}")
        requests = re.search(r"after (\d+) requests", output)
        self.requests = int(requests.group(1)) if requests else -1
        return int(match.group(1))


def throttled_items(port, faults, reference_dir):
    items = []
    for i in range(THROTTLED_FILES):
        name = f"t{i:02d}"
        query = f"size={THROTTLED_SIZE}&rate={THROTTLED_RATE}"
        if faults and fails_once(i):
            query += "&fail=1"
        if faults and cut_once(i):
            query += f"&cutAfter={THROTTLED_SIZE // 2}&cutTimes=1"
        items.append(Item(f"http://127.0.0.1:{port}/bytes/{name}?{query}", name, os.path.join(reference_dir, name)))
    return items


def segmented_items(ports, reference_dir):
    """The one throttled file of seg8 and seg-mirrors, from each server: the same path on every port serves the same
    bytes, and the URLs on one line, separated by tabs, are mirrors of one file (haul and aria2c alike)."""
    query = f"size={SEGMENTED_SIZE}&rate={SEGMENTED_RATE}"
    urls = [f"http://127.0.0.1:{port}/bytes/{SEGMENTED_NAME}?{query}" for port in ports]
    return [Item("\t".join(urls), SEGMENTED_NAME, os.path.join(reference_dir, SEGMENTED_NAME))]


def list_name(index):
    return f"f{index:07d}"


def list_bytes(name, size=LIST_SIZE):
    """The bytes `haul serve` sends for /bytes/NAME?size=SIZE, SIZE up to 64 KiB (HaulTestServer's GeneratedContent:
    FNV-1a over the name and content version 0 seeds splitmix64, whose outputs, little-endian, are the bytes; past
    64 KiB a per-block offset is added, which the list rows never reach). Computed here, a million reference files
    need neither a fetch nor a million inodes."""
    mask = (1 << 64) - 1
    seed = 0xcbf29ce484222325
    for byte in name.encode():
        seed = ((seed ^ byte) * 0x100000001b3) & mask
    state = (seed * 0x100000001b3) & mask  # the version, 0, folded in
    out = bytearray()
    while len(out) < size:
        state = (state + 0x9e3779b97f4a7c15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & mask
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & mask
        out += (z ^ (z >> 31)).to_bytes(8, "little")
    return bytes(out[:size])


@dataclass
class UrlList:
    """A list row's inputs, written once into the work directory (not onto the run's disk, which is remade per run):
    a million URLs make a ~45 MB list and a ~75 MB curl config, seconds to write. The URLs name a port fixed for the
    scenario, which each run's fresh `haul serve` listens on. `warm_*`: the first LIST_WARMUP_FILES, for the
    warm-up."""
    port: int
    urls: str
    config: str
    warm_urls: str
    warm_config: str


def free_port():
    """A free loopback port below the usual ephemeral range (32768-60999), so that no client's outgoing connection
    takes it between two runs' servers."""
    for port in random.Random().sample(range(20000, 32768), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port between 20000 and 32767")


def url_list(scenario, work):
    """The scenario's UrlList, written on first use: one URL per line for haul and aria2c, which both name a file
    after the URL path's last component, without the query; curl's config gives every output name."""
    if scenario.inputs:
        return scenario.inputs
    directory = os.path.join(work, "lists", scenario.key)
    os.makedirs(directory, exist_ok=True)
    port = free_port()
    log(f"{scenario.key}: writing {scenario.files:,} URLs")

    def write(count, prefix):
        names = [list_name(i) for i in range(count)]
        urls, config = os.path.join(directory, prefix + ".txt"), os.path.join(directory, prefix + ".curl")
        with open(urls, "w") as f:
            f.write("".join(f"http://127.0.0.1:{port}/bytes/{name}?size={LIST_SIZE}\n" for name in names))
        with open(config, "w") as f:
            f.write("".join(f'url = "http://127.0.0.1:{port}/bytes/{name}?size={LIST_SIZE}"\noutput = "{name}"\n'
                            for name in names))
        return urls, config

    urls, config = write(scenario.files, "list")
    warm_urls, warm_config = write(min(LIST_WARMUP_FILES, scenario.files), "warm")
    scenario.inputs = UrlList(port, urls, config, warm_urls, warm_config)
    return scenario.inputs


def verify_list(dest, count):
    """"" when `dest` holds exactly f0000000 .. f{count - 1} of LIST_SIZE bytes each (and haul's .haul), the first,
    the last and LIST_SAMPLES others between byte for byte; else what is wrong (first few). Cheap for a million
    files: one directory scan with a stat each (seconds), and a sample rather than a million opens."""
    problems = []
    found = 0
    with os.scandir(dest) as entries:
        for entry in entries:
            if entry.name == ".haul":
                continue
            match = LIST_NAME.fullmatch(entry.name)
            if not match or int(match.group(1)) >= count:
                problems.append(f"unexpected {entry.name}")
            elif entry.stat(follow_symlinks=False).st_size != LIST_SIZE:
                problems.append(f"{entry.name} has {entry.stat().st_size} bytes")
            else:
                found += 1
            if len(problems) >= 3:
                return "; ".join(problems)
    if found < count:
        problems.append(f"{count - found} of {count} missing")
        return "; ".join(problems)
    sample = {0, count - 1, *random.Random(count).sample(range(count), min(LIST_SAMPLES, count))}
    for index in sorted(sample):
        name = list_name(index)
        with open(os.path.join(dest, name), "rb") as f:
            if f.read() != list_bytes(name):
                problems.append(f"{name} differs")
        if len(problems) >= 3:
            break
    return "; ".join(problems)


# --- the run -----------------------------------------------------------------------------------------------------

def make_content(work):
    """Generated files for nginx (random bytes) and the reference copies of `haul serve`'s generated ones."""
    www = os.path.join(work, "www")
    log("generating files...")
    os.makedirs(os.path.join(www, "mid"))
    os.makedirs(os.path.join(www, "small"))
    with open("/dev/urandom", "rb") as random, open(os.path.join(www, "big"), "wb") as f:
        for _ in range(1024):
            f.write(random.read(MIB))
    for i in range(200):
        with open(os.path.join(www, "mid", f"m{i:03d}"), "wb") as f:
            f.write(os.urandom(MIB))
    for i in range(10000):
        with open(os.path.join(www, "small", f"f{i:05d}"), "wb") as f:
            f.write(os.urandom(4096))
    # `haul serve`'s bytes depend only on name and size; fetch them once, without throttle or faults.
    reference = os.path.join(work, "reference")
    os.makedirs(reference)
    server = HaulServe()
    try:
        items = throttled_items(server.port, False, reference)
        urls = [item.url.split("?")[0] + f"?size={THROTTLED_SIZE}" for item in items]
        segmented = segmented_items([server.port], reference)[0]
        args = ["curl", "-s", "--fail", "--parallel",
                segmented.url.split("?")[0] + f"?size={SEGMENTED_SIZE}", "-o", segmented.reference]
        for url, item in zip(urls, items):
            args += [url, "-o", item.reference]
        subprocess.run(args, check=True)
    finally:
        server.stop()
    return www, reference


def scenarios(nginx, www, reference):
    def nginx_items(directory, names, https=False):
        base = f"https://127.0.0.1:{nginx.tls_port}" if https else f"http://127.0.0.1:{nginx.port}"
        return [Item(f"{base}/{directory}{name}", name, os.path.join(www, directory, name)) for name in names]

    mids = [f"m{i:03d}" for i in range(200)]
    smalls = [f"f{i:05d}" for i in range(10000)]
    result = [
        # What a start costs: one small file, as `haul get URL` in a script fetches it.
        Scenario("s0", "one 4 KiB file", 1, ALL_TOOLS, "files/s", "nginx", 60,
                 items=nginx_items("small/", smalls[:1])),
        Scenario("s1", "one 1 GiB file", 1, ALL_TOOLS, "MB/s", "nginx", 300,
                 items=nginx_items("", ["big"])),
        Scenario("s2w1", "200 x 1 MiB, width 1", 1, ALL_TOOLS, "MB/s", "nginx", 300,
                 items=nginx_items("mid/", mids)),
        Scenario("s2w8", "200 x 1 MiB, width 8", 8, PARALLEL_TOOLS, "MB/s", "nginx", 300,
                 items=nginx_items("mid/", mids)),
        Scenario("s3", "10,000 x 4 KiB, width 8", 8, PARALLEL_TOOLS, "files/s", "nginx", 900,
                 items=nginx_items("small/", smalls)),
        Scenario("s4", f"50 x 4 MiB throttled to {THROTTLED_RATE // MIB} MiB/s per response, width 8", 8,
                 PARALLEL_TOOLS, "MB/s", "haul-serve", 300),
        Scenario("s5", "as s4, 10% of files 503 once, 5% cut mid-body once", 8, PARALLEL_TOOLS, "MB/s",
                 "haul-serve", 300),
        Scenario("s1s", "one 1 GiB file over HTTPS", 1, ALL_TOOLS, "MB/s", "nginx", 300, ca=nginx.ca,
                 items=nginx_items("", ["big"], https=True)),
        Scenario("s2w1s", "200 x 1 MiB over HTTPS, width 1", 1, ALL_TOOLS, "MB/s", "nginx", 300, ca=nginx.ca,
                 items=nginx_items("mid/", mids, https=True)),
        Scenario("s2w8s", "200 x 1 MiB over HTTPS, width 8", 8, PARALLEL_TOOLS, "MB/s", "nginx", 300, ca=nginx.ca,
                 items=nginx_items("mid/", mids, https=True)),
        Scenario("s3s", "10,000 x 4 KiB over HTTPS, width 8", 8, PARALLEL_TOOLS, "files/s", "nginx", 900, ca=nginx.ca,
                 items=nginx_items("small/", smalls, https=True)),
        # Segmented: width is the split, as haul's extra connections count against -j.
        Scenario("seg8", f"one {SEGMENTED_SIZE // MIB} MiB file throttled to {SEGMENTED_RATE // MIB} MiB/s per "
                 "response, 8 connections", 8, [HAUL_DEFAULT, "aria2c", SINGLE_TOOL], "MB/s", "haul-serve", 300,
                 split=8, files=1, total_bytes=SEGMENTED_SIZE),
        Scenario("seg-nginx", "one 1 GiB file, 4 connections", 4, [HAUL_DEFAULT, SINGLE_TOOL], "MB/s", "nginx", 300,
                 split=4, items=nginx_items("", ["big"])),
        Scenario("seg-mirrors", "as seg8, from two mirrors", 8, [HAUL_DEFAULT, "aria2c"], "MB/s", "haul-serve", 300,
                 split=8, mirrors=2, files=1, total_bytes=SEGMENTED_SIZE),
    ]
    # The list rows: haul and curl come at thousands of files/s, aria2c at tens to hundreds where fsync is dear (it
    # calls it three times per file, on the new file, on its control file and at the end, one after another: from
    # ~60 to ~500 files/s from one run to the next on a virtual disk), so it may take half an hour on list100k and
    # stop at list1m's limit, a run stopped there reporting how far it got and its peak RSS (measured's `interrupt`).
    # HAUL_BENCH_LIST_LIMIT (seconds, default 3600) shortens every list run's limit, for a run that must fit a budget.
    # Not into the reused directory: they need a file system with inodes for a million files (mkfs.ext4 -N), and
    # emptying a million files between runs would take minutes a run.
    limit = int(os.environ.get("HAUL_BENCH_LIST_LIMIT", "3600"))
    for key, count, timeout in [("list100k", 100_000, limit), ("list1m", 1_000_000, limit)]:
        count = max(1, round(count * LIST_SCALE))
        result.append(Scenario(key, f"{count:,} x {LIST_SIZE} B from `haul serve`, width 8", 8, LIST_TOOLS,
                               "files/s", "haul-serve", timeout, files=count, total_bytes=count * LIST_SIZE,
                               listed=True, inodes=LIST_INODES, rerun=True, reused=False))
    for s in result:
        if s.items:
            s.files = len(s.items)
            s.total_bytes = sum(os.path.getsize(item.reference) for item in s.items)
        elif not s.total_bytes:
            s.files, s.total_bytes = THROTTLED_FILES, THROTTLED_FILES * THROTTLED_SIZE
    return result


class FreshDisk:
    """Where a real-disk run writes: a newly made ext4 (a loop file on the real disk) for every run.

    Why a new file system rather than one directory emptied between runs: ext4 does not reuse an inode for a minute
    or more after it was freed (fs/ext4/ialloc.c, recently_deleted()), and while the freed inodes' table blocks are
    cached it checks each one it passes over. Right after deleting the previous run's 10,000 files, creating 10,000
    more cost 5-20 times the system time (perf: recently_deleted and find_get_block_common), at random for whichever
    tool ran next: in one series curl took 1.1, 2.3 and 5.3 s for the same work. A fresh file system per run gives
    every tool the same start; ReusedDirectory measures the other case, the one a user's download directory is in.
    Without root, loop devices or mkfs.ext4 it falls back to a new directory per run, deleted at the end."""

    def __init__(self, root):
        self.root = root
        self.image = os.path.join(root, "ext4.img")
        self.mount = os.path.join(root, "ext4")
        self.count = 0
        self.fresh = False
        try:
            with open(self.image, "wb") as f:
                f.truncate(8 << 30)  # sparse: s1's 1 GiB file and Haul's journal fit many times over
            os.makedirs(self.mount)
            self.fresh = self._make() and self._mount()
        except OSError:
            self.fresh = False
        if not self.fresh:
            log("no loop ext4 here (needs root, loop devices and mkfs.ext4): runs go to new directories on /var/tmp")

    def _make(self, inodes=0):
        count = ["-N", str(inodes)] if inodes else []
        return subprocess.run(["mkfs.ext4", "-q", "-F", *count, self.image], capture_output=True).returncode == 0

    def _mount(self):
        return subprocess.run(["mount", "-o", "loop", self.image, self.mount], capture_output=True).returncode == 0

    def _unmount(self):
        subprocess.run(["umount", self.mount], capture_output=True)

    def next(self, inodes=0):
        """An empty directory for the next run; `inodes`: at least that many on the new ext4 (mkfs.ext4 -N)."""
        self.count += 1
        if self.fresh:
            self._unmount()
            if not (self._make(inodes) and self._mount()):
                raise RuntimeError(f"could not remake the ext4 in {self.image}")
            return os.path.join(self.mount, "out")
        return os.path.join(self.root, f"run-{self.count}")

    def close(self):
        if self.fresh:
            self._unmount()


class ReusedDirectory:
    """Where a reused-directory run writes: one directory on the real disk's own file system, kept from run to run
    and emptied before each (its contents deleted, .haul included; the directory itself kept), as a user's download
    directory is.

    Here ext4's delay in reusing freed inodes (see FreshDisk) falls on every run, as it falls on a user's: whoever
    creates files right after the last run's were deleted pays for passing over them. That makes these figures
    noisier than the fresh ext4's, and the medians of the rounds, every tool taking every place in a round, are what
    to compare."""

    def __init__(self, root):
        self.dest = os.path.join(root, "reused", "out")
        os.makedirs(self.dest)

    def next(self, inodes=0):
        with os.scandir(self.dest) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
        return self.dest


class Scratch:
    """Where a tmpfs run writes: the directory emptied before each run (tmpfs has no inode-reuse delay)."""

    def __init__(self, root):
        self.root = root

    def next(self, inodes=0):
        dest = os.path.join(self.root, "out")
        shutil.rmtree(dest, ignore_errors=True)
        return dest


def run_once(scenario, tool, place, work, reference, warmup=False):
    if scenario.listed:
        return run_list_once(scenario, tool, place, work, warmup)
    dest = place.next()
    os.makedirs(dest, exist_ok=True)  # the reused directory is there already
    os.sync()  # the previous run's dirty pages are written back before the clock starts, not during this run
    servers = []
    try:
        for _ in range(scenario.mirrors if scenario.server == "haul-serve" else 0):
            servers.append(HaulServe())
        ports = [server.port for server in servers]
        if scenario.items:
            items = scenario.items
        elif scenario.split:
            items = segmented_items(ports, reference)
        else:
            items = throttled_items(ports[0], scenario.key == "s5", reference)
        inputs = os.path.join(work, "inputs")
        os.makedirs(inputs, exist_ok=True)
        urls, config = write_inputs(items, inputs)
        stderr_path = os.path.join(work, "stderr.txt")
        argv = command(tool, scenario.width, dest, urls, config, scenario.ca, scenario.split)
        warm(argv[0], [] if servers else items)
        status, wall, cpu, rss = measured(argv, scenario.timeout, stderr_path)
    finally:
        served = tuple(server.stop() for server in servers)
    why = f"exit status {status}" if status != 0 else verify(items, dest)
    if why:
        with open(stderr_path, errors="replace") as f:
            tail = f.read()[-300:].strip().replace("\n", " | ")
        log(f"  {scenario.key} {tool}: FAILED ({why}) {tail}")
    extra = (sum(served) - scenario.total_bytes) if served else math.nan
    # The reused directory keeps its files until it is emptied before its next run, as a user's would.
    if isinstance(place, Scratch) or (scenario.files < 1000 and not isinstance(place, ReusedDirectory)):
        shutil.rmtree(dest, ignore_errors=True)  # a few inodes: no reuse delay worth the disk space
    return Run(wall, cpu, rss, not why, extra, why, served)


def run_list_once(scenario, tool, place, work, warmup):
    """One run of a list row (the warm-up: on the first LIST_WARMUP_FILES URLs only); for HAUL_DEFAULT, then the
    same command again, timed as its `rerun`.

    The rerun comes right after the run, after a `sync`, in the same destination, so haul's journal there
    (DEST/.haul/journal.sqlite) lists every file as done: it should make no request at all, and a fresh `haul serve`
    on the same port counts what it gets; a rerun that fetched anything or spoiled a file counts as failed."""
    inputs = url_list(scenario, work)
    count = min(LIST_WARMUP_FILES, scenario.files) if warmup else scenario.files
    urls, config = (inputs.warm_urls, inputs.warm_config) if warmup else (inputs.urls, inputs.config)
    dest = place.next(scenario.inodes)
    os.makedirs(dest)
    stderr_path = os.path.join(work, "stderr.txt")
    argv = command(tool, scenario.width, dest, urls, config, long_list=True)

    def timed_run():
        os.sync()
        server = HaulServe(inputs.port)
        try:
            warm(argv[0], [], [config if tool == "curl" else urls])
            status, wall, cpu, rss = measured(argv, scenario.timeout, stderr_path, interrupt=True)
        finally:
            served = server.stop()
        if status == -9:
            done = sum(1 for name in os.listdir(dest) if LIST_NAME.fullmatch(name))
            why = f"stopped at the {scenario.timeout:.0f} s limit with {done:,} of {count:,} files " \
                  f"({done / scenario.timeout:,.0f} files/s), peak RSS " + \
                  ("unknown" if math.isnan(rss) else f"{rss:.0f} MiB")
        else:
            why = f"exit status {status}" if status != 0 else verify_list(dest, count)
        if why:
            with open(stderr_path, errors="replace") as f:
                tail = f.read()[-300:].strip().replace("\n", " | ")
            log(f"  {scenario.key} {tool}: FAILED ({why}) {tail}")
        return Run(wall, cpu, rss, not why, served - count * LIST_SIZE, why, (served,), server.requests), server

    run, server = timed_run()
    log(f"  {scenario.key} {'warm-up ' if warmup else ''}{tool}: {run.wall:.2f} s, peak RSS {run.rss_mib:.0f} MiB; "
        f"haul serve: {server.requests:,} requests, peak RSS {server.peak_rss_mib:.0f} MiB")
    if tool == HAUL_DEFAULT and scenario.rerun and run.ok and not warmup:
        rerun, server = timed_run()
        if rerun.ok and server.requests:
            rerun.ok, rerun.why = False, f"{server.requests:,} requests to the server: not every file was skipped"
            log(f"  {scenario.key} {RERUN_TOOL}: FAILED ({rerun.why})")
        log(f"  {scenario.key} {RERUN_TOOL}: {rerun.wall:.2f} s ({rerun.wall / run.wall:.3f} of the first run), "
            f"peak RSS {rerun.rss_mib:.0f} MiB")
        run.rerun = rerun
    return run


def warm(program, items, inputs=()):
    """Reads what nginx will serve and starts the tool once (`--version`), before the clock starts.

    A machine may reclaim memory that has not been touched for a few seconds (a DAMON `pageout` scheme,
    /sys/kernel/mm/damon, does), and whether nginx's files and a tool's own code are still in memory would then
    depend on how long the tools before it ran. Every tool starts with both in memory; so do `inputs`, the list rows'
    URL list or curl config (tens of MB)."""
    subprocess.run([program, "--version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for path in inputs:
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass
    for item in items:
        with open(item.reference, "rb") as f:
            while f.read(1 << 20):
                pass


def median(values):
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def summarize(scenario, runs):
    good = [r for r in runs if r.ok]
    if not good:
        return None
    wall = median([r.wall for r in good])
    amount = scenario.files if scenario.unit == "files/s" else scenario.total_bytes / 1e6
    return {
        "wall": wall,
        "rate": amount / wall,
        "cpu": median([r.cpu for r in good]),
        "rss": max(r.rss_mib for r in good),
        "extra": median([r.extra_bytes for r in good]),
        "ok": len(good),
        "n": len(runs),
    }


def fmt_rate(value):
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def table(scenario, results, fs, runs_per_tool):
    """Markdown rows for one scenario on one file system; "vs haul" is Haul's speed over that tool's (>1: Haul
    faster). A list row's rerun shows its time as a share of the first run's instead (files/s there: files skipped
    per second)."""
    base = results.get((scenario.key, fs, HAUL_DEFAULT))
    base = summarize(scenario, base) if base else None
    throttled = scenario.server == "haul-serve" and not scenario.listed
    header = f"| tool | wall s | {scenario.unit} | Haul vs it | CPU s | peak RSS MiB |"
    rule = "|---|---|---|---|---|---|"
    # The rows of many small files: user + system CPU per file (GNU time counts in 10 ms, too coarse for s0).
    per_file = scenario.unit == "files/s" and scenario.files >= 1000
    if per_file:
        header += " CPU µs per file |"
        rule += "---|"
    if throttled:
        header += " over the throttle limit | extra bytes |"
        rule += "---|---|"
    lines = [header, rule]
    for tool in scenario.tools + ([RERUN_TOOL] if scenario.rerun and HAUL_DEFAULT in scenario.tools else []):
        runs = results.get((scenario.key, fs, tool), [])
        s = summarize(scenario, runs)
        if s is None:
            failure = next((r.why for r in runs if not r.ok), "not run")
            lines.append(f"| {label(tool, scenario)} | failed in {len(runs)} of {runs_per_tool}: {failure} |"
                         + " |" * ((6 if throttled else 4) + per_file))
            continue
        ratio = f"{s['wall'] / base['wall']:.2f}x" if base and tool != HAUL_DEFAULT else "—"
        if tool == RERUN_TOOL:
            ratio = f"{s['wall'] / base['wall']:.3f} of the first run's time" if base else "—"
        failed = f" ({s['n'] - s['ok']} of {s['n']} runs failed)" if s["ok"] < s["n"] else ""
        wall = f"{s['wall']:.2f}" if s["wall"] >= 1 else f"{s['wall']:.3f}"
        row = (f"| {label(tool, scenario)}{failed} | {wall} | {fmt_rate(s['rate'])} | {ratio} | "
               f"{s['cpu']:.2f} | {s['rss']:.0f} |")
        if per_file:
            row += f" {s['cpu'] / scenario.files * 1e6:.0f} |"
        if throttled:
            over = s["wall"] / ideal_seconds(scenario, tool) - 1
            row += f" {over * 100:+.1f}% | {s['extra'] / scenario.total_bytes * 100:.1f}% |"
        lines.append(row)
    return lines


def ideal_seconds(scenario, tool=HAUL_DEFAULT):
    """The throttle limit: s4/s5's rounds of files over the width; a segmented file's size over its connections'
    rate (the tool's: `haul get -s 1` has one)."""
    if scenario.split:
        return SEGMENTED_SIZE / (SEGMENTED_RATE * connections(tool, scenario))
    return math.ceil(scenario.files / scenario.width) * THROTTLED_SIZE / THROTTLED_RATE


def targets(by_key, results, fs="disk"):
    """(target, met, detail) for each of the issue's targets, on one of the real disk's places: "disk" (a fresh ext4
    per run) or "reused" (the reused directory, where the list rows do not run). `met` is None for a row reported
    without a target (s3s)."""
    def get(key, tool):
        runs = results.get((key, fs, tool))
        return summarize(by_key[key], runs) if runs and key in by_key else None

    verdicts = []
    for key, wget2_share in [("s1", 0.9), ("s1s", None)]:
        if key not in by_key:
            continue
        haul, curl, wget2 = get(key, HAUL_DEFAULT), get(key, "curl"), get(key, "wget2")
        met = bool(haul and curl and haul["rate"] >= curl["rate"])
        name = f"{by_key[key].title}: Haul >= 1.0x curl"
        if wget2_share:
            met = met and bool(wget2 and haul["rate"] >= wget2_share * wget2["rate"])
            name += f" and >= {wget2_share}x wget2"
        detail = f"Haul {haul['rate']:.0f} MB/s" if haul else "Haul failed"
        if curl:
            detail += f", curl {curl['rate']:.0f}" + (f" ({haul['rate'] / curl['rate']:.2f}x)" if haul else "")
        if wget2:
            detail += f", wget2 {wget2['rate']:.0f}" + (f" ({haul['rate'] / wget2['rate']:.2f}x)" if haul else "")
        verdicts.append((name, met, detail))
    # s0 and s3s have no target; s0's ratio is what a start costs, s3s's is reported beside s3's, the other row of
    # many small files.
    for key, judged in [("s0", False), ("s2w1", True), ("s2w8", True), ("s3", True), ("s2w1s", True),
                        ("s2w8s", True), ("s3s", False)]:
        if key not in by_key:
            continue
        haul = get(key, HAUL_DEFAULT)
        others = {t: get(key, t) for t in ["curl", "wget2", "aria2c"]}
        others = {t: s for t, s in others.items() if s}
        best_tool = max(others, key=lambda t: others[t]["rate"]) if others else None
        met = bool(haul and (best_tool is None or haul["rate"] >= others[best_tool]["rate"]))
        unit = by_key[key].unit
        detail = f"Haul {fmt_rate(haul['rate'])} {unit}" if haul else "Haul failed"
        if best_tool:
            detail += f", best other {best_tool} {fmt_rate(others[best_tool]['rate'])} ({haul['rate'] / others[best_tool]['rate']:.2f}x)" if haul else ""
        name = f"{by_key[key].title}: Haul " + (">=" if judged else "against") + " the best of curl, wget2, aria2c"
        verdicts.append((name, met if judged else None, detail))
    if "s4" in by_key:
        haul = get("s4", HAUL_DEFAULT)
        ideal = ideal_seconds(by_key["s4"])
        met = bool(haul and haul["wall"] <= ideal * 1.05)
        detail = f"Haul {haul['wall']:.2f} s, limit {ideal:.2f} s ({(haul['wall'] / ideal - 1) * 100:+.1f}%)" \
            if haul else "Haul failed"
        verdicts.append(("throttled: within 5% of the throttle limit", met, detail))
    if "s5" in by_key:
        runs = results.get(("s5", fs, HAUL_DEFAULT), [])
        haul = get("s5", HAUL_DEFAULT)
        all_ok = bool(runs) and all(r.ok for r in runs)
        extra = max((r.extra_bytes for r in runs if r.ok), default=math.nan)
        met = all_ok and extra <= 0.10 * by_key["s5"].total_bytes
        detail = f"{sum(r.ok for r in runs)} of {len(runs)} runs correct, at most {extra / MIB:.1f} MiB " \
                 f"({extra / by_key['s5'].total_bytes * 100:.1f}%) sent again"
        verdicts.append(("faults: every file correct, <= 10% extra bytes", met, detail))
    for key, at_least in [("seg8", 6.0), ("seg-mirrors", None)]:
        if key not in by_key:
            continue
        split = by_key[key].split
        haul, aria2c, single = get(key, HAUL_DEFAULT), get(key, "aria2c"), get(key, SINGLE_TOOL)
        met = bool(haul and aria2c and haul["wall"] <= aria2c["wall"])
        name = f"{key}: Haul -s {split} >= 1.0x aria2c -x {split} -s {split}"
        detail = f"Haul {haul['wall']:.2f} s (limit {ideal_seconds(by_key[key]):.2f} s)" if haul else "Haul failed"
        if aria2c:
            detail += f", aria2c {aria2c['wall']:.2f} s" + (f" ({aria2c['wall'] / haul['wall']:.2f}x)" if haul else "")
        if at_least:
            met = met and bool(single and single["wall"] >= at_least * haul["wall"])
            name += f" and >= {at_least:.0f}x Haul -s 1"
            if single:
                detail += f", Haul -s 1 {single['wall']:.2f} s" + (
                    f" ({single['wall'] / haul['wall']:.2f}x)" if haul else "")
        verdicts.append((name, met, detail))
    if "seg-nginx" in by_key:
        split = by_key["seg-nginx"].split
        haul, single = get("seg-nginx", HAUL_DEFAULT), get("seg-nginx", SINGLE_TOOL)
        met = bool(haul and single and haul["wall"] <= 1.05 * single["wall"])
        detail = f"Haul -s {split} {haul['rate']:.0f} MB/s" if haul else f"Haul -s {split} failed"
        if single:
            detail += f", -s 1 {single['rate']:.0f}" + (f" ({haul['rate'] / single['rate']:.2f}x)" if haul else "")
        verdicts.append((f"seg-nginx: Haul -s {split} no more than 5% slower than -s 1", met, detail))
    if fs == "disk":
        verdicts += list_targets(by_key, results, get)
    # The list rows have their own memory target (128 MiB for a million URLs, issue 30).
    peaks = {key: get(key, HAUL_DEFAULT)["rss"] for key in by_key
             if get(key, HAUL_DEFAULT) and not by_key[key].listed}
    if peaks:
        worst = max(peaks, key=peaks.get)
        verdicts.append(("peak RSS of `haul get` < 64 MiB in every scenario", peaks[worst] < 64,
                         f"largest {peaks[worst]:.0f} MiB ({worst})"))
    return verdicts


def list_targets(by_key, results, get):
    """Issue 30's targets, judged on list1m against list100k: haul's peak RSS under 128 MiB and flat (at most 1.5x
    list100k's), its files/s at least list100k's (no tolerance: a longer list must not cost more per file), and its
    rerun under a quarter of its first run's time. curl's and aria2c's figures are given alongside."""
    verdicts = []
    small, large = ("list100k", "list1m")
    haul = get(large, HAUL_DEFAULT) if large in by_key else None
    base = get(small, HAUL_DEFAULT) if small in by_key else None

    def on_tmpfs(key, tool):
        runs = results.get((key, "tmpfs", tool))
        return summarize(by_key[key], runs) if runs else None

    def others(key):
        parts = []
        for tool in ["curl", "aria2c"]:
            if s := get(key, tool):
                parts.append(f"{tool} {s['rss']:.0f} MiB, {s['wall']:.1f} s")
            elif runs := results.get((key, "disk", tool)):
                parts.append(f"{tool} failed: {next(r.why for r in runs if not r.ok)}")
        return f" ({'; '.join(parts)})" if parts else ""

    if large in by_key:
        met = bool(haul and haul["rss"] < 128)
        detail = f"Haul {haul['rss']:.0f} MiB" if haul else "Haul failed"
        verdicts.append((f"{by_key[large].title}: peak RSS of `haul get` < 128 MiB", met, detail + others(large)))
    if large in by_key and small in by_key:
        met = bool(haul and base and haul["rss"] <= 1.5 * base["rss"])
        detail = f"{haul['rss']:.0f} MiB against {base['rss']:.0f} MiB ({haul['rss'] / base['rss']:.2f}x)" \
            if haul and base else "Haul failed"
        verdicts.append((f"peak RSS of `haul get` flat: {large} <= 1.5x {small}", met, detail))
        # Judged on tmpfs where there is a tmpfs pass: on ext4 the file system's own cost per file grows with a
        # directory of a million entries (system time; every tool's files/s drops, curl's more than haul's), and
        # this target is about haul's cost per URL. The real disk's ratios are given beside it.
        def ratio(large_run, small_run):
            return f"{fmt_rate(large_run['rate'])} files/s against {fmt_rate(small_run['rate'])} " \
                   f"({large_run['rate'] / small_run['rate']:.3f}x)"
        tmpfs_haul, tmpfs_base = on_tmpfs(large, HAUL_DEFAULT), on_tmpfs(small, HAUL_DEFAULT)
        judged = (tmpfs_haul, tmpfs_base) if tmpfs_haul and tmpfs_base else (haul, base)
        met = bool(judged[0] and judged[1] and judged[0]["rate"] >= judged[1]["rate"])
        parts = []
        if tmpfs_haul and tmpfs_base:
            parts.append("tmpfs: " + ratio(tmpfs_haul, tmpfs_base))
        if haul and base:
            disk = "real disk: " + ratio(haul, base)
            curl, curl_base = get(large, "curl"), get(small, "curl")
            if curl and curl_base:
                disk += f", curl {curl['rate'] / curl_base['rate']:.3f}x"
            parts.append(disk)
        where = "tmpfs" if judged[0] is tmpfs_haul and tmpfs_haul else "real disk"
        verdicts.append((f"files/s of `haul get`: {large} >= {small} (judged on {where})", met,
                         "; ".join(parts) or "Haul failed"))
    if large in by_key:
        rerun = get(large, RERUN_TOOL)
        met = bool(haul and rerun and rerun["wall"] < 0.25 * haul["wall"])
        detail = f"rerun {rerun['wall']:.2f} s, first run {haul['wall']:.2f} s " \
                 f"({rerun['wall'] / haul['wall']:.3f})" if haul and rerun else "Haul or its rerun failed"
        small_rerun = get(small, RERUN_TOOL) if small in by_key else None
        if base and small_rerun:
            detail += f"; {small}: {small_rerun['wall']:.2f} s of {base['wall']:.2f} s " \
                      f"({small_rerun['wall'] / base['wall']:.3f})"
        verdicts.append((f"{large}: a rerun of `haul get` skips every file in < 0.25x the first run's time", met,
                         detail))
    return verdicts


def mirror_share(runs):
    """The first mirror's median share of the body bytes sent in the correct runs, as "NN%"; "" if none."""
    shares = [r.served[0] / sum(r.served) for r in runs if r.ok and len(r.served) > 1 and sum(r.served)]
    return f"{median(shares) * 100:.0f}%" if shares else ""


def tool_version(argv):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "?"


def machine_line(disk):
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    fs = subprocess.run(["df", "-T", disk], capture_output=True, text=True).stdout.splitlines()[-1].split()[1]
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, {platform.system()} {platform.release()}; " \
           f"real disk {fs} (the reused directory, and the fresh ext4s' loop files), tmpfs pass in /dev/shm"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="?", type=int, default=3,
                        help="repetitions per tool in each place on the real disk (3)")
    parser.add_argument("--only", help="comma-separated scenario keys: s1,s2w1,s2w8,s3,s4,s5, the HTTPS rows "
                        "s1s,s2w1s,s2w8s,s3s, the segmented rows seg8,seg-nginx,seg-mirrors and the list rows "
                        "list100k,list1m (real disk only; HAUL_BENCH_LIST_SCALE=0.02 makes them 2,000 and 20,000 "
                        "URLs)")
    parser.add_argument("--no-tmpfs", action="store_true", help="skip the tmpfs pass")
    parser.add_argument("--tmpfs-only", action="store_true",
                        help="only the tmpfs pass (after the warm-up), e.g. to add it to an earlier real-disk run")
    parser.add_argument("--no-reused", action="store_true",
                        help="skip the reused directory: real-disk runs into a fresh ext4 only")
    parser.add_argument("--reused-only", action="store_true",
                        help="only the reused directory (one directory on the real disk, emptied before each run): "
                        "no fresh ext4, no tmpfs pass, no list rows")
    parser.add_argument("--haul", help="the haul binary to measure (default: .build-static/release/haul)")
    parser.add_argument("--baseline", help="a second haul binary (e.g. the previous commit's), measured in the same "
                        "runs as 'haul baseline (NIO)', next to 'haul (NIO)'")
    parser.add_argument("--tools", help="comma-separated tools to run (default: all), e.g. 'haul (NIO),curl'")
    parser.add_argument("--output", default=os.path.join(ROOT, "bench", "RESULTS.md"),
                        help="where the Markdown goes (bench/RESULTS.md)")
    args = parser.parse_args()
    if args.reused_only and (args.no_reused or args.tmpfs_only):
        sys.exit("error: --reused-only goes with neither --no-reused nor --tmpfs-only")
    global HAUL
    if args.haul:
        HAUL = os.path.abspath(args.haul)
    if not os.access(HAUL, os.X_OK):
        sys.exit(f"error: {HAUL} is missing; run bench/compare, which builds it")
    global BASELINE
    if args.baseline:
        BASELINE = os.path.abspath(args.baseline)
        if not os.access(BASELINE, os.X_OK):
            sys.exit(f"error: --baseline {BASELINE} is not an executable")
    wanted = [t.strip() for t in args.tools.split(",")] if args.tools else None
    if wanted and set(wanted) - set(TOOLS) - {BASELINE_TOOL}:
        sys.exit(f"error: unknown tool in --tools; known: {', '.join(TOOLS)}")

    disk_root = tempfile.mkdtemp(prefix="haul-compare.", dir="/var/tmp")  # /var/tmp: the real disk, not tmpfs
    shm_root = tempfile.mkdtemp(prefix="haul-compare.", dir="/dev/shm")
    os.chmod(disk_root, 0o755)
    nginx = None
    disk = None
    started = time.time()
    if BASELINE:
        # Both binaries put in place the same way: how an executable's pages got into the page cache (read from disk,
        # or written by a copy just now) moves a run of small files by up to 10% and peak RSS by 1-3 MiB, more than
        # most changes being compared.
        for name in ("haul", "haul-baseline"):
            source = HAUL if name == "haul" else BASELINE
            shutil.copy2(source, os.path.join(disk_root, name))
        HAUL, BASELINE = os.path.join(disk_root, "haul"), os.path.join(disk_root, "haul-baseline")
    try:
        www, reference = make_content(disk_root)
        nginx = Nginx(disk_root, www)
        all_scenarios = scenarios(nginx, www, reference)
        keys = args.only.split(",") if args.only else [s.key for s in all_scenarios]
        unknown = set(keys) - {s.key for s in all_scenarios}
        if unknown:
            sys.exit(f"error: unknown scenario in --only: {', '.join(sorted(unknown))}")
        chosen = [s for s in all_scenarios if s.key in keys]
        if args.reused_only:
            if args.only and any(not s.reused for s in chosen):
                sys.exit("error: --reused-only: the list rows run on a fresh ext4 only")
            chosen = [s for s in chosen if s.reused]
        for scenario in chosen:
            tools = [t for t in scenario.tools if t != BASELINE_TOOL]
            if BASELINE:
                tools.insert(tools.index(HAUL_DEFAULT) + 1, BASELINE_TOOL)
            scenario.tools = [t for t in tools if wanted is None or t in wanted or t == BASELINE_TOOL]
            if HAUL_DEFAULT not in scenario.tools:
                sys.exit(f"error: --tools must include '{HAUL_DEFAULT}' (the ratios are to it)")
        shm = Scratch(shm_root)
        places = []  # the real disk's: (name in the results, place)
        if not args.reused_only:
            disk = FreshDisk(disk_root)
            places.append(("disk", disk))
        if not (args.no_reused or args.tmpfs_only):
            places.append(("reused", ReusedDirectory(disk_root)))
        results = {}
        for scenario in chosen:
            here = [(fs, place) for fs, place in places if fs != "reused" or scenario.reused]
            log(f"{scenario.key}: {scenario.title} — warm-up, then {args.runs} runs per tool into "
                f"{' and '.join(PLACE_NAMES[fs] for fs, _ in here)}, alternating")
            for tool in scenario.tools:
                run_once(scenario, tool, here[0][1], disk_root, reference, warmup=True)
            for round_number in range(0 if args.tmpfs_only else args.runs):
                # Each round starts with the next tool: a tool's place in the round shows in its time on the real
                # disk (the first of a round ran up to twice as long in s2w8), so every tool takes every place.
                # A tool's runs into the two places come one after the other, so a slow stretch of the machine
                # falls on both.
                shift = round_number % len(scenario.tools)
                for tool in scenario.tools[shift:] + scenario.tools[:shift]:
                    for fs, place in here:
                        record(results, scenario.key, fs, tool, run_once(scenario, tool, place, disk_root, reference))
            if not (args.no_tmpfs or args.reused_only) and scenario.tmpfs:
                log(f"{scenario.key}: once more on tmpfs")
                for tool in scenario.tools:
                    record(results, scenario.key, "tmpfs", tool, run_once(scenario, tool, shm, disk_root, reference))
        elapsed = time.time() - started
        by_key = {s.key: s for s in chosen}
        verdicts = [(fs, *verdict) for fs, _ in places for verdict in targets(by_key, results, fs)]
        report = render(chosen, results, verdicts, args, disk_root, elapsed, not disk or disk.fresh)
    finally:
        if nginx:
            nginx.stop()
        if disk:
            disk.close()
        shutil.rmtree(disk_root, ignore_errors=True)
        shutil.rmtree(shm_root, ignore_errors=True)
    print(report)
    with open(args.output, "w") as f:
        f.write(report)
    log(f"written to {os.path.relpath(args.output, ROOT)}")
    sys.exit(0 if all(met is not False for _, _, met, _ in verdicts) else 1)


def record(results, key, fs, tool, run):
    """Keeps a run under its tool, and a list row's rerun under RERUN_TOOL."""
    results.setdefault((key, fs, tool), []).append(run)
    if run.rerun:
        results.setdefault((key, fs, RERUN_TOOL), []).append(run.rerun)


def ran(results, key, fs):
    """Whether the scenario ran in that place (a failed run is recorded too)."""
    return any(k[0] == key and k[1] == fs for k in results)


def render(chosen, results, verdicts, args, disk_root, elapsed, fresh):
    haul_version = tool_version([HAUL, "--version"])
    places = {"disk": "a fresh ext4 per run" if fresh else "a new directory per run (no ext4 loop here)",
              "reused": "the reused directory (one directory kept from run to run, emptied before each)"}
    lines = [
        "# bench/compare: Haul against curl, wget2, aria2c and wget",
        "",
        f"Run with `bench/compare {args.runs}` "
        f"({elapsed / 60:.0f} min). Machine: {machine_line(disk_root)}.",
        "",
        f"Tools: haul {haul_version} (release, `--static-swift-stdlib`); {tool_version(['curl', '--version'])}; "
        f"{tool_version(['wget2', '--version'])}; {tool_version(['aria2c', '--version'])}; "
        f"{tool_version(['wget', '--version'])}.",
        "",
        f"Method: each scenario after a warm-up run of every tool, {args.runs} runs per tool with the tools "
        "alternating, each round starting with the next tool (a tool's place in a round shows in its time), "
        "medians; on the real disk each tool runs into a newly made ext4 (a loop file on the real disk: ext4 "
        "delays reusing freed inodes, which made creating files right after deleting the previous run's up to 20 "
        "times dearer, at random; there every tool starts alike) and, right after, into the reused directory, one "
        "directory on the real disk's own file system kept from run to run and emptied before each, as a user's "
        "download directory is (there that delay falls on every run, as it does for a user); every tmpfs run into "
        "an empty directory, `sync` before the clock starts, files checked "
        "byte for byte afterwards (a failed or wrong run is never a time). Before the clock starts, nginx's files for "
        "the scenario are read and the tool is started once (`--version`): memory left untouched for a few seconds "
        "may be reclaimed, and otherwise a run could begin with both on disk, depending on how long the tools before "
        "it took. Wall time from a blocking wait. CPU s is user + system time of the "
        "tool's process, peak RSS its maximum resident set from GNU time (largest of the runs). \"Haul vs it\" is Haul's speed "
        "(`haul get` as it runs by default: its own HTTP/1.1 client on NIO, journal on) over that tool's: above 1.00x Haul is faster. "
        "nginx serves s1-s3 and seg-nginx from files; `haul serve` (a fresh process per run, so every fault fires "
        "again; two of them for seg-mirrors) serves s4-s5, seg8 and seg-mirrors as generated bytes, and its count "
        "of body bytes sent gives \"extra bytes\".",
        "",
        "Flags, the same in every scenario: `haul get -q -j W -i LIST --transport T`; "
        "`curl -s --fail --retry 5 --retry-all-errors [--parallel --parallel-max W] -K CONFIG`; "
        "`wget2 -q --no-robots --tries 5 --max-threads W -nd -i LIST`; "
        "`aria2c -q -j W --max-tries=5 --retry-wait=1 -i LIST`; "
        "`wget -q --tries=5 --retry-on-http-error=503 -nd -i LIST` (sequential, so only at width 1). "
        "The segmented rows (seg8, seg-nginx, seg-mirrors) add connections per file: `haul get -j N -s N` "
        "(its extra connections count against -j) or `-s 1`, and `aria2c -x N -s N`; mirrors are URLs of one "
        "file on one input line, separated by tabs. The list rows (list100k, list1m) add `--deferred-input=true` to "
        "aria2c, which makes it read the list as it goes rather than all of it at the start, as its manual advises "
        "for a file with a lot of URIs.",
        "",
        "## Targets (real disk)",
        "",
        "Judged in each place on the real disk that ran: "
        + " and ".join(places[fs] for fs in dict.fromkeys(v[0] for v in verdicts)) + ". \"—\": reported, no target.",
        "",
        "| where | target | verdict | figures |",
        "|---|---|---|---|",
    ]
    where = {"disk": "fresh ext4" if fresh else "new directory", "reused": "reused directory"}
    for fs, name, met, detail in verdicts:
        verdict = "—" if met is None else "met" if met else "**MISSED**"
        lines.append(f"| {where[fs]} | {name} | {verdict} | {detail} |")
    for scenario in chosen:
        lines += ["", f"## {scenario.key}: {scenario.title}"]
        for fs in ("disk", "reused"):
            if not ran(results, scenario.key, fs):
                continue
            lines += ["", f"Real disk, {places[fs]}, medians of {args.runs}:", ""]
            lines += table(scenario, results, fs, args.runs)
            if scenario.mirrors > 1:
                lines += ["", "First mirror's share of the body bytes sent (median): " + ", ".join(
                    f"{label(tool, scenario)} {share}" for tool in scenario.tools
                    if (share := mirror_share(results.get((scenario.key, fs, tool), [])))) + "."]
        if scenario.server == "haul-serve" and scenario.split:
            lines += ["", f"Throttle limit: {ideal_seconds(scenario):.2f} s ({SEGMENTED_SIZE // MIB} MiB over "
                      f"{scenario.split} connections at {SEGMENTED_RATE // MIB} MiB/s each), "
                      f"{ideal_seconds(scenario, SINGLE_TOOL):.2f} s on one."]
        elif scenario.listed:
            scale = f" (HAUL_BENCH_LIST_SCALE={LIST_SCALE:g})" if LIST_SCALE != 1 else ""
            lines += ["", f"`/bytes/f0000000?size={LIST_SIZE}` and on{scale}, one fresh `haul serve` per run, on an "
                      f"ext4 with {LIST_INODES:,} inodes (not the reused directory, where emptying a million "
                      "files would take minutes a run); haul and aria2c read the same list and name each file "
                      "after the URL path's last component, curl's config names every output. Checked after each "
                      f"run: every file's name and size, and the bytes of {LIST_SAMPLES:,} of them. "
                      f"`{RERUN_TOOL}`: the same `haul get` again into the destination it just filled, after "
                      "`sync`; its journal there should make it skip every file, and it counts as failed if "
                      "`haul serve` gets a request. The warm-up runs on the first "
                      f"{min(LIST_WARMUP_FILES, scenario.files):,} URLs. On ext4 the file system's cost per file grows with a "
                      "directory of a million entries, for every tool; the tmpfs pass (a page of memory per file) "
                      "shows each tool's own cost per URL."]
        elif scenario.server == "haul-serve":
            lines += ["", f"Throttle limit: {ideal_seconds(scenario):.2f} s (ceil({scenario.files} / "
                      f"{scenario.width}) rounds of {THROTTLED_SIZE // MIB} MiB at {THROTTLED_RATE // MIB} MiB/s)."]
        if ran(results, scenario.key, "tmpfs"):
            lines += ["", "tmpfs, one run:", ""]
            lines += table(scenario, results, "tmpfs", 1)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
