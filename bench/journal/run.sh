#!/usr/bin/env bash
# Journal cost (issue "Durable journal"): 10,000 x 4 KiB files from nginx on loopback with `haul get -j 8`, with
# the SQLite journal (the default, DIR/.haul/journal.sqlite) and with --no-journal, alternating, warm-up then
# medians of RUNS runs; into three destinations: two on the real disk ("disk" and "reused") and tmpfs (where the
# file system costs least, so the journal's share is largest).
#   target: the journal adds at most 5% to the run time; "met" when the upper end of its 90% interval is under 5%,
#   "met (median only)" when the median is.
# "disk" is a freshly made ext4 for every run (a loop file on the real disk) when the machine allows it, otherwise a
# directory in /var/tmp: every run starts alike. "reused" is one directory on the real disk ($WORK/reused), kept
# from run to run and emptied between runs (its .haul too), as a user's download directory is: there ext4's search
# for free inodes among recently deleted ones falls on every run (it made the same command swing between about 5
# and 8.5 s), as it does for a user.
# Usage: bash bench/journal/run.sh [RUNS]   (default 3; 15 or more for a verdict). Needs root for apt-get and the
# loop mount. FILES (default 10000) changes the count; HAUL=path/to/haul measures that binary instead of building.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
RUNS=${1:-3}
FILES=${FILES:-10000}

install_missing nginx /usr/bin/time:time
if [[ -z "${HAUL:-}" ]]; then build_haul; fi

WORK=$(mktemp -d /var/tmp/haul-bench-journal.XXXXXX)   # /var/tmp: the real disk, not tmpfs
chmod 755 "$WORK"
SHM=$(mktemp -d /dev/shm/haul-bench-journal.XXXXXX)
MNT=$WORK/ext4
REUSED=$WORK/reused
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
small_files "$WORK/www/small" "$FILES"
start_nginx "$WORK/www"
ls "$WORK/www/small" | sed "s|^|http://127.0.0.1:$NGINX_PORT/small/|" > "$WORK/list.txt"
FAILURES=/tmp/haul-bench-journal-failures.log
: > "$FAILURES"

# run_into DIR [--no-journal]: "WALL,CPU" seconds of one `haul get` into DIR (CPU: user + system, from GNU time);
# "nan,nan" unless all files arrived. DIR is emptied first, its hidden .haul too, and kept: "reused" stays the same
# directory from run to run.
run_into() {
    local dir=$1 start end count
    shift
    mkdir -p "$dir"; find "$dir" -mindepth 1 -delete; sync
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
    for place in disk reused tmpfs; do
        for mode in journal none; do
            if [ $((round % 2)) = 0 ]; then [ "$mode" = journal ] && mode=none || mode=journal; fi
            case $place in
                disk) dir=$(fresh_disk) ;;
                reused) dir=$REUSED ;;
                tmpfs) dir="$SHM/out" ;;
            esac
            if [ "$mode" = none ]; then flag=--no-journal; else flag=; fi
            T[$place-$mode]="${T[$place-$mode]:-} $(run_into "$dir" $flag)"
        done
    done
done

echo
echo "## Journal cost: $FILES x 4 KiB, haul get -j 8, medians of $RUNS ($(nproc) cores, $(uname -r))"
if [ "$FRESH" = 1 ]; then echo "disk: a fresh ext4 (loop file in /var/tmp) for every run"; else echo "disk: /var/tmp"; fi
echo "reused: one directory in /var/tmp, kept from run to run, emptied between runs (as a user's download directory)"
echo
echo "Paired: each round runs both modes back to back on the same destination, so a slow stretch of this shared"
echo "machine hits both; \"journal adds\" is the median of the rounds' ratios, with a bootstrap 90% interval."
echo
echo "| destination | --no-journal wall (s) | journal wall (s) | journal adds (90% interval) | target <= 5% | CPU s without / with | CPU adds |"
echo "|---|---|---|---|---|---|---|"
missed=0
for place in disk reused tmpfs; do
    if python3 - "$place" "${T[$place-none]}" "${T[$place-journal]}" <<'PY'
import random, statistics, sys
place = sys.argv[1]
runs = lambda text: [tuple(map(float, item.split(","))) for item in text.split()]
# Rounds where both modes finished (a failed run is "nan,nan" and drops its round).
pairs = [(a, b) for a, b in zip(runs(sys.argv[2]), runs(sys.argv[3])) if a[0] == a[0] and b[0] == b[0]]
if not pairs:
    print(f"| {place} | - | - | - | no complete round | - | - |")
    sys.exit(1)
ratios = [b[0] / a[0] for a, b in pairs]
added = (statistics.median(ratios) - 1) * 100
random.seed(1)
medians = sorted(statistics.median(random.choices(ratios, k=len(ratios))) for _ in range(2000))
low, high = ((medians[int(q * len(medians))] - 1) * 100 for q in (0.05, 0.95))
verdict = "met" if high < 5 else "met (median only)" if added < 5 else "MISSED"
wall = lambda i: statistics.median(p[i][0] for p in pairs)
cpu = lambda i: statistics.median(p[i][1] for p in pairs)
print(f"| {place} | {wall(0):.2f} | {wall(1):.2f} | {added:+.1f}% ({low:+.1f} .. {high:+.1f}) | {verdict} "
      f"| {cpu(0):.2f} / {cpu(1):.2f} | {(cpu(1) / cpu(0) - 1) * 100:+.1f}% |")
print(f"<!-- {place} rounds (wall s, --no-journal / journal): "
      f"{' '.join(f'{a[0]:.2f}/{b[0]:.2f}' for a, b in pairs)} -->", file=sys.stderr)
sys.exit(0 if added < 5 else 1)
PY
    then :; else missed=1; fi
done
if [ -s "$FAILURES" ]; then echo; echo "failed runs (not counted): see $FAILURES"; fi
exit "$missed"
