#!/usr/bin/env bash
# DownloadQueue benchmark, same nginx on loopback, destination on the real disk:
#   1. 10,000 x 4 KiB files at width 8: Haul (DownloadQueue on NIOTransport) vs curl --parallel, wget2 and
#      aria2c, warm-up then medians of RUNS runs; then syscalls per file of each tool (strace -c, one run).
#      target: files/s >= the fastest of the three
#   2. admission cost as the waiting list grows (bench-queue): 100,000 queued admit at the cost of 1,000.
# Usage: bash bench/queue/run.sh [RUNS]   (default 3). Needs root for apt-get.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
RUNS=${1:-3}
FILES=${FILES:-10000}

install_missing nginx curl wget2 aria2c:aria2 strace
swift build -c release --product bench-download >/dev/null
swift build -c release --product bench-queue >/dev/null
BIN=.build/release/bench-download

WORK=$(mktemp -d /var/tmp/haul-bench-queue.XXXXXX)   # /var/tmp: the real disk, not tmpfs
chmod 755 "$WORK"
trap 'stop_nginx; rm -rf "$WORK" "${SHM:-/nonexistent}"' EXIT
mkdir -p "$WORK/out"
small_files "$WORK/www/small" "$FILES"
start_nginx "$WORK/www"
PORT=$NGINX_PORT
BASE="http://127.0.0.1:$PORT/small"
ls "$WORK/www/small" | sed "s|^|$BASE/|" > "$WORK/list.txt"
SHM=$(mktemp -d /dev/shm/haul-bench-queue.XXXXXX)   # the tmpfs pass writes here
# curl takes its output paths from its config file: one file per output directory.
curl_config() { sed 's|.*/\(f[0-9]*\)$|url = "&"\noutput = "'"$1"'/\1"|' "$WORK/list.txt" > "$2"; }
curl_config "$WORK/out" "$WORK/list.curl"
curl_config "$SHM" "$WORK/list-shm.curl"

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
# command_for TOOL [tmpfs]: the command line writing into $WORK/out, or into $SHM with "tmpfs".
command_for() {
    local out="$WORK/out" config="$WORK/list.curl"
    if [ "${2:-}" = tmpfs ]; then out="$SHM"; config="$WORK/list-shm.curl"; fi
    case $1 in
        haul) echo "$BIN --transport nio --width 8 --dir $out --list $WORK/list.txt" ;;
        curl) echo "curl -s --parallel --parallel-max 8 -K $config" ;;
        wget2) echo "wget2 -q --no-robots --max-threads 8 -nd -P $out -i $WORK/list.txt" ;;
        aria2c) echo "aria2c -q -j 8 -d $out -i $WORK/list.txt" ;;
    esac
}

echo "warm-up..."
for tool in "${TOOLS[@]}"; do timed_all $(command_for "$tool") >/dev/null; done
declare -A TIMES
for _ in $(seq 1 "$RUNS"); do
    for tool in "${TOOLS[@]}"; do TIMES[$tool]="${TIMES[$tool]:-} $(timed_all $(command_for "$tool"))"; done
done
# The same on tmpfs: no disk, so what is left is each tool's own cost per file (the disk here is noisy: the same
# command swings between about 2 and 7 s on ext4).
declare -A TMPFS
tmpfs_seconds() {
    rm -rf "${SHM:?}"/*
    local start end count
    start=$(date +%s.%N)
    "$@" >/dev/null 2>&1 || { echo nan; return; }
    end=$(date +%s.%N)
    count=$(find "$SHM" -type f -name 'f*' ! -name '*.aria2' | wc -l)
    if [ "$count" -ne "$FILES" ]; then echo "== tmpfs $*: $count of $FILES files" >> "$FAILURES"; echo nan; return; fi
    python3 -c "print(f'{$end - $start:.4f}')"
}
for _ in $(seq 1 "$RUNS"); do
    for tool in "${TOOLS[@]}"; do TMPFS[$tool]="${TMPFS[$tool]:-} $(tmpfs_seconds $(command_for "$tool" tmpfs))"; done
done
rm -rf "${SHM:?}"/*
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
printf '| tool | ext4: s | files/s | vs haul | tmpfs: s | files/s | vs haul | syscalls/file |\n|---|---|---|---|---|---|---|---|\n'
HAUL=$(median ${TIMES[haul]})
HAUL_TMPFS=$(median ${TMPFS[haul]})
for tool in "${TOOLS[@]}"; do
    T=$(median ${TIMES[$tool]}); M=$(median ${TMPFS[$tool]})
    python3 -c "
nan=float('nan')
t,h,m,hm,n,c=$T,$HAUL,$M,$HAUL_TMPFS,$FILES,float('${SYSCALLS[$tool]:-nan}')
print(f'| $tool | {t:.2f} | {n/t:.0f} | {h/t:.2f}x | {m:.2f} | {n/m:.0f} | {hm/m:.2f}x | {c/n:.1f} |')"
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
