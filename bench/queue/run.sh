#!/usr/bin/env bash
# DownloadQueue benchmark (issue "DownloadQueue"), same nginx on loopback, destination on the real disk:
#   1. 10,000 x 4 KiB files at width 8: Haul (DownloadQueue on AsyncHTTPClient) vs curl --parallel, wget2 and
#      aria2c, warm-up then medians of RUNS runs; then syscalls per file of each tool (strace -c, one run).
#      target: files/s >= the fastest of the three
#   2. admission cost as the waiting list grows (bench-queue): 100,000 queued admit at the cost of 1,000.
# Usage: bash bench/queue/run.sh [RUNS]   (default 3). Needs root for apt-get.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-3}
FILES=${FILES:-10000}

need() { command -v "$1" >/dev/null 2>&1; }
if ! need nginx || ! need curl || ! need wget2 || ! need aria2c || ! need strace; then
    apt-get update -qq && apt-get install -y -qq nginx curl wget2 aria2 strace >/dev/null
fi
swift build -c release --product bench-download >/dev/null
swift build -c release --product bench-queue >/dev/null
BIN=.build/release/bench-download

WORK=$(mktemp -d /var/tmp/haul-bench-queue.XXXXXX)   # /var/tmp: the real disk, not tmpfs
chmod 755 "$WORK"
trap 'nginx -c "$WORK/nginx.conf" -s stop 2>/dev/null || true; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/www/small" "$WORK/out"
head -c $((FILES * 4096)) /dev/urandom > "$WORK/blob"
split -b 4096 -a 5 -d "$WORK/blob" "$WORK/www/small/f"
rm "$WORK/blob"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$WORK/nginx.conf" <<CONF
worker_processes 2;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 1024; }
http {
    access_log off;
    sendfile on;
    keepalive_requests 1000000;
    server { listen 127.0.0.1:$PORT; root $WORK/www; }
}
CONF
nginx -c "$WORK/nginx.conf"
BASE="http://127.0.0.1:$PORT/small"
ls "$WORK/www/small" | sed "s|^|$BASE/|" > "$WORK/list.txt"
sed 's|.*/\(f[0-9]*\)$|url = "&"\noutput = "'"$WORK"'/out/\1"|' "$WORK/list.txt" > "$WORK/list.curl"

FAILURES=/tmp/haul-bench-queue-failures.log
: > "$FAILURES"
# Wall seconds of one run into a clean output directory; checks the file count; a failed run prints nan.
timed() {
    rm -rf "$WORK/out"; mkdir -p "$WORK/out"; sync
    local start end
    start=$(date +%s.%N)
    if ! "$@" >/dev/null 2>"$WORK/stderr"; then
        { echo "== FAILED: $*"; tail -20 "$WORK/stderr"; } >> "$FAILURES"; echo nan; return
    fi
    end=$(date +%s.%N)
    local count
    count=$(find "$WORK/out" -type f -name 'f*' ! -name '*.aria2' | wc -l)
    if [ "$count" -ne "$FILES" ]; then echo "== $*: $count of $FILES files" >> "$FAILURES"; echo nan; return; fi
    python3 -c "print(f'{$end - $start:.4f}')"
}
median() {
    python3 -c "import sys,statistics; v=[float(x) for x in sys.argv[1:] if x!='nan']; print(f'{statistics.median(v):.4f}' if v else 'nan')" "$@"
}
TOOLS=(haul curl wget2 aria2c)
command_for() {
    case $1 in
        haul) echo "$BIN --transport async-http-client --width 8 --dir $WORK/out --list $WORK/list.txt" ;;
        curl) echo "curl -s --parallel --parallel-max 8 -K $WORK/list.curl" ;;
        wget2) echo "wget2 -q --no-robots --max-threads 8 -nd -P $WORK/out -i $WORK/list.txt" ;;
        aria2c) echo "aria2c -q -j 8 -d $WORK/out -i $WORK/list.txt" ;;
    esac
}

echo "warm-up..."
for tool in "${TOOLS[@]}"; do timed $(command_for "$tool") >/dev/null; done
declare -A TIMES
for _ in $(seq 1 "$RUNS"); do
    for tool in "${TOOLS[@]}"; do TIMES[$tool]="${TIMES[$tool]:-} $(timed $(command_for "$tool"))"; done
done
declare -A SYSCALLS
for tool in "${TOOLS[@]}"; do
    rm -rf "$WORK/out"; mkdir -p "$WORK/out"
    strace -f -c -o "$WORK/strace.$tool" $(command_for "$tool") >/dev/null 2>&1 || true
    SYSCALLS[$tool]=$(awk '/^100.00/ { print $4 }' "$WORK/strace.$tool")
done

echo
echo "Machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr), destination $(df -T /var/tmp | awk 'NR==2{print $2}')."
echo "$FILES x 4 KiB at width 8, medians of $RUNS runs; syscalls per file from one run under strace -f -c."
echo
printf '| tool | s | files/s | vs haul | syscalls/file |\n|---|---|---|---|---|\n'
HAUL=$(median ${TIMES[haul]})
for tool in "${TOOLS[@]}"; do
    T=$(median ${TIMES[$tool]})
    python3 -c "
t,h,n,c=$T,$HAUL,$FILES,float('${SYSCALLS[$tool]:-nan}')
print(f'| $tool | {t:.2f} | {n/t:.0f} | {h/t:.2f}x | {c/n:.1f} |')"
done
python3 - "$HAUL" "$(median ${TIMES[curl]})" "$(median ${TIMES[wget2]})" "$(median ${TIMES[aria2c]})" <<'PY'
import sys, math
haul, *others = map(float, sys.argv[1:])
best = min(x for x in others if not math.isnan(x))
print()
verdict = "met" if haul <= best else "MISSED"
print(f"target files/s >= the fastest of curl, wget2, aria2c: {verdict} (haul {haul:.2f} s, fastest other {best:.2f} s)")
PY
if [ -s "$FAILURES" ]; then echo "Some runs FAILED (not counted); see $FAILURES"; fi

echo
echo "Admission cost as the waiting list grows:"
.build/release/bench-queue
