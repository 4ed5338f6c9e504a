#!/usr/bin/env bash
# DownloadQueue benchmark (issue "DownloadQueue"), same nginx on loopback, destination on the real disk:
#   1. 10,000 x 4 KiB files at width 8: Haul (DownloadQueue on AsyncHTTPClient) vs curl --parallel, wget2 and
#      aria2c, warm-up then medians of RUNS runs; then syscalls per file of each tool (strace -c, one run).
#      target: files/s >= the fastest of the three
#   2. admission cost as the waiting list grows (bench-queue): 100,000 queued admit at the cost of 1,000.
# Usage: bash bench/queue/run.sh [RUNS]   (default 3). Needs root for apt-get.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
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
trap 'stop_nginx; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/www/small" "$WORK/out"
head -c $((FILES * 4096)) /dev/urandom > "$WORK/blob"
split -b 4096 -a 5 -d "$WORK/blob" "$WORK/www/small/f"
rm "$WORK/blob"
start_nginx "$WORK/www"
PORT=$NGINX_PORT
BASE="http://127.0.0.1:$PORT/small"
ls "$WORK/www/small" | sed "s|^|$BASE/|" > "$WORK/list.txt"
sed 's|.*/\(f[0-9]*\)$|url = "&"\noutput = "'"$WORK"'/out/\1"|' "$WORK/list.txt" > "$WORK/list.curl"

FAILURES=/tmp/haul-bench-queue-failures.log
: > "$FAILURES"
# The shared timing, plus a check that every file arrived (a run that lost files never counts).
timed_all() {
    local seconds count
    seconds=$(timed "$@")
    count=$(find "$WORK/out" -type f -name 'f*' ! -name '*.aria2' | wc -l)
    if [ "$count" -ne "$FILES" ]; then echo "== $*: $count of $FILES files" >> "$FAILURES"; echo nan; return; fi
    echo "$seconds"
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
for tool in "${TOOLS[@]}"; do timed_all $(command_for "$tool") >/dev/null; done
declare -A TIMES
for _ in $(seq 1 "$RUNS"); do
    for tool in "${TOOLS[@]}"; do TIMES[$tool]="${TIMES[$tool]:-} $(timed_all $(command_for "$tool"))"; done
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
