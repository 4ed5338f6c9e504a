#!/usr/bin/env bash
# Journal cost (issue "Durable journal"): 10,000 x 4 KiB files from nginx on loopback with `haul get -j 8`, with
# the SQLite journal (the default, DIR/.haul/journal.sqlite) and with --no-journal, alternating, warm-up then
# medians of RUNS runs; on the real disk and on tmpfs (where the file system costs least, so the journal's share
# is largest).   target: the journal adds < 10% to the run time
# "disk" is a freshly made ext4 for every run (a loop file on the real disk) when the machine allows it: on a
# directory reused run after run, ext4's search for free inodes among recently deleted ones made the same command
# swing between about 5 and 8.5 s, more than the journal costs. Otherwise it is a directory in /var/tmp.
# Usage: bash bench/journal/run.sh [RUNS]   (default 3). Needs root for apt-get.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
RUNS=${1:-3}
FILES=${FILES:-10000}

install_missing nginx /usr/bin/time:time
swift build -c release --product haul >/dev/null
HAUL=$(pwd)/.build/release/haul

WORK=$(mktemp -d /var/tmp/haul-bench-journal.XXXXXX)   # /var/tmp: the real disk, not tmpfs
chmod 755 "$WORK"
SHM=$(mktemp -d /dev/shm/haul-bench-journal.XXXXXX)
MNT=$WORK/ext4
cleanup() { stop_nginx; umount "$MNT" 2>/dev/null || true; rm -rf "$WORK" "$SHM"; }
trap cleanup EXIT
# fresh_disk: a new, empty ext4 at $MNT (when loop devices and mkfs.ext4 are there), else an empty $WORK/out.
FRESH=0
truncate -s 2G "$WORK/ext4.img" && mkdir -p "$MNT" && mkfs.ext4 -q -F "$WORK/ext4.img" 2>/dev/null \
    && mount -o loop "$WORK/ext4.img" "$MNT" 2>/dev/null && FRESH=1 || true
fresh_disk() {
    if [ "$FRESH" = 1 ]; then
        umount "$MNT" && mkfs.ext4 -q -F "$WORK/ext4.img" && mount -o loop "$WORK/ext4.img" "$MNT"
        echo "$MNT/out"
    else
        echo "$WORK/out"
    fi
}
mkdir -p "$WORK/www/small"
head -c $((FILES * 4096)) /dev/urandom > "$WORK/blob"
split -b 4096 -a 5 -d "$WORK/blob" "$WORK/www/small/f"
rm "$WORK/blob"
start_nginx "$WORK/www"
ls "$WORK/www/small" | sed "s|^|http://127.0.0.1:$NGINX_PORT/small/|" > "$WORK/list.txt"
FAILURES=/tmp/haul-bench-journal-failures.log
: > "$FAILURES"

# run_into DIR [--no-journal]: "WALL,CPU" seconds of one `haul get` into a fresh DIR (CPU: user + system, from GNU
# time); "nan,nan" unless all files arrived.
run_into() {
    local dir=$1 start end count
    shift
    rm -rf "$dir"; mkdir -p "$dir"; sync
    start=$(date +%s.%N)
    if ! /usr/bin/time -o "$WORK/usage" -f "%U %S" "$HAUL" get -q -j 8 -d "$dir" -i "$WORK/list.txt" "$@" \
        2>>"$FAILURES"; then echo nan,nan; return; fi
    end=$(date +%s.%N)
    count=$(find "$dir" -maxdepth 1 -type f -name 'f*' | wc -l)
    if [ "$count" -ne "$FILES" ]; then echo "== $dir $*: $count of $FILES files" >> "$FAILURES"; echo nan,nan; return; fi
    python3 -c "u, s = open('$WORK/usage').read().split()[-2:]; print(f'{$end - $start:.4f},{float(u) + float(s):.2f}')"
}

echo "warm-up..."
run_into "$WORK/out" >/dev/null
run_into "$WORK/out" --no-journal >/dev/null
declare -A T
# Each round runs both on each destination; which goes first alternates from round to round.
for round in $(seq 1 "$RUNS"); do
    for place in disk tmpfs; do
        for mode in journal none; do
            if [ $((round % 2)) = 0 ]; then [ "$mode" = journal ] && mode=none || mode=journal; fi
            if [ "$place" = tmpfs ]; then dir="$SHM/out"; else dir=$(fresh_disk); fi
            if [ "$mode" = none ]; then flag=--no-journal; else flag=; fi
            T[$place-$mode]="${T[$place-$mode]:-} $(run_into "$dir" $flag)"
        done
    done
done

echo
echo "## Journal cost: $FILES x 4 KiB, haul get -j 8, medians of $RUNS ($(nproc) cores, $(uname -r))"
if [ "$FRESH" = 1 ]; then echo "disk: a fresh ext4 (loop file in /var/tmp) for every run"; else echo "disk: /var/tmp"; fi
echo
echo "| destination | --no-journal wall (s) | journal wall (s) | journal adds | target < 10% | CPU s without / with | CPU adds |"
echo "|---|---|---|---|---|---|---|"
missed=0
for place in disk tmpfs; do
    if python3 - "$place" "${T[$place-none]}" "${T[$place-journal]}" <<'PY'
import statistics, sys
place = sys.argv[1]
def runs(text):
    pairs = [tuple(map(float, item.split(","))) for item in text.split()]
    return [p for p in pairs if p[0] == p[0]]  # drop nan
none, with_ = runs(sys.argv[2]), runs(sys.argv[3])
wall = lambda r: statistics.median(p[0] for p in r)
cpu = lambda r: statistics.median(p[1] for p in r)
added = (wall(with_) / wall(none) - 1) * 100
print(f"| {place} | {wall(none):.2f} | {wall(with_):.2f} | {added:+.1f}% | {'met' if added < 10 else 'MISSED'} "
      f"| {cpu(none):.2f} / {cpu(with_):.2f} | {(cpu(with_) / cpu(none) - 1) * 100:+.1f}% |")
print(f"<!-- {place} wall, no journal: {' '.join(f'{p[0]:.2f}' for p in none)}; journal: "
      f"{' '.join(f'{p[0]:.2f}' for p in with_)} -->", file=sys.stderr)
sys.exit(0 if added < 10 else 1)
PY
    then :; else missed=1; fi
done
if [ -s "$FAILURES" ]; then echo; echo "failed runs (not counted): see $FAILURES"; fi
exit "$missed"
